"""Token, PIN, random, object search and attribute handling."""

from __future__ import annotations

import uuid

import p11ext
import pytest
import token_setup as ts
from pkcs11 import Attribute, KeyType, Mechanism, MechanismFlag, ObjectClass, TokenFlag
from pkcs11.exceptions import (
    AttributeReadOnly,
    AttributeSensitive,
    NoSuchKey,
    PKCS11Error,
)

# Every mechanism the software token must offer (issue: "Mechanisms").
REQUIRED_MECHANISMS = [
    Mechanism.SHA_1, Mechanism.SHA224, Mechanism.SHA256, Mechanism.SHA384, Mechanism.SHA512,
    Mechanism.SHA3_224, Mechanism.SHA3_256, Mechanism.SHA3_384, Mechanism.SHA3_512,
    Mechanism.SHA_1_HMAC, Mechanism.SHA224_HMAC, Mechanism.SHA256_HMAC, Mechanism.SHA384_HMAC,
    Mechanism.SHA512_HMAC, Mechanism.SHA3_224_HMAC, Mechanism.SHA3_256_HMAC,
    Mechanism.SHA3_384_HMAC, Mechanism.SHA3_512_HMAC,
    Mechanism.SHA_1_HMAC_GENERAL, Mechanism.SHA256_HMAC_GENERAL, Mechanism.SHA512_HMAC_GENERAL,
    Mechanism.SHA3_256_HMAC_GENERAL,
    Mechanism.GENERIC_SECRET_KEY_GEN,
    Mechanism.AES_KEY_GEN, Mechanism.AES_ECB, Mechanism.AES_CBC, Mechanism.AES_CBC_PAD,
    Mechanism.AES_CTR, Mechanism.AES_GCM, Mechanism.AES_CMAC, Mechanism.AES_KEY_WRAP,
    Mechanism.AES_KEY_WRAP_KWP,
    p11ext.CKM_CHACHA20_KEY_GEN, p11ext.CKM_CHACHA20_POLY1305,
    Mechanism.DES3_KEY_GEN, Mechanism.DES3_ECB, Mechanism.DES3_CBC, Mechanism.DES3_CBC_PAD,
    Mechanism.RSA_PKCS_KEY_PAIR_GEN, Mechanism.RSA_PKCS, Mechanism.RSA_X_509,
    Mechanism.RSA_PKCS_PSS, Mechanism.RSA_PKCS_OAEP,
    Mechanism.SHA1_RSA_PKCS, Mechanism.SHA224_RSA_PKCS, Mechanism.SHA256_RSA_PKCS,
    Mechanism.SHA384_RSA_PKCS, Mechanism.SHA512_RSA_PKCS,
    Mechanism.SHA1_RSA_PKCS_PSS, Mechanism.SHA224_RSA_PKCS_PSS, Mechanism.SHA256_RSA_PKCS_PSS,
    Mechanism.SHA384_RSA_PKCS_PSS, Mechanism.SHA512_RSA_PKCS_PSS,
    Mechanism.EC_KEY_PAIR_GEN, Mechanism.ECDSA, Mechanism.ECDSA_SHA1, Mechanism.ECDSA_SHA224,
    Mechanism.ECDSA_SHA256, Mechanism.ECDSA_SHA384, Mechanism.ECDSA_SHA512,
    Mechanism.ECDH1_DERIVE,
    Mechanism.EC_EDWARDS_KEY_PAIR_GEN, Mechanism.EDDSA, p11ext.CKM_EC_MONTGOMERY_KEY_PAIR_GEN,
    Mechanism.ML_DSA_KEY_PAIR_GEN, Mechanism.ML_DSA, Mechanism.ML_KEM_KEY_PAIR_GEN, Mechanism.ML_KEM,
    Mechanism.PKCS5_PBKD2, p11ext.CKM_HKDF_DERIVE,
]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.mark.skipif(ts.softhsm_mode(), reason="SoftHSMv2 lacks many of these mechanisms")
def test_every_required_mechanism_is_listed(mechanisms):
    missing = [getattr(m, "name", hex(m)) for m in REQUIRED_MECHANISMS if int(m) not in mechanisms]
    assert missing == [], f"C_GetMechanismList lacks: {', '.join(missing)}"


