"""SHA-1/2/3 digests, their HMACs (and _GENERAL), generic secret key generation.
Results are compared with Python's hashlib and hmac."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

import pytest
from testkeys import import_secret, unique
from pkcs11 import Attribute, KeyType, Mechanism, MechanismFlag
from pkcs11.exceptions import PKCS11Error

DIGESTS = [
    (Mechanism.SHA_1, "sha1"),
    (Mechanism.SHA224, "sha224"),
    (Mechanism.SHA256, "sha256"),
    (Mechanism.SHA384, "sha384"),
    (Mechanism.SHA512, "sha512"),
    (Mechanism.SHA3_224, "sha3_224"),
    (Mechanism.SHA3_256, "sha3_256"),
    (Mechanism.SHA3_384, "sha3_384"),
    (Mechanism.SHA3_512, "sha3_512"),
]

HMACS = [
    (Mechanism.SHA_1_HMAC, Mechanism.SHA_1_HMAC_GENERAL, "sha1"),
    (Mechanism.SHA224_HMAC, Mechanism.SHA224_HMAC_GENERAL, "sha224"),
    (Mechanism.SHA256_HMAC, Mechanism.SHA256_HMAC_GENERAL, "sha256"),
    (Mechanism.SHA384_HMAC, Mechanism.SHA384_HMAC_GENERAL, "sha384"),
    (Mechanism.SHA512_HMAC, Mechanism.SHA512_HMAC_GENERAL, "sha512"),
    (Mechanism.SHA3_224_HMAC, Mechanism.SHA3_224_HMAC_GENERAL, "sha3_224"),
    (Mechanism.SHA3_256_HMAC, Mechanism.SHA3_256_HMAC_GENERAL, "sha3_256"),
    (Mechanism.SHA3_384_HMAC, Mechanism.SHA3_384_HMAC_GENERAL, "sha3_384"),
    (Mechanism.SHA3_512_HMAC, Mechanism.SHA3_512_HMAC_GENERAL, "sha3_512"),
]

DATA = os.urandom(3000)


def with_marks(params):
    """pytest params named after, and marked with, the mechanisms they use."""
    return [pytest.param(*p, id=p[0].name,
                         marks=pytest.mark.mechanisms(*[m for m in p if isinstance(m, Mechanism)]))
            for p in params]


@pytest.mark.parametrize("mech,name", with_marks(DIGESTS))
def test_digest_single_and_multi_part(session, mech, name):
    expected = hashlib.new(name, DATA).digest()
    assert session.digest(DATA, mechanism=mech) == expected
    chunks = [DATA[:1], DATA[1:1000], DATA[1000:1001], DATA[1001:]]
    assert session.digest(iter(chunks), mechanism=mech) == expected
    assert session.digest(b"", mechanism=mech) == hashlib.new(name, b"").digest()


@pytest.mark.mechanisms(Mechanism.SHA256)
def test_digest_key(session):
    value = os.urandom(32)
    key = import_secret(session, KeyType.GENERIC_SECRET, value)
    # C_DigestUpdate(data) + C_DigestKey + C_DigestUpdate(data)
    got = session.digest(iter([b"prefix", key, b"suffix"]), mechanism=Mechanism.SHA256)
    assert got == hashlib.sha256(b"prefix" + value + b"suffix").digest()


HMACS_PLAIN = [(m, n) for m, _, n in HMACS]


@pytest.mark.parametrize("mech,name", with_marks(HMACS_PLAIN))
def test_hmac_matches_python(session, mech, name):
    value = os.urandom(hashlib.new(name).block_size + 7)  # longer than a block: hashed first
    key = import_secret(session, KeyType.GENERIC_SECRET, value, sign=True, verify=True)
    expected = hmac.new(value, DATA, name).digest()

    assert key.sign(DATA, mechanism=mech) == expected
    assert key.sign(iter([DATA[:100], DATA[100:]]), mechanism=mech) == expected
    # python-pkcs11's verify() answers False for CKR_SIGNATURE_INVALID / _LEN_RANGE
    assert key.verify(DATA, expected, mechanism=mech) is True
    assert key.verify(DATA + b"!", expected, mechanism=mech) is False
    assert key.verify(DATA, expected[:-1] + bytes([expected[-1] ^ 1]), mechanism=mech) is False


@pytest.mark.parametrize("mech,general,name", with_marks(HMACS))
def test_hmac_general_truncates(session, mech, general, name):
    value = os.urandom(32)
    key = import_secret(session, KeyType.GENERIC_SECRET, value, sign=True, verify=True)
    expected = hmac.new(value, DATA, name).digest()
    # CK_MAC_GENERAL_PARAMS (a CK_ULONG) gives the output length.
    for n in (10, len(expected)):
        param = struct.pack("L", n)
        tag = key.sign(DATA, mechanism=general, mechanism_param=param)
        assert tag == expected[:n]
        assert key.verify(DATA, tag, mechanism=general, mechanism_param=param) is True


@pytest.mark.mechanisms(Mechanism.GENERIC_SECRET_KEY_GEN, Mechanism.SHA256_HMAC)
@pytest.mark.parametrize("bits", [256, 512])
def test_generic_secret_keygen(session, bits):
    key = session.generate_key(KeyType.GENERIC_SECRET, bits, label=unique("gen"),
                               capabilities=MechanismFlag.SIGN | MechanismFlag.VERIFY,
                               template={Attribute.SENSITIVE: False, Attribute.EXTRACTABLE: True})
    assert key[Attribute.VALUE_LEN] == bits // 8
    value = key[Attribute.VALUE]
    assert len(value) == bits // 8
    tag = key.sign(DATA, mechanism=Mechanism.SHA256_HMAC)
    assert tag == hmac.new(value, DATA, "sha256").digest()
    assert key.verify(DATA, tag, mechanism=Mechanism.SHA256_HMAC) is True


@pytest.mark.mechanisms(Mechanism.SHA256_HMAC)
def test_hmac_refuses_key_without_sign(session):
    key = import_secret(session, KeyType.GENERIC_SECRET, os.urandom(32), sign=True, verify=True)
    key.sign(DATA, mechanism=Mechanism.SHA256_HMAC)
    key[Attribute.SIGN] = False  # the Python object keeps its sign() method
    with pytest.raises(PKCS11Error):  # CKR_KEY_FUNCTION_NOT_PERMITTED
        key.sign(DATA, mechanism=Mechanism.SHA256_HMAC)
