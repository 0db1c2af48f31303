"""RSA: key generation, PKCS#1 v1.5, raw X.509, PSS and OAEP, the hash-and-sign
mechanisms, and OAEP wrapping of an AES key. Signatures are verified and
ciphertexts made with the `cryptography` package, from the public key read
out of the token."""

from __future__ import annotations

import hashlib
import os

import pytest
import token_setup as ts
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from testkeys import READABLE, import_secret, rsa_public, unique
from pkcs11 import MGF, Attribute, KeyType, Mechanism, MechanismFlag, ObjectClass
from pkcs11.exceptions import PKCS11Error

DATA = b"The quick brown fox jumps over the lazy dog" * 20

HASHES = {
    "sha1": (hashes.SHA1, Mechanism.SHA_1, MGF.SHA1),
    "sha224": (hashes.SHA224, Mechanism.SHA224, MGF.SHA224),
    "sha256": (hashes.SHA256, Mechanism.SHA256, MGF.SHA256),
    "sha384": (hashes.SHA384, Mechanism.SHA384, MGF.SHA384),
    "sha512": (hashes.SHA512, Mechanism.SHA512, MGF.SHA512),
}

PKCS1_SIGN = [
    pytest.param(Mechanism.SHA1_RSA_PKCS, "sha1", id="SHA1_RSA_PKCS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA1_RSA_PKCS)),
    pytest.param(Mechanism.SHA224_RSA_PKCS, "sha224", id="SHA224_RSA_PKCS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA224_RSA_PKCS)),
    pytest.param(Mechanism.SHA256_RSA_PKCS, "sha256", id="SHA256_RSA_PKCS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA256_RSA_PKCS)),
    pytest.param(Mechanism.SHA384_RSA_PKCS, "sha384", id="SHA384_RSA_PKCS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA384_RSA_PKCS)),
    pytest.param(Mechanism.SHA512_RSA_PKCS, "sha512", id="SHA512_RSA_PKCS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA512_RSA_PKCS)),
]

PSS_SIGN = [
    pytest.param(Mechanism.SHA1_RSA_PKCS_PSS, "sha1", id="SHA1_RSA_PKCS_PSS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA1_RSA_PKCS_PSS)),
    pytest.param(Mechanism.SHA224_RSA_PKCS_PSS, "sha224", id="SHA224_RSA_PKCS_PSS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA224_RSA_PKCS_PSS)),
    pytest.param(Mechanism.SHA256_RSA_PKCS_PSS, "sha256", id="SHA256_RSA_PKCS_PSS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA256_RSA_PKCS_PSS)),
    pytest.param(Mechanism.SHA384_RSA_PKCS_PSS, "sha384", id="SHA384_RSA_PKCS_PSS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA384_RSA_PKCS_PSS)),
    pytest.param(Mechanism.SHA512_RSA_PKCS_PSS, "sha512", id="SHA512_RSA_PKCS_PSS",
                 marks=pytest.mark.mechanisms(Mechanism.SHA512_RSA_PKCS_PSS)),
]

# DER DigestInfo prefixes (RFC 8017, 9.2 note 1)
DIGEST_INFO = {
    "sha256": bytes.fromhex("3031300d060960864801650304020105000420"),
}


@pytest.fixture(scope="module")
def rsa_keys(module_session):
    return module_session.generate_keypair(KeyType.RSA, 2048, label=unique("rsa2048"))


@pytest.mark.mechanisms(Mechanism.RSA_PKCS_KEY_PAIR_GEN, Mechanism.SHA256_RSA_PKCS)
@pytest.mark.parametrize("bits", [1024, 2048, 3072, 4096])
def test_generate_key_pair(session, bits):
    pub, priv = session.generate_keypair(KeyType.RSA, bits, label=unique(f"rsa{bits}"))
    assert pub[Attribute.MODULUS_BITS] == bits
    assert len(pub[Attribute.MODULUS]) == bits // 8
    assert int.from_bytes(pub[Attribute.PUBLIC_EXPONENT], "big") == 65537
    assert priv[Attribute.KEY_TYPE] == KeyType.RSA
    assert priv[Attribute.SENSITIVE] is True
    assert priv[Attribute.MODULUS] == pub[Attribute.MODULUS]
    sig = priv.sign(DATA, mechanism=Mechanism.SHA256_RSA_PKCS)
    rsa_public(pub).verify(sig, DATA, padding.PKCS1v15(), hashes.SHA256())


@pytest.mark.mechanisms(Mechanism.RSA_PKCS_KEY_PAIR_GEN, Mechanism.SHA512_RSA_PKCS)
@pytest.mark.parametrize("bits", [8192])
def test_generate_largest_key_pair(session, bits):
    pub, priv = session.generate_keypair(KeyType.RSA, bits, label=unique("rsa-max"))
    assert pub[Attribute.MODULUS_BITS] == bits
    sig = priv.sign(DATA, mechanism=Mechanism.SHA512_RSA_PKCS)
    rsa_public(pub).verify(sig, DATA, padding.PKCS1v15(), hashes.SHA512())


@pytest.mark.parametrize("mech,hname", PKCS1_SIGN)
def test_pkcs1_sign_verifies_with_cryptography(rsa_keys, mech, hname):
    pub, priv = rsa_keys
    sig = priv.sign(DATA, mechanism=mech)
    assert len(sig) == 256
    rsa_public(pub).verify(sig, DATA, padding.PKCS1v15(), HASHES[hname][0]())
    # multi-part gives the same (deterministic) signature
    assert priv.sign(iter([DATA[:10], DATA[10:]]), mechanism=mech) == sig
    assert pub.verify(DATA, sig, mechanism=mech) is True
    assert pub.verify(DATA + b".", sig, mechanism=mech) is False


@pytest.mark.mechanisms(Mechanism.RSA_PKCS, Mechanism.SHA256_RSA_PKCS)
def test_raw_pkcs1_sign_over_digest_info(rsa_keys):
    pub, priv = rsa_keys
    digest_info = DIGEST_INFO["sha256"] + hashlib.sha256(DATA).digest()
    raw = priv.sign(digest_info, mechanism=Mechanism.RSA_PKCS)
    assert raw == priv.sign(DATA, mechanism=Mechanism.SHA256_RSA_PKCS)
    rsa_public(pub).verify(raw, hashlib.sha256(DATA).digest(), padding.PKCS1v15(), Prehashed(hashes.SHA256()))
    assert pub.verify(digest_info, raw, mechanism=Mechanism.RSA_PKCS) is True


@pytest.mark.mechanisms(Mechanism.RSA_X_509)
def test_raw_rsa_x509(rsa_keys):
    pub, priv = rsa_keys
    n = int.from_bytes(pub[Attribute.MODULUS], "big")
    e = int.from_bytes(pub[Attribute.PUBLIC_EXPONENT], "big")
    m = int.from_bytes(os.urandom(255), "big")  # < n
    mb = m.to_bytes(256, "big")
    c = pub.encrypt(mb, mechanism=Mechanism.RSA_X_509)
    assert int.from_bytes(c, "big") == pow(m, e, n)
    assert priv.decrypt(c, mechanism=Mechanism.RSA_X_509) == mb
    s = priv.sign(mb, mechanism=Mechanism.RSA_X_509)
    assert pow(int.from_bytes(s, "big"), e, n) == m


@pytest.mark.mechanisms(Mechanism.RSA_PKCS)
def test_pkcs1_v15_decrypt_cryptography_ciphertext(rsa_keys):
    pub, priv = rsa_keys
    secret = os.urandom(48)
    ct = rsa_public(pub).encrypt(secret, padding.PKCS1v15())
    assert priv.decrypt(ct, mechanism=Mechanism.RSA_PKCS) == secret
    ct2 = pub.encrypt(secret, mechanism=Mechanism.RSA_PKCS)
    assert ct2 != ct  # random padding
    assert priv.decrypt(ct2, mechanism=Mechanism.RSA_PKCS) == secret


@pytest.mark.mechanisms(Mechanism.RSA_PKCS_PSS)
@pytest.mark.parametrize("hname", ["sha1", "sha256", "sha384", "sha512"])
def test_pss_over_digest(rsa_keys, hname):
    pub, priv = rsa_keys
    hcls, hmech, mgf = HASHES[hname]
    digest = hashlib.new(hname, DATA).digest()
    param = (hmech, mgf, len(digest))
    sig = priv.sign(digest, mechanism=Mechanism.RSA_PKCS_PSS, mechanism_param=param)
    rsa_public(pub).verify(sig, digest, padding.PSS(padding.MGF1(hcls()), len(digest)), Prehashed(hcls()))
    assert pub.verify(digest, sig, mechanism=Mechanism.RSA_PKCS_PSS, mechanism_param=param) is True
    assert priv.sign(digest, mechanism=Mechanism.RSA_PKCS_PSS, mechanism_param=param) != sig  # salted


@pytest.mark.parametrize("mech,hname", PSS_SIGN)
@pytest.mark.parametrize("salt", [0, "hash"])
def test_hash_and_pss_sign(rsa_keys, mech, hname, salt):
    pub, priv = rsa_keys
    hcls, hmech, mgf = HASHES[hname]
    slen = hcls.digest_size if salt == "hash" else 0
    param = (hmech, mgf, slen)
    sig = priv.sign(DATA, mechanism=mech, mechanism_param=param)
    rsa_public(pub).verify(sig, DATA, padding.PSS(padding.MGF1(hcls()), slen), hcls())
    assert pub.verify(DATA, sig, mechanism=mech, mechanism_param=param) is True
    assert pub.verify(DATA[1:], sig, mechanism=mech, mechanism_param=param) is False


@pytest.mark.mechanisms(Mechanism.RSA_PKCS_OAEP)
@pytest.mark.parametrize("hname", ["sha1", "sha256", "sha512"])
@pytest.mark.parametrize("label", [None, b"opencf label"])
def test_oaep_decrypt_cryptography_ciphertext(rsa_keys, hname, label):
    if ts.softhsm_mode() and (hname != "sha1" or label):
        pytest.skip("SoftHSMv2 does OAEP with SHA-1 and no label only")
    pub, priv = rsa_keys
    hcls, hmech, mgf = HASHES[hname]
    secret = os.urandom(32)
    ct = rsa_public(pub).encrypt(secret, padding.OAEP(padding.MGF1(hcls()), hcls(), label))
    param = (hmech, mgf, label)
    assert priv.decrypt(ct, mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param) == secret
    ct2 = pub.encrypt(secret, mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param)
    assert priv.decrypt(ct2, mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param) == secret
    with pytest.raises(PKCS11Error):
        priv.decrypt(ct[:-1] + bytes([ct[-1] ^ 1]), mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param)


@pytest.mark.mechanisms(Mechanism.RSA_PKCS_OAEP, Mechanism.AES_KEY_GEN, Mechanism.AES_ECB)
def test_oaep_wrap_and_unwrap_aes_key(session, rsa_keys):
    if ts.softhsm_mode():
        pytest.skip("SoftHSMv2 does OAEP with SHA-1 only")
    pub, priv = rsa_keys
    param = (Mechanism.SHA256, MGF.SHA256, None)

    # token wraps a token AES key; token unwraps it again: same key
    aes = session.generate_key(KeyType.AES, 256, label=unique("to-wrap"),
                               template={Attribute.EXTRACTABLE: True})
    wrapped = pub.wrap_key(aes, mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param)
    assert len(wrapped) == 256
    copy = priv.unwrap_key(ObjectClass.SECRET_KEY, KeyType.AES, wrapped,
                           mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param,
                           capabilities=MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT)
    block = os.urandom(32)
    assert copy.encrypt(block, mechanism=Mechanism.AES_ECB) == aes.encrypt(block, mechanism=Mechanism.AES_ECB)

    # cryptography wraps a known AES key for the token's public key
    value = os.urandom(16)
    blob = rsa_public(pub).encrypt(value, padding.OAEP(padding.MGF1(hashes.SHA256()), hashes.SHA256(), None))
    unwrapped = priv.unwrap_key(ObjectClass.SECRET_KEY, KeyType.AES, blob,
                                mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param,
                                capabilities=MechanismFlag.ENCRYPT, template=READABLE)
    assert unwrapped[Attribute.VALUE] == value
    assert unwrapped[Attribute.VALUE_LEN] == 16


@pytest.mark.mechanisms(Mechanism.RSA_PKCS_OAEP)
def test_oaep_wrap_of_known_key_decrypts_outside(session, rsa_keys):
    """Wrap an imported AES key with the public key; decrypt the blob with the
    private key through C_Decrypt (the same OAEP) and compare with the value."""
    pub, priv = rsa_keys
    value = os.urandom(32)
    key = import_secret(session, KeyType.AES, value, extractable=True, sensitive=True, encrypt=True)
    param = (Mechanism.SHA_1, MGF.SHA1, None)
    blob = pub.wrap_key(key, mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param)
    assert priv.decrypt(blob, mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param) == value


@pytest.mark.mechanisms(Mechanism.SHA256_RSA_PKCS, Mechanism.SHA256_RSA_PKCS_PSS)
def test_imported_public_key_verifies_cryptography_signature(session):
    theirs = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    nums = theirs.public_key().public_numbers()
    pub = session.create_object({
        Attribute.CLASS: ObjectClass.PUBLIC_KEY, Attribute.KEY_TYPE: KeyType.RSA,
        Attribute.TOKEN: False, Attribute.VERIFY: True, Attribute.ENCRYPT: True,
        Attribute.MODULUS: nums.n.to_bytes(256, "big"),
        Attribute.PUBLIC_EXPONENT: nums.e.to_bytes(3, "big"),
    })
    sig = theirs.sign(DATA, padding.PKCS1v15(), hashes.SHA256())
    assert pub.verify(DATA, sig, mechanism=Mechanism.SHA256_RSA_PKCS) is True
    assert pub.verify(DATA + b"x", sig, mechanism=Mechanism.SHA256_RSA_PKCS) is False
    pss = theirs.sign(DATA, padding.PSS(padding.MGF1(hashes.SHA256()), 32), hashes.SHA256())
    assert pub.verify(DATA, pss, mechanism=Mechanism.SHA256_RSA_PKCS_PSS,
                      mechanism_param=(Mechanism.SHA256, MGF.SHA256, 32)) is True