@pytest.mark.mechanisms(Mechanism.RSA_PKCS_KEY_PAIR_GEN, Mechanism.AES_KEY_GEN)
def test_mechanism_info_key_sizes(token):
    rsa = token.slot.get_mechanism_info(Mechanism.RSA_PKCS_KEY_PAIR_GEN)
    assert rsa.min_key_length <= 1024 and rsa.max_key_length >= 8192
    assert MechanismFlag.GENERATE_KEY_PAIR in rsa.flags
    aes = token.slot.get_mechanism_info(Mechanism.AES_KEY_GEN)
    assert aes.min_key_length <= 16 and aes.max_key_length >= 32
    assert MechanismFlag.GENERATE in aes.flags


def test_token_info_after_pin_change(lib, user_login):
    token = ts.get_token(lib)  # fresh C_GetTokenInfo
    assert token.label == ts.TOKEN_LABEL
    for flag in (TokenFlag.LOGIN_REQUIRED, TokenFlag.USER_PIN_INITIALIZED,
                 TokenFlag.TOKEN_INITIALIZED, TokenFlag.RNG):
        assert flag in token.flags, f"{flag.name} missing from {token.flags!r}"
    assert not int(token.flags) & p11ext.CKF_USER_PIN_TO_BE_CHANGED


def test_spare_uninitialized_token_is_offered(lib):
    states = []
    for slot in lib.get_slots(token_present=True):
        states.append(TokenFlag.TOKEN_INITIALIZED in slot.get_token().flags)
    assert True in states, "no initialised token"
    assert False in states, "no uninitialised token offered for C_InitToken"


def test_fresh_token_pin_lifecycle(token_process):
    out = token_process("fresh-pin")
    assert out["label"] == ts.TOKEN_LABEL
    if not ts.softhsm_mode():  # SoftHSMv2 has no forced PIN change
        assert out["to_be_changed_before"] is True
        assert out["object_call_before_setpin"] == "CKR_PIN_EXPIRED"
    assert out["value_len_after_setpin"] == 16
    assert out["to_be_changed_after"] is False
    assert out["old_pin"] == "CKR_PIN_INCORRECT"
    assert out["wrong_pin"] == "CKR_PIN_INCORRECT"
    assert out["new_pin"] == "CKR_OK"


def test_generate_random(session):
    a = session.generate_random(256)
    b = session.generate_random(256)
    assert len(a) == 32 and len(b) == 32
    assert a != b
    big = session.generate_random(8 * 4096)
    assert len(big) == 4096
    assert len(set(big)) > 200  # 4096 random bytes cover most byte values


def _data_object(session, label, value, *, token=False, app="opencf-tests"):
    return session.create_object({
        Attribute.CLASS: ObjectClass.DATA, Attribute.TOKEN: token, Attribute.PRIVATE: True,
        Attribute.LABEL: label, Attribute.APPLICATION: app, Attribute.VALUE: value,
    })


def _secret(session, label, value, *, id_=b"", extra=None):
    attrs = {
        Attribute.CLASS: ObjectClass.SECRET_KEY, Attribute.KEY_TYPE: KeyType.GENERIC_SECRET,
        Attribute.TOKEN: False, Attribute.SIGN: True, Attribute.VERIFY: True,
        Attribute.LABEL: label, Attribute.ID: id_, Attribute.VALUE: value,
    }
    attrs.update(extra or {})
    return session.create_object(attrs)


