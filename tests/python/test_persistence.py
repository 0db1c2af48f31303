"""Token objects outlive the process that made them, and several processes use
one token at once. Each process here is a separate Python interpreter that
loads the module afresh (token_process.py)."""

from __future__ import annotations

import hashlib
import hmac
import os

import pytest

import token_setup as ts
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed, encode_dss_signature
from testkeys import unique
from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass
from pkcs11.exceptions import KeyHandleInvalid, ObjectHandleInvalid, PKCS11Error
from token_process import HMAC_KEY, MESSAGE


def test_objects_survive_process_restart(tmp_path, token_process):
    keystore = ts.prepare_keystore(tmp_path / "persist")
    made = token_process("create", keystore=keystore)
    assert made["session_only_is_token"] is False

    found = token_process("check", keystore=keystore, payload=made)
    assert found["to_be_changed"] is False  # the PIN change itself persisted
    assert found["aes_by_label_id"] == "01"
    assert found["aes_value_len"] == 32
    assert bytes.fromhex(found["gcm_plaintext"]) == MESSAGE
    assert found["rsa_modulus"] == made["rsa_modulus"]
    n = int(made["rsa_modulus"], 16)
    e = int(made["rsa_exponent"], 16)
    rsa.RSAPublicNumbers(e, n).public_key().verify(
        bytes.fromhex(found["rsa_signature"]), MESSAGE, padding.PKCS1v15(), hashes.SHA256())

    point = bytes.fromhex(made["ec_point"])
    point = point[2:] if len(point) == 67 else point  # DER OCTET STRING or raw
    ec_pub = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    sig = bytes.fromhex(found["ec_signature"])
    ec_pub.verify(encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")),
                  hashlib.sha256(MESSAGE).digest(), ec.ECDSA(Prehashed(hashes.SHA256())))

    assert bytes.fromhex(found["hmac_tag"]) == hmac.new(HMAC_KEY, MESSAGE, "sha256").digest()
    assert found["data_values"] == [b"data object value".hex()]
    assert found["session_only_found"] == 0
    assert found["private_key_labels"] == ["persist-ec", "persist-rsa"]

    again = token_process("check", keystore=keystore, payload=made)  # and a third process
    assert again["rsa_signature"] == found["rsa_signature"]  # PKCS#1 v1.5 is deterministic


def test_second_process_sees_objects_of_this_one(session, keystore_env, token_process):
    label = unique("shared")
    value = os.urandom(24)
    session.create_object({
        Attribute.CLASS: ObjectClass.DATA, Attribute.TOKEN: True, Attribute.PRIVATE: True,
        Attribute.LABEL: label, Attribute.VALUE: value,
    })
    out = token_process("find", keystore=keystore_env, payload={"label": label})
    assert out == {"count": 1, "values": [value.hex()]}


def test_this_process_sees_objects_of_another(session, keystore_env, token_process):
    label = unique("from-other")
    value = os.urandom(24)
    token_process("create-one", keystore=keystore_env, payload={"label": label, "value": value.hex()})
    found = list(session.get_objects({Attribute.TOKEN: True, Attribute.LABEL: label}))
    assert [o[Attribute.VALUE] for o in found] == [value]
    found[0].destroy()
    assert token_process("find", keystore=keystore_env, payload={"label": label})["count"] == 0


def test_a_key_changed_by_another_process_is_seen_at_its_next_use(session, keystore_env, token_process):
    """A session that already used a token key sees another process turn its CKA_ENCRYPT off
    and on, then destroy it, at the key's next use: not only in a new session or search."""
    label = unique("changed-elsewhere")
    key = session.generate_key(KeyType.AES, 128, label=label, store=True, template={
        Attribute.ENCRYPT: True, Attribute.DECRYPT: True})
    block = bytes(16)
    first = key.encrypt(block, mechanism=Mechanism.AES_ECB)
    token_process("set-encrypt", keystore=keystore_env, payload={"label": label, "value": False})
    with pytest.raises(PKCS11Error) as refused:  # CKR_KEY_FUNCTION_NOT_PERMITTED
        key.encrypt(block, mechanism=Mechanism.AES_ECB)
    assert "0x68" in str(refused.value), refused.value  # python-pkcs11 has no class for it
    token_process("set-encrypt", keystore=keystore_env, payload={"label": label, "value": True})
    assert key.encrypt(block, mechanism=Mechanism.AES_ECB) == first
    assert token_process("destroy", keystore=keystore_env, payload={"label": label}) == {"destroyed": 1}
    with pytest.raises((KeyHandleInvalid, ObjectHandleInvalid)):
        key.encrypt(block, mechanism=Mechanism.AES_ECB)


@pytest.mark.skipif(ts.softhsm_mode(), reason="SoftHSMv2 has no forced PIN change")
def test_a_pin_changed_by_another_process_lifts_the_expiry(token_process):
    """A session logged in with the expired default PIN gets CKR_PIN_EXPIRED; once another
    process has changed the PIN, the same session works: the expiry is read again from the
    keystore, not kept from the login."""
    out = token_process("pin-changed-elsewhere")
    assert out == {
        "before": "CKR_PIN_EXPIRED",
        "other_process": 0,
        "after": "CKR_OK",
        "value_len": 16,
    }
