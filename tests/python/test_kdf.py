"""HKDF_DERIVE and PKCS5_PBKD2, compared with `cryptography` and hashlib.

python-pkcs11 0.10.1 knows CKM_PKCS5_PBKD2 but has no parameter class for it,
and has no HKDF at all: p11ext adds CKM_HKDF_DERIVE / CKK_HKDF to its enums and
lays out CK_HKDF_PARAMS and CK_PKCS5_PBKD2_PARAMS(2), which python-pkcs11 passes
to C_DeriveKey / C_GenerateKey unchanged.
"""

from __future__ import annotations

import hashlib
import hmac
import os

import p11ext
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand
from testkeys import READABLE, import_secret
from pkcs11 import Attribute, KeyType, Mechanism, MechanismFlag
from pkcs11.exceptions import PKCS11Error

HKDF_HASHES = [
    pytest.param(Mechanism.SHA256, hashes.SHA256, "sha256", id="SHA256"),
    pytest.param(Mechanism.SHA384, hashes.SHA384, "sha384", id="SHA384"),
    pytest.param(Mechanism.SHA512, hashes.SHA512, "sha512", id="SHA512"),
]

NEEDS_HKDF = pytest.mark.mechanisms(p11ext.CKM_HKDF_DERIVE)


def base_key(session, value, key_type=KeyType.GENERIC_SECRET):
    return import_secret(session, key_type, value, derive=True)


def hkdf_derive(base, params, length, key_type=KeyType.GENERIC_SECRET, **kw):
    return base.derive_key(key_type, length * 8, mechanism=p11ext.CKM_HKDF_DERIVE,
                           mechanism_param=bytes(params), template=READABLE, **kw)


@NEEDS_HKDF
@pytest.mark.parametrize("prf,hcls,hname", HKDF_HASHES)
@pytest.mark.parametrize("length", [16, 42, 100])
def test_hkdf_extract_and_expand(session, prf, hcls, hname, length):
    ikm, salt, info = os.urandom(32), os.urandom(16), b"opencf hkdf info"
    params = p11ext.hkdf_params(prf, salt=salt, info=info)
    key = hkdf_derive(base_key(session, ikm), params, length)
    expected = HKDF(algorithm=hcls(), length=length, salt=salt, info=info).derive(ikm)
    assert key[Attribute.VALUE] == expected
    assert key[Attribute.VALUE_LEN] == length


@NEEDS_HKDF
def test_hkdf_without_salt(session):
    ikm = os.urandom(22)
    params = p11ext.hkdf_params(Mechanism.SHA256, salt=None, info=b"no salt")
    key = hkdf_derive(base_key(session, ikm), params, 32)
    assert key[Attribute.VALUE] == HKDF(hashes.SHA256(), 32, None, b"no salt").derive(ikm)


@NEEDS_HKDF
def test_hkdf_extract_only(session):
    ikm, salt = os.urandom(32), os.urandom(32)
    params = p11ext.hkdf_params(Mechanism.SHA256, salt=salt, info=None, expand=False)
    prk = hkdf_derive(base_key(session, ikm), params, 32)
    assert prk[Attribute.VALUE] == hmac.new(salt, ikm, "sha256").digest()


@NEEDS_HKDF
def test_hkdf_expand_only(session):
    prk, info = os.urandom(48), b"expand only"
    params = p11ext.hkdf_params(Mechanism.SHA384, salt=None, info=info, extract=False)
    okm = hkdf_derive(base_key(session, prk), params, 70)
    assert okm[Attribute.VALUE] == HKDFExpand(hashes.SHA384(), 70, info).derive(prk)


@NEEDS_HKDF
def test_hkdf_from_hkdf_key_type_into_aes(session):
    ikm, salt, info = os.urandom(32), os.urandom(8), b"aes key"
    base = base_key(session, ikm, key_type=p11ext.CKK_HKDF)
    params = p11ext.hkdf_params(Mechanism.SHA256, salt=salt, info=info)
    aes = hkdf_derive(base, params, 32, key_type=KeyType.AES,
                      capabilities=MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT)
    assert aes[Attribute.KEY_TYPE] == KeyType.AES
    assert aes[Attribute.VALUE] == HKDF(hashes.SHA256(), 32, salt, info).derive(ikm)


@NEEDS_HKDF
def test_hkdf_refuses_base_key_without_derive(session):
    base = import_secret(session, KeyType.GENERIC_SECRET, os.urandom(32), derive=True)
    base[Attribute.DERIVE] = False
    params = p11ext.hkdf_params(Mechanism.SHA256, salt=b"s", info=b"i")
    with pytest.raises(PKCS11Error):  # CKR_KEY_FUNCTION_NOT_PERMITTED
        hkdf_derive(base, params, 32)


