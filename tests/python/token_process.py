"""One process's use of a token, run by the tests as a separate process.

    python token_process.py ACTION < payload.json

The keystore comes from the environment (token_setup.prepare_keystore); the
answer is one line of JSON on stdout. Actions:

  fresh-pin   on a fresh token: flags, CKR_PIN_EXPIRED before C_SetPIN, the
              changed PIN in force, the old and a wrong PIN refused
  create      first login (changes the PIN), creates token objects, reports
              what a later process must find
  check       a later process: logs in with the changed PIN, finds the objects
              by label, id and class, and uses them
  find        counts token objects with a label (payload {"label": ...})
  create-one  creates one token data object (payload {"label": ...})
  set-pin     logs in with the default PIN and changes it (payload {"new": ...})
  set-encrypt sets CKA_ENCRYPT of the token key with a label (payload {"label": ...,
              "value": true|false})
  destroy     destroys the token objects with a label (payload {"label": ...})
  pin-changed-elsewhere
              on a fresh token: logged in with the expired default PIN, calls get
              CKR_PIN_EXPIRED; another process (set-pin) changes the PIN; the same
              session then works without logging in again
"""

from __future__ import annotations

import hashlib
import json
import sys

import p11ext
import token_setup as ts
from pkcs11 import Attribute, GCMParams, KeyType, Mechanism, ObjectClass
from pkcs11.exceptions import PinExpired, PinIncorrect

MESSAGE = b"persistence across processes"
NONCE = bytes(range(12))
HMAC_KEY = bytes(range(32))
EC_P256 = p11ext.der_oid(p11ext.CURVES["secp256r1"][0])


def token_flags(lib) -> int:
    return int(ts.get_token(lib).flags)


def fresh_pin(lib, payload):
    token = ts.get_token(lib)
    out = {
        "label": token.label,
        "to_be_changed_before": bool(int(token.flags) & p11ext.CKF_USER_PIN_TO_BE_CHANGED),
    }
    session = token.open(rw=True, user_pin=ts.DEFAULT_PIN)
    try:
        session.generate_key(KeyType.AES, 128)
        out["object_call_before_setpin"] = "CKR_OK"
    except PinExpired:
        out["object_call_before_setpin"] = "CKR_PIN_EXPIRED"
    session.set_pin(ts.DEFAULT_PIN, ts.USER_PIN)
    key = session.generate_key(KeyType.AES, 128)
    out["value_len_after_setpin"] = key[Attribute.VALUE_LEN]
    out["to_be_changed_after"] = bool(token_flags(lib) & p11ext.CKF_USER_PIN_TO_BE_CHANGED)
    session.close()  # closing the last session logs the user out

    for name, pin in (("old_pin", ts.DEFAULT_PIN), ("wrong_pin", "not-the-pin")):
        try:
            token.open(rw=True, user_pin=pin).close()
            out[name] = "CKR_OK"
        except PinIncorrect:
            out[name] = "CKR_PIN_INCORRECT"
    s = ts.login(token)
    out["new_pin"] = "CKR_OK"
    s.close()
    return out


def create(lib, payload):
    token = ts.get_token(lib)
    s = ts.first_login(token)
    aes = s.generate_key(KeyType.AES, 256, id=b"\x01", label="persist-aes", store=True)
    rsa_pub, rsa_priv = s.generate_keypair(KeyType.RSA, 2048, id=b"\x02", label="persist-rsa", store=True)
    ec_pub, ec_priv = s.generate_keypair(
        KeyType.EC, id=b"\x03", label="persist-ec", store=True,
        public_template={Attribute.EC_PARAMS: EC_P256},
    )
    s.create_object({
        Attribute.CLASS: ObjectClass.SECRET_KEY, Attribute.KEY_TYPE: KeyType.GENERIC_SECRET,
        Attribute.TOKEN: True, Attribute.PRIVATE: True, Attribute.SENSITIVE: True,
        Attribute.SIGN: True, Attribute.VERIFY: True,
        Attribute.ID: b"\x04", Attribute.LABEL: "persist-hmac", Attribute.VALUE: HMAC_KEY,
    })
    s.create_object({
        Attribute.CLASS: ObjectClass.DATA, Attribute.TOKEN: True, Attribute.PRIVATE: False,
        Attribute.LABEL: "persist-data", Attribute.APPLICATION: "opencf-tests",
        Attribute.VALUE: b"data object value",
    })
    session_only = s.generate_key(KeyType.AES, 128, label="persist-session-only", store=False)
    ciphertext = aes.encrypt(MESSAGE, mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(NONCE))
    out = {
        "gcm_ciphertext": ciphertext.hex(),
        "rsa_modulus": rsa_pub[Attribute.MODULUS].hex(),
        "rsa_exponent": rsa_pub[Attribute.PUBLIC_EXPONENT].hex(),
        "ec_point": ec_pub[Attribute.EC_POINT].hex(),
        "session_only_is_token": bool(session_only[Attribute.TOKEN]),
    }
    s.close()
    return out


