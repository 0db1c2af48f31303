"""AES: key generation, ECB/CBC/CBC_PAD/CTR/GCM, CMAC, key wrap (RFC 3394)
and KWP (RFC 5649). Known keys are imported so that every result can be
compared with the `cryptography` package."""

from __future__ import annotations

import os
import struct

import pytest
import token_setup as ts
from cryptography.hazmat.primitives import cmac, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import (
    aes_key_unwrap_with_padding,
    aes_key_wrap,
    aes_key_wrap_with_padding,
)
from testkeys import READABLE, import_secret, unique
from pkcs11 import Attribute, CTRParams, GCMParams, KeyType, Mechanism, MechanismFlag, ObjectClass
from pkcs11.exceptions import PKCS11Error

KEY_BITS = [128, 192, 256]


def aes_key(session, bits, **flags):
    value = os.urandom(bits // 8)
    flags = flags or {"encrypt": True, "decrypt": True}
    return value, import_secret(session, KeyType.AES, value, **flags)


def ref(value, mode):
    return Cipher(algorithms.AES(value), mode)


@pytest.mark.mechanisms(Mechanism.AES_KEY_GEN, Mechanism.AES_CBC_PAD)
@pytest.mark.parametrize("bits", KEY_BITS)
def test_generate_and_round_trip(session, bits):
    key = session.generate_key(KeyType.AES, bits, label=unique("aes"))
    assert key[Attribute.VALUE_LEN] == bits // 8
    assert key[Attribute.KEY_TYPE] == KeyType.AES
    assert key[Attribute.CLASS] == ObjectClass.SECRET_KEY
    iv = os.urandom(16)
    data = os.urandom(100)
    ct = key.encrypt(data, mechanism=Mechanism.AES_CBC_PAD, mechanism_param=iv)
    assert len(ct) == 112 and ct[:100] != data
    assert key.decrypt(ct, mechanism=Mechanism.AES_CBC_PAD, mechanism_param=iv) == data


@pytest.mark.mechanisms(Mechanism.AES_KEY_GEN)
def test_generated_keys_differ(session):
    a = session.generate_key(KeyType.AES, 256, template=READABLE)
    b = session.generate_key(KeyType.AES, 256, template=READABLE)
    assert a[Attribute.VALUE] != b[Attribute.VALUE]


@pytest.mark.mechanisms(Mechanism.AES_ECB)
@pytest.mark.parametrize("bits", KEY_BITS)
def test_ecb_matches_reference(session, bits):
    value, key = aes_key(session, bits)
    data = os.urandom(16 * 7)
    enc = ref(value, modes.ECB()).encryptor()
    expected = enc.update(data) + enc.finalize()
    assert key.encrypt(data, mechanism=Mechanism.AES_ECB) == expected
    assert key.decrypt(expected, mechanism=Mechanism.AES_ECB) == data
    with pytest.raises(PKCS11Error):  # not a whole number of blocks
        key.encrypt(data[:-1], mechanism=Mechanism.AES_ECB)


@pytest.mark.mechanisms(Mechanism.AES_CBC)
@pytest.mark.parametrize("bits", KEY_BITS)
def test_cbc_matches_reference(session, bits):
    value, key = aes_key(session, bits)
    iv = os.urandom(16)
    data = os.urandom(16 * 40)
    enc = ref(value, modes.CBC(iv)).encryptor()
    expected = enc.update(data) + enc.finalize()
    assert key.encrypt(data, mechanism=Mechanism.AES_CBC, mechanism_param=iv) == expected
    # multi-part with chunks that do not fall on block boundaries
    chunks = [data[:5], data[5:300], data[300:301], data[301:]]
    assert b"".join(key.encrypt(iter(chunks), mechanism=Mechanism.AES_CBC, mechanism_param=iv)) == expected
    assert key.decrypt(expected, mechanism=Mechanism.AES_CBC, mechanism_param=iv) == data


@pytest.mark.mechanisms(Mechanism.AES_CBC_PAD)
@pytest.mark.parametrize("length", [0, 1, 15, 16, 17, 1000])
def test_cbc_pad_matches_reference(session, length):
    value, key = aes_key(session, 256)
    iv = os.urandom(16)
    data = os.urandom(length)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(data) + padder.finalize()
    enc = ref(value, modes.CBC(iv)).encryptor()
    expected = enc.update(padded) + enc.finalize()
    assert key.encrypt(data, mechanism=Mechanism.AES_CBC_PAD, mechanism_param=iv) == expected
    assert key.decrypt(expected, mechanism=Mechanism.AES_CBC_PAD, mechanism_param=iv) == data
    if length:
        chunks = [expected[:7], expected[7:]]
        assert b"".join(key.decrypt(iter(chunks), mechanism=Mechanism.AES_CBC_PAD,
                                    mechanism_param=iv)) == data


@pytest.mark.mechanisms(Mechanism.AES_CTR)
@pytest.mark.parametrize("length", [1, 16, 1000])
def test_ctr_matches_reference(session, length):
    value, key = aes_key(session, 128)
    nonce = os.urandom(12)
    counter_block = nonce + b"\x00\x00\x00\x01"  # what CTRParams sends as cb
    data = os.urandom(length)
    enc = ref(value, modes.CTR(counter_block)).encryptor()
    expected = enc.update(data) + enc.finalize()
    param = CTRParams(nonce)
    assert key.encrypt(data, mechanism=Mechanism.AES_CTR, mechanism_param=param) == expected
    assert key.decrypt(expected, mechanism=Mechanism.AES_CTR, mechanism_param=param) == data


@pytest.mark.mechanisms(Mechanism.AES_GCM)
@pytest.mark.parametrize("bits", KEY_BITS)
@pytest.mark.parametrize("aad", [None, b"header"])
def test_gcm_matches_reference(session, bits, aad):
    value, key = aes_key(session, bits)
    nonce = os.urandom(12)
    data = os.urandom(333)
    expected = AESGCM(value).encrypt(nonce, data, aad)
    param = GCMParams(nonce, aad)
    assert key.encrypt(data, mechanism=Mechanism.AES_GCM, mechanism_param=param) == expected
    assert key.decrypt(expected, mechanism=Mechanism.AES_GCM, mechanism_param=param) == data


@pytest.mark.mechanisms(Mechanism.AES_GCM)
def test_gcm_rejects_tampering(session):
    value, key = aes_key(session, 256)
    nonce = os.urandom(12)
    ct = key.encrypt(b"attack at dawn", mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(nonce, b"aad"))
    assert AESGCM(value).decrypt(nonce, ct, b"aad") == b"attack at dawn"
    tampered = bytes([ct[0] ^ 1]) + ct[1:]
    with pytest.raises(PKCS11Error):
        key.decrypt(tampered, mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(nonce, b"aad"))
    with pytest.raises(PKCS11Error):
        key.decrypt(ct, mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(nonce, b"other"))


@pytest.mark.mechanisms(Mechanism.AES_GCM)
def test_gcm_short_tag(session):
    value, key = aes_key(session, 128)
    nonce = os.urandom(12)
    ct = key.encrypt(b"x" * 40, mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(nonce, None, 96))
    assert len(ct) == 40 + 12
    assert ct == AESGCM(value).encrypt(nonce, b"x" * 40, None)[:40 + 12]


@pytest.mark.mechanisms(Mechanism.AES_CMAC, Mechanism.AES_CMAC_GENERAL)
@pytest.mark.parametrize("bits", [128, 256])
@pytest.mark.parametrize("length", [0, 16, 100])
def test_cmac_matches_reference(session, bits, length):
    value, key = aes_key(session, bits, sign=True, verify=True)
    data = os.urandom(length)
    c = cmac.CMAC(algorithms.AES(value))
    c.update(data)
    expected = c.finalize()
    assert key.sign(data, mechanism=Mechanism.AES_CMAC) == expected
    assert key.verify(data, expected, mechanism=Mechanism.AES_CMAC) is True
    assert key.verify(data + b"?", expected, mechanism=Mechanism.AES_CMAC) is False
    assert key.sign(data, mechanism=Mechanism.AES_CMAC_GENERAL,
                    mechanism_param=struct.pack("L", 8)) == expected[:8]


# --- wrap / unwrap -------------------------------------------------------------


@pytest.mark.mechanisms(Mechanism.AES_KEY_WRAP)
@pytest.mark.parametrize("target_bits", [128, 256])
def test_key_wrap_rfc3394(session, target_bits):
    kek_value, kek = aes_key(session, 256, wrap=True, unwrap=True)
    target_value = os.urandom(target_bits // 8)
    target = import_secret(session, KeyType.AES, target_value, sensitive=True, extractable=True,
                           encrypt=True, decrypt=True)
    wrapped = kek.wrap_key(target, mechanism=Mechanism.AES_KEY_WRAP)
    assert wrapped == aes_key_wrap(kek_value, target_value)

    # unwrap a blob made by `cryptography` and check the key inside
    foreign_value = os.urandom(32)
    blob = aes_key_wrap(kek_value, foreign_value)
    unwrapped = kek.unwrap_key(ObjectClass.SECRET_KEY, KeyType.AES, blob,
                               mechanism=Mechanism.AES_KEY_WRAP, label=unique("unwrapped"),
                               capabilities=MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT,
                               template=READABLE)
    assert unwrapped[Attribute.VALUE] == foreign_value
    if not ts.softhsm_mode():  # SoftHSMv2 2.6 reports 0 here
        assert unwrapped[Attribute.VALUE_LEN] == 32
    data = os.urandom(32)
    enc = ref(foreign_value, modes.ECB()).encryptor()
    assert unwrapped.encrypt(data, mechanism=Mechanism.AES_ECB) == enc.update(data) + enc.finalize()

    # a corrupted blob must be refused
    with pytest.raises(PKCS11Error):
        kek.unwrap_key(ObjectClass.SECRET_KEY, KeyType.AES, blob[:-1] + bytes([blob[-1] ^ 1]),
                       mechanism=Mechanism.AES_KEY_WRAP)


@pytest.mark.mechanisms(Mechanism.AES_KEY_WRAP_KWP)
@pytest.mark.parametrize("target_len", [20, 32, 65])
def test_key_wrap_kwp_rfc5649(session, target_len):
    kek_value, kek = aes_key(session, 256, wrap=True, unwrap=True)
    target_value = os.urandom(target_len)
    target = import_secret(session, KeyType.GENERIC_SECRET, target_value, sensitive=True,
                           extractable=True, sign=True)
    wrapped = kek.wrap_key(target, mechanism=Mechanism.AES_KEY_WRAP_KWP)
    assert wrapped == aes_key_wrap_with_padding(kek_value, target_value)
    assert aes_key_unwrap_with_padding(kek_value, wrapped) == target_value

    unwrapped = kek.unwrap_key(ObjectClass.SECRET_KEY, KeyType.GENERIC_SECRET, wrapped,
                               mechanism=Mechanism.AES_KEY_WRAP_KWP, capabilities=MechanismFlag.SIGN,
                               template=READABLE)
    assert unwrapped[Attribute.VALUE] == target_value


@pytest.mark.mechanisms(Mechanism.AES_KEY_WRAP)
def test_unextractable_key_cannot_be_wrapped(session):
    _, kek = aes_key(session, 256, wrap=True, unwrap=True)
    target = session.generate_key(KeyType.AES, 256, template={Attribute.EXTRACTABLE: False})
    with pytest.raises(PKCS11Error):  # CKR_KEY_UNEXTRACTABLE
        kek.wrap_key(target, mechanism=Mechanism.AES_KEY_WRAP)


@pytest.mark.mechanisms(Mechanism.AES_KEY_WRAP, Mechanism.AES_KEY_GEN)
def test_wrap_round_trip_keeps_key_usable(session):
    _, kek = aes_key(session, 128, wrap=True, unwrap=True)
    target = session.generate_key(KeyType.AES, 256, template={Attribute.EXTRACTABLE: True})
    wrapped = kek.wrap_key(target, mechanism=Mechanism.AES_KEY_WRAP)
    assert len(wrapped) == 40
    copy = kek.unwrap_key(ObjectClass.SECRET_KEY, KeyType.AES, wrapped, mechanism=Mechanism.AES_KEY_WRAP,
                          capabilities=MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT)
    data = os.urandom(64)
    assert copy.encrypt(data, mechanism=Mechanism.AES_ECB) == target.encrypt(data, mechanism=Mechanism.AES_ECB)