# --- PBKDF2 --------------------------------------------------------------------

PBKDF2_PRFS = [
    pytest.param(p11ext.CKP_PKCS5_PBKD2_HMAC_SHA1, "sha1", id="HMAC-SHA1"),
    pytest.param(p11ext.CKP_PKCS5_PBKD2_HMAC_SHA256, "sha256", id="HMAC-SHA256"),
    pytest.param(p11ext.CKP_PKCS5_PBKD2_HMAC_SHA512, "sha512", id="HMAC-SHA512"),
]

NEEDS_PBKDF2 = pytest.mark.mechanisms(Mechanism.PKCS5_PBKD2)


def pbkdf2_key(session, params, bits, key_type=KeyType.GENERIC_SECRET, **kw):
    # python-pkcs11's generate_key leaves CKA_KEY_TYPE to the mechanism; PBKDF2
    # can make any secret key type, so the template names it.
    return session.generate_key(key_type, bits, mechanism=Mechanism.PKCS5_PBKD2,
                                mechanism_param=bytes(params),
                                template={**READABLE, Attribute.KEY_TYPE: key_type}, **kw)


@NEEDS_PBKDF2
@pytest.mark.parametrize("prf,hname", PBKDF2_PRFS)
def test_pbkdf2_generic_secret(session, prf, hname):
    password, salt, iterations = b"correct horse battery staple", os.urandom(16), 1000
    params = p11ext.pbkdf2_params(password, salt, iterations, prf)
    key = pbkdf2_key(session, params, 256, capabilities=MechanismFlag.SIGN)
    assert key[Attribute.VALUE] == hashlib.pbkdf2_hmac(hname, password, salt, iterations, 32)


@NEEDS_PBKDF2
def test_pbkdf2_rfc6070_vector(session):
    # RFC 6070: P="password", S="salt", c=4096, dkLen=20
    params = p11ext.pbkdf2_params(b"password", b"salt", 4096, p11ext.CKP_PKCS5_PBKD2_HMAC_SHA1)
    key = pbkdf2_key(session, params, 160, capabilities=MechanismFlag.SIGN)
    assert key[Attribute.VALUE] == bytes.fromhex("4b007901b765489abead49d926f721d065a429c1")


@NEEDS_PBKDF2
def test_pbkdf2_aes_key(session):
    password, salt = b"pa55word", os.urandom(16)
    params = p11ext.pbkdf2_params(password, salt, 2048, p11ext.CKP_PKCS5_PBKD2_HMAC_SHA256)
    key = pbkdf2_key(session, params, 128, key_type=KeyType.AES,
                     capabilities=MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT)
    assert key[Attribute.KEY_TYPE] == KeyType.AES
    assert key[Attribute.VALUE] == hashlib.pbkdf2_hmac("sha256", password, salt, 2048, 16)


@NEEDS_PBKDF2
def test_pbkdf2_v240_parameter_layout(session):
    """CK_PKCS5_PBKD2_PARAMS from PKCS#11 2.40 (ulPasswordLen by pointer), the
    form older applications pass; same size as the 3.0 PARAMS2."""
    password, salt = b"legacy caller", os.urandom(8)
    params = p11ext.pbkdf2_params(password, salt, 1000, p11ext.CKP_PKCS5_PBKD2_HMAC_SHA256, v240=True)
    key = pbkdf2_key(session, params, 256, capabilities=MechanismFlag.SIGN)
    assert key[Attribute.VALUE] == hashlib.pbkdf2_hmac("sha256", password, salt, 1000, 32)


@NEEDS_PBKDF2
@pytest.mark.parametrize("length", [65_536, 65_537, 70_000])
def test_pbkdf2_password_above_64_kib(session, length):
    """CK_PKCS5_PBKD2_PARAMS2 puts no bound on ulPasswordLen: a length above 64 KiB is a
    length (not taken for the 2.40 layout's pointer), and the key is PBKDF2's."""
    password, salt = os.urandom(length), os.urandom(16)
    params = p11ext.pbkdf2_params(password, salt, 1, p11ext.CKP_PKCS5_PBKD2_HMAC_SHA256)
    key = pbkdf2_key(session, params, 256, capabilities=MechanismFlag.SIGN)
    assert key[Attribute.VALUE] == hashlib.pbkdf2_hmac("sha256", password, salt, 1, 32)