def check(lib, payload):
    token = ts.get_token(lib)
    out = {"to_be_changed": bool(int(token.flags) & p11ext.CKF_USER_PIN_TO_BE_CHANGED)}
    s = ts.login(token)
    aes = s.get_key(label="persist-aes")
    out["aes_by_label_id"] = aes[Attribute.ID].hex()
    out["aes_value_len"] = aes[Attribute.VALUE_LEN]
    out["gcm_plaintext"] = aes.decrypt(
        bytes.fromhex(payload["gcm_ciphertext"]), mechanism=Mechanism.AES_GCM,
        mechanism_param=GCMParams(NONCE)).hex()
    rsa_priv = s.get_key(object_class=ObjectClass.PRIVATE_KEY, id=b"\x02")
    rsa_pub = s.get_key(object_class=ObjectClass.PUBLIC_KEY, id=b"\x02")
    out["rsa_modulus"] = rsa_pub[Attribute.MODULUS].hex()
    out["rsa_signature"] = rsa_priv.sign(MESSAGE, mechanism=Mechanism.SHA256_RSA_PKCS).hex()
    ec_priv = s.get_key(object_class=ObjectClass.PRIVATE_KEY, key_type=KeyType.EC, label="persist-ec")
    out["ec_signature"] = ec_priv.sign(hashlib.sha256(MESSAGE).digest(), mechanism=Mechanism.ECDSA).hex()
    hmac_key = s.get_key(object_class=ObjectClass.SECRET_KEY, id=b"\x04")
    out["hmac_tag"] = hmac_key.sign(MESSAGE, mechanism=Mechanism.SHA256_HMAC).hex()
    data = list(s.get_objects({Attribute.CLASS: ObjectClass.DATA, Attribute.LABEL: "persist-data"}))
    out["data_values"] = [d[Attribute.VALUE].hex() for d in data]
    out["session_only_found"] = len(list(s.get_objects({Attribute.LABEL: "persist-session-only"})))
    out["private_key_labels"] = sorted(
        o[Attribute.LABEL] for o in s.get_objects({Attribute.CLASS: ObjectClass.PRIVATE_KEY}))
    s.close()
    return out


def find(lib, payload):
    s = ts.login(ts.get_token(lib))
    objs = list(s.get_objects({Attribute.TOKEN: True, Attribute.LABEL: payload["label"]}))
    out = {"count": len(objs), "values": [o[Attribute.VALUE].hex() for o in objs]}
    s.close()
    return out


def create_one(lib, payload):
    s = ts.login(ts.get_token(lib))
    s.create_object({
        Attribute.CLASS: ObjectClass.DATA, Attribute.TOKEN: True, Attribute.PRIVATE: True,
        Attribute.LABEL: payload["label"], Attribute.VALUE: bytes.fromhex(payload["value"]),
    })
    s.close()
    return {"created": True}


def set_pin(lib, payload):
    session = ts.get_token(lib).open(rw=True, user_pin=ts.DEFAULT_PIN)
    session.set_pin(ts.DEFAULT_PIN, payload["new"])
    session.close()
    return {"changed": True}


def pin_changed_elsewhere(lib, payload):
    import os
    import subprocess

    token = ts.get_token(lib)
    session = token.open(rw=True, user_pin=ts.DEFAULT_PIN)
    out = {}
    try:
        session.generate_key(KeyType.AES, 128)
        out["before"] = "CKR_OK"
    except PinExpired:
        out["before"] = "CKR_PIN_EXPIRED"
    other = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "set-pin"],
        input=json.dumps({"new": ts.USER_PIN}), capture_output=True, text=True, timeout=120,
    )
    out["other_process"] = other.returncode
    try:
        key = session.generate_key(KeyType.AES, 128)
        out["after"] = "CKR_OK"
        out["value_len"] = key[Attribute.VALUE_LEN]
    except PinExpired:
        out["after"] = "CKR_PIN_EXPIRED"
    session.close()
    return out


def set_encrypt(lib, payload):
    s = ts.login(ts.get_token(lib))
    (key,) = s.get_objects({Attribute.TOKEN: True, Attribute.LABEL: payload["label"]})
    key[Attribute.ENCRYPT] = payload["value"]
    s.close()
    return {"set": True}


def destroy(lib, payload):
    s = ts.login(ts.get_token(lib))
    objs = list(s.get_objects({Attribute.TOKEN: True, Attribute.LABEL: payload["label"]}))
    for o in objs:
        o.destroy()
    s.close()
    return {"destroyed": len(objs)}


ACTIONS = {
    "set-encrypt": set_encrypt,
    "destroy": destroy,
    "set-pin": set_pin,
    "pin-changed-elsewhere": pin_changed_elsewhere,
    "fresh-pin": fresh_pin,
    "create": create,
    "check": check,
    "find": find,
    "create-one": create_one,
}


def main() -> int:
    action = sys.argv[1]
    payload = json.loads(sys.stdin.read() or "{}")
    lib = ts.load()
    result = ACTIONS[action](lib, payload)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
