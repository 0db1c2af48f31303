"""Triple DES (legacy interop) and ChaCha20-Poly1305, compared with `cryptography`.

python-pkcs11 0.10.1 has no ChaCha20 constants or parameter class: p11ext adds
CKM_CHACHA20_KEY_GEN, CKM_CHACHA20_POLY1305 and CKK_CHACHA20 to its enums and
lays out CK_SALSA20_CHACHA20_POLY1305_PARAMS, which python-pkcs11 passes on.
"""

from __future__ import annotations

import os

import p11ext
import pytest
from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, modes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from testkeys import READABLE, import_secret, unique
from pkcs11 import Attribute, KeyType, Mechanism, MechanismFlag
from pkcs11.exceptions import MechanismParamInvalid, PKCS11Error

# --- DES3 ----------------------------------------------------------------------


def des3_key(session):
    value = os.urandom(24)
    return value, import_secret(session, KeyType.DES3, value, encrypt=True, decrypt=True)


@pytest.mark.mechanisms(Mechanism.DES3_KEY_GEN, Mechanism.DES3_CBC_PAD)
def test_des3_generate_and_round_trip(session):
    key = session.generate_key(KeyType.DES3, label=unique("des3"), template=READABLE)
    value = key[Attribute.VALUE]
    assert len(value) == 24
    # DES keys carry odd parity in every byte
    assert all(bin(b).count("1") % 2 == 1 for b in value)
    iv = os.urandom(8)
    data = os.urandom(50)
    ct = key.encrypt(data, mechanism=Mechanism.DES3_CBC_PAD, mechanism_param=iv)
    assert len(ct) == 56
    assert key.decrypt(ct, mechanism=Mechanism.DES3_CBC_PAD, mechanism_param=iv) == data


@pytest.mark.mechanisms(Mechanism.DES3_ECB)
def test_des3_ecb_matches_reference(session):
    value, key = des3_key(session)
    data = os.urandom(8 * 9)
    enc = Cipher(TripleDES(value), modes.ECB()).encryptor()
    expected = enc.update(data) + enc.finalize()
    assert key.encrypt(data, mechanism=Mechanism.DES3_ECB) == expected
    assert key.decrypt(expected, mechanism=Mechanism.DES3_ECB) == data


@pytest.mark.mechanisms(Mechanism.DES3_CBC)
def test_des3_cbc_matches_reference(session):
    value, key = des3_key(session)
    iv = os.urandom(8)
    data = os.urandom(8 * 20)
    enc = Cipher(TripleDES(value), modes.CBC(iv)).encryptor()
    expected = enc.update(data) + enc.finalize()
    assert key.encrypt(data, mechanism=Mechanism.DES3_CBC, mechanism_param=iv) == expected
    assert key.decrypt(expected, mechanism=Mechanism.DES3_CBC, mechanism_param=iv) == data


@pytest.mark.mechanisms(Mechanism.DES3_CBC_PAD)
@pytest.mark.parametrize("length", [0, 7, 8, 9, 100])
def test_des3_cbc_pad_matches_reference(session, length):
    value, key = des3_key(session)
    iv = os.urandom(8)
    data = os.urandom(length)
    padder = padding.PKCS7(64).padder()
    padded = padder.update(data) + padder.finalize()
    enc = Cipher(TripleDES(value), modes.CBC(iv)).encryptor()
    expected = enc.update(padded) + enc.finalize()
    assert key.encrypt(data, mechanism=Mechanism.DES3_CBC_PAD, mechanism_param=iv) == expected
    assert key.decrypt(expected, mechanism=Mechanism.DES3_CBC_PAD, mechanism_param=iv) == data


# --- ChaCha20-Poly1305 -----------------------------------------------------------

NEEDS_CHACHA = pytest.mark.mechanisms(p11ext.CKM_CHACHA20_POLY1305)


def chacha_key(session):
    value = os.urandom(32)
    return value, import_secret(session, p11ext.CKK_CHACHA20, value, encrypt=True, decrypt=True)


@pytest.mark.mechanisms(p11ext.CKM_CHACHA20_KEY_GEN, p11ext.CKM_CHACHA20_POLY1305)
def test_chacha20_generate_and_round_trip(session):
    key = session.generate_key(p11ext.CKK_CHACHA20, 256, mechanism=p11ext.CKM_CHACHA20_KEY_GEN,
                               capabilities=MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT,
                               label=unique("chacha"))
    assert key[Attribute.KEY_TYPE] == p11ext.CKK_CHACHA20
    assert key[Attribute.VALUE_LEN] == 32
    params = p11ext.chacha20_poly1305_params(os.urandom(12), b"aad")
    data = os.urandom(200)
    ct = key.encrypt(data, mechanism=p11ext.CKM_CHACHA20_POLY1305, mechanism_param=bytes(params))
    assert len(ct) == 216
    assert key.decrypt(ct, mechanism=p11ext.CKM_CHACHA20_POLY1305, mechanism_param=bytes(params)) == data


@NEEDS_CHACHA
@pytest.mark.parametrize("aad", [None, b"", b"associated data"])
@pytest.mark.parametrize("length", [0, 1, 64, 1000])
def test_chacha20_poly1305_matches_reference(session, aad, length):
    value, key = chacha_key(session)
    nonce = os.urandom(12)
    data = os.urandom(length)
    expected = ChaCha20Poly1305(value).encrypt(nonce, data, aad)
    params = p11ext.chacha20_poly1305_params(nonce, aad)
    assert key.encrypt(data, mechanism=p11ext.CKM_CHACHA20_POLY1305, mechanism_param=bytes(params)) == expected
    assert key.decrypt(expected, mechanism=p11ext.CKM_CHACHA20_POLY1305, mechanism_param=bytes(params)) == data


@NEEDS_CHACHA
def test_chacha20_poly1305_rejects_tampering(session):
    value, key = chacha_key(session)
    nonce = os.urandom(12)
    ct = ChaCha20Poly1305(value).encrypt(nonce, b"attack at dawn", b"hdr")
    good = p11ext.chacha20_poly1305_params(nonce, b"hdr")
    assert key.decrypt(ct, mechanism=p11ext.CKM_CHACHA20_POLY1305, mechanism_param=bytes(good)) == b"attack at dawn"
    with pytest.raises(PKCS11Error):
        key.decrypt(ct[:-1] + bytes([ct[-1] ^ 1]), mechanism=p11ext.CKM_CHACHA20_POLY1305,
                    mechanism_param=bytes(good))
    other = p11ext.chacha20_poly1305_params(nonce, b"HDR")
    with pytest.raises(PKCS11Error):
        key.decrypt(ct, mechanism=p11ext.CKM_CHACHA20_POLY1305, mechanism_param=bytes(other))


@NEEDS_CHACHA
@pytest.mark.parametrize("nonce_len", [8, 16])
def test_chacha20_poly1305_takes_the_96_bit_nonce_only(session, nonce_len):
    """RFC 8439's 96-bit nonce only (docs/SOFTTOKEN.md): the original construction's 64-bit
    nonce, and any other length, is CKR_MECHANISM_PARAM_INVALID."""
    _, key = chacha_key(session)
    params = p11ext.chacha20_poly1305_params(os.urandom(nonce_len), b"hdr")
    with pytest.raises(MechanismParamInvalid):
        key.encrypt(b"data", mechanism=p11ext.CKM_CHACHA20_POLY1305, mechanism_param=bytes(params))