def test_find_by_label_id_and_class(session):
    label = unique("find")
    _data_object(session, label, b"one")
    _data_object(session, label, b"two")
    _secret(session, label, b"k" * 32, id_=b"\xaa\x01")
    _secret(session, unique("other"), b"q" * 32, id_=b"\xaa\x01")

    by_label = list(session.get_objects({Attribute.LABEL: label}))
    assert len(by_label) == 3

    data = list(session.get_objects({Attribute.CLASS: ObjectClass.DATA, Attribute.LABEL: label}))
    assert sorted(o[Attribute.VALUE] for o in data) == [b"one", b"two"]

    by_id = list(session.get_objects({Attribute.CLASS: ObjectClass.SECRET_KEY, Attribute.ID: b"\xaa\x01"}))
    assert len(by_id) == 2

    key = session.get_key(object_class=ObjectClass.SECRET_KEY, label=label)
    assert key[Attribute.ID] == b"\xaa\x01"

    assert list(session.get_objects({Attribute.LABEL: unique("absent")})) == []
    with pytest.raises(NoSuchKey):
        session.get_key(label=unique("absent"))


def test_find_many_objects_in_batches(session):
    label = unique("batch")
    for i in range(45):
        _data_object(session, label, i.to_bytes(2, "big"))
    found = list(session.get_objects({Attribute.LABEL: label}))  # batches of 10
    assert sorted(int.from_bytes(o[Attribute.VALUE], "big") for o in found) == list(range(45))


def test_session_objects_end_with_their_session(token, user_login):
    label = unique("ephemeral")
    s1 = token.open(rw=True)
    _data_object(s1, label, b"x")
    s2 = token.open(rw=True)
    assert len(list(s2.get_objects({Attribute.LABEL: label}))) == 1  # visible to the app
    s1.close()
    assert list(s2.get_objects({Attribute.LABEL: label})) == []
    s2.close()


def test_set_copy_destroy(session):
    label = unique("attrs")
    obj = _data_object(session, label, b"original")
    new_label = unique("renamed")
    obj[Attribute.LABEL] = new_label
    assert list(session.get_objects({Attribute.LABEL: label})) == []
    assert len(list(session.get_objects({Attribute.LABEL: new_label}))) == 1

    copy = obj.copy({Attribute.LABEL: label})
    assert copy[Attribute.VALUE] == b"original"
    assert len(list(session.get_objects({Attribute.LABEL: label}))) == 1

    copy.destroy()
    obj.destroy()
    assert list(session.get_objects({Attribute.LABEL: label})) == []
    assert list(session.get_objects({Attribute.LABEL: new_label})) == []


@pytest.mark.mechanisms(Mechanism.AES_KEY_GEN)
def test_sensitive_key_stays_hidden(session):
    key = session.generate_key(KeyType.AES, 256, label=unique("sens"),
                               template={Attribute.SENSITIVE: True, Attribute.EXTRACTABLE: False})
    assert key[Attribute.SENSITIVE] is True
    assert key[Attribute.ALWAYS_SENSITIVE] is True
    assert key[Attribute.NEVER_EXTRACTABLE] is True
    with pytest.raises(AttributeSensitive):
        key[Attribute.VALUE]
    with pytest.raises(PKCS11Error):
        key[Attribute.SENSITIVE] = False
    with pytest.raises(PKCS11Error):
        key[Attribute.EXTRACTABLE] = True
    assert key[Attribute.SENSITIVE] is True
    assert key[Attribute.EXTRACTABLE] is False


@pytest.mark.mechanisms(Mechanism.AES_KEY_GEN)
def test_read_only_attribute_cannot_change(session):
    key = session.generate_key(KeyType.AES, 128, label=unique("ro"))
    with pytest.raises((AttributeReadOnly, PKCS11Error)):
        key[Attribute.CLASS] = ObjectClass.DATA
    assert key[Attribute.CLASS] == ObjectClass.SECRET_KEY
    assert key[Attribute.LOCAL] is True
    assert key[Attribute.KEY_GEN_MECHANISM] == Mechanism.AES_KEY_GEN
