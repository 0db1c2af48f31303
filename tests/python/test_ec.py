"""Elliptic curves: key generation on P-256, P-384, P-521 and secp256k1, ECDSA
and ECDSA_SHA*, ECDH1_DERIVE; Ed25519/Ed448 (EDDSA) and X25519/X448
(ECDH1_DERIVE on Montgomery keys). Every signature is verified, and every shared
secret compared, with the `cryptography` package.

python-pkcs11 0.10.1 knows EC_EDWARDS and EDDSA but not Montgomery keys:
p11ext adds CKK_EC_MONTGOMERY and CKM_EC_MONTGOMERY_KEY_PAIR_GEN to its enums.
"""

from __future__ import annotations

import hashlib
import os

import p11ext
import pytest
import token_setup as ts
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, x448, x25519
from cryptography.hazmat.primitives.asymmetric.utils import (
    Prehashed,
    decode_dss_signature,
    encode_dss_signature,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from testkeys import READABLE, unique
from pkcs11 import KDF, Attribute, KeyType, Mechanism, MechanismFlag, ObjectClass

DATA = b"elliptic curves through PKCS#11" * 10

CURVE_PARAMS = [
    pytest.param(name, id=name) for name in ("secp256r1", "secp384r1", "secp521r1", "secp256k1")
]

ECDSA_HASH = [
    pytest.param(Mechanism.ECDSA_SHA1, hashes.SHA1, id="ECDSA_SHA1",
                 marks=pytest.mark.mechanisms(Mechanism.ECDSA_SHA1)),
    pytest.param(Mechanism.ECDSA_SHA224, hashes.SHA224, id="ECDSA_SHA224",
                 marks=pytest.mark.mechanisms(Mechanism.ECDSA_SHA224)),
    pytest.param(Mechanism.ECDSA_SHA256, hashes.SHA256, id="ECDSA_SHA256",
                 marks=pytest.mark.mechanisms(Mechanism.ECDSA_SHA256)),
    pytest.param(Mechanism.ECDSA_SHA384, hashes.SHA384, id="ECDSA_SHA384",
                 marks=pytest.mark.mechanisms(Mechanism.ECDSA_SHA384)),
    pytest.param(Mechanism.ECDSA_SHA512, hashes.SHA512, id="ECDSA_SHA512",
                 marks=pytest.mark.mechanisms(Mechanism.ECDSA_SHA512)),
]


def ec_keypair(session, curve, **kw):
    oid = p11ext.CURVES[curve][0]
    return session.generate_keypair(
        KeyType.EC, label=unique(curve), public_template={Attribute.EC_PARAMS: p11ext.der_oid(oid)}, **kw)


def crypto_curve(curve):
    return getattr(ec, p11ext.CURVES[curve][1])()


def public_point(pub, curve) -> bytes:
    size = p11ext.CURVES[curve][2]
    return p11ext.unwrap_octet_string(pub[Attribute.EC_POINT], 1 + 2 * size)


def crypto_public(pub, curve) -> ec.EllipticCurvePublicKey:
    return ec.EllipticCurvePublicKey.from_encoded_point(crypto_curve(curve), public_point(pub, curve))


def der_signature(raw: bytes) -> bytes:
    half = len(raw) // 2
    return encode_dss_signature(int.from_bytes(raw[:half], "big"), int.from_bytes(raw[half:], "big"))


@pytest.fixture(scope="module")
def p256(module_session):
    return ec_keypair(module_session, "secp256r1")


@pytest.mark.mechanisms(Mechanism.EC_KEY_PAIR_GEN, Mechanism.ECDSA)
@pytest.mark.parametrize("curve", CURVE_PARAMS)
def test_generate_and_sign_raw_ecdsa(session, curve):
    pub, priv = ec_keypair(session, curve)
    assert pub[Attribute.EC_PARAMS] == p11ext.der_oid(p11ext.CURVES[curve][0])
    assert priv[Attribute.KEY_TYPE] == KeyType.EC
    theirs = crypto_public(pub, curve)  # the point is on the curve
    size = p11ext.CURVES[curve][2]
    digest = hashlib.sha256(DATA).digest()
    sig = priv.sign(digest, mechanism=Mechanism.ECDSA)
    assert len(sig) == 2 * size
    theirs.verify(der_signature(sig), digest, ec.ECDSA(Prehashed(hashes.SHA256())))
    assert pub.verify(digest, sig, mechanism=Mechanism.ECDSA) is True
    assert pub.verify(hashlib.sha256(b"other").digest(), sig, mechanism=Mechanism.ECDSA) is False


@pytest.mark.parametrize("mech,hcls", ECDSA_HASH)
def test_ecdsa_with_hash(p256, mech, hcls):
    pub, priv = p256
    sig = priv.sign(DATA, mechanism=mech)
    crypto_public(pub, "secp256r1").verify(der_signature(sig), DATA, ec.ECDSA(hcls()))
    sig2 = priv.sign(iter([DATA[:7], DATA[7:]]), mechanism=mech)
    crypto_public(pub, "secp256r1").verify(der_signature(sig2), DATA, ec.ECDSA(hcls()))
    assert pub.verify(DATA, sig, mechanism=mech) is True
    assert pub.verify(DATA + b"!", sig, mechanism=mech) is False


@pytest.mark.mechanisms(Mechanism.ECDSA_SHA384)
def test_imported_public_key_verifies_cryptography_signature(session):
    theirs = ec.generate_private_key(ec.SECP384R1())
    point = theirs.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    pub = session.create_object({
        Attribute.CLASS: ObjectClass.PUBLIC_KEY, Attribute.KEY_TYPE: KeyType.EC,
        Attribute.TOKEN: False, Attribute.VERIFY: True,
        Attribute.EC_PARAMS: p11ext.der_oid(p11ext.CURVES["secp384r1"][0]),
        Attribute.EC_POINT: p11ext.der_octet_string(point),
    })
    r, s = decode_dss_signature(theirs.sign(DATA, ec.ECDSA(hashes.SHA384())))
    raw = r.to_bytes(48, "big") + s.to_bytes(48, "big")
    assert pub.verify(DATA, raw, mechanism=Mechanism.ECDSA_SHA384) is True
    assert pub.verify(DATA[:-1], raw, mechanism=Mechanism.ECDSA_SHA384) is False


def ecdh(priv, peer_point: bytes, bits: int):
    return priv.derive_key(KeyType.GENERIC_SECRET, bits, mechanism=Mechanism.ECDH1_DERIVE,
                           mechanism_param=(KDF.NULL, None, peer_point), template=READABLE)


@pytest.mark.mechanisms(Mechanism.EC_KEY_PAIR_GEN, Mechanism.ECDH1_DERIVE)
@pytest.mark.parametrize("curve", ["secp256r1", "secp384r1", "secp521r1", "secp256k1"])
def test_ecdh_both_sides_agree(session, curve):
    size = p11ext.CURVES[curve][2]
    a_pub, a_priv = ec_keypair(session, curve)
    b_pub, b_priv = ec_keypair(session, curve)
    ab = ecdh(a_priv, public_point(b_pub, curve), size * 8)[Attribute.VALUE]
    ba = ecdh(b_priv, public_point(a_pub, curve), size * 8)[Attribute.VALUE]
    assert ab == ba and len(ab) == size

    # against cryptography: token private key, cryptography peer
    peer = ec.generate_private_key(crypto_curve(curve))
    peer_point = peer.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    ours = ecdh(a_priv, peer_point, size * 8)[Attribute.VALUE]
    assert ours == peer.exchange(ec.ECDH(), crypto_public(a_pub, curve))


@pytest.mark.mechanisms(Mechanism.ECDH1_DERIVE, Mechanism.AES_ECB)
def test_ecdh_derives_usable_aes_key(session, p256):
    _, a_priv = p256
    peer = ec.generate_private_key(ec.SECP256R1())
    peer_point = peer.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    aes = a_priv.derive_key(KeyType.AES, 128, mechanism=Mechanism.ECDH1_DERIVE,
                            mechanism_param=(KDF.NULL, None, peer_point),
                            capabilities=MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT, template=READABLE)
    shared = peer.exchange(ec.ECDH(), crypto_public(p256[0], "secp256r1"))
    # With CKD_NULL and a shorter CKA_VALUE_LEN the key is the trailing bytes of
    # the shared secret (as SoftHSMv2 and Kryoptic do).
    assert aes[Attribute.VALUE] == shared[-16:]
    block = os.urandom(16)
    assert aes.decrypt(aes.encrypt(block, mechanism=Mechanism.AES_ECB), mechanism=Mechanism.AES_ECB) == block


# --- Edwards: Ed25519, Ed448 -----------------------------------------------------

EDWARDS_PARAMS = [
    pytest.param("Ed25519", ed25519.Ed25519PublicKey, id="Ed25519"),
    pytest.param("Ed448", ed448.Ed448PublicKey, id="Ed448"),
]


def edwards_keypair(session, name, ec_params=None):
    oid = p11ext.EDWARDS[name][0]
    return session.generate_keypair(
        KeyType.EC_EDWARDS, label=unique(name),
        public_template={Attribute.EC_PARAMS: ec_params or p11ext.der_oid(oid)})


@pytest.mark.mechanisms(Mechanism.EC_EDWARDS_KEY_PAIR_GEN, Mechanism.EDDSA)
@pytest.mark.parametrize("name,pubcls", EDWARDS_PARAMS)
def test_eddsa_sign_verifies_with_cryptography(session, name, pubcls):
    pub, priv = edwards_keypair(session, name)
    _, pub_len, sig_len = p11ext.EDWARDS[name]
    raw = p11ext.unwrap_octet_string(pub[Attribute.EC_POINT], pub_len)
    theirs = pubcls.from_public_bytes(raw)
    sig = priv.sign(DATA, mechanism=Mechanism.EDDSA)
    assert len(sig) == sig_len
    theirs.verify(sig, DATA)
    with pytest.raises(InvalidSignature):
        theirs.verify(sig, DATA + b".")
    assert priv.sign(DATA, mechanism=Mechanism.EDDSA) == sig  # deterministic
    assert pub.verify(DATA, sig, mechanism=Mechanism.EDDSA) is True
    assert pub.verify(DATA[1:], sig, mechanism=Mechanism.EDDSA) is False


@pytest.mark.mechanisms(Mechanism.EC_EDWARDS_KEY_PAIR_GEN, Mechanism.EDDSA)
@pytest.mark.parametrize("curve_name,name", [("edwards25519", "Ed25519"), ("edwards448", "Ed448")])
def test_eddsa_curve_given_by_name(session, curve_name, name):
    """CKA_EC_PARAMS may name the curve with a PrintableString instead of an OID."""
    pub, priv = edwards_keypair(session, name, ec_params=p11ext.der_printable(curve_name))
    sig = priv.sign(DATA, mechanism=Mechanism.EDDSA)
    assert pub.verify(DATA, sig, mechanism=Mechanism.EDDSA) is True


@pytest.mark.mechanisms(Mechanism.EDDSA)
def test_ed448_with_context(session):
    """Ed448 with CK_EDDSA_PARAMS: a context string changes the signature."""
    if ts.softhsm_mode():
        pytest.skip("SoftHSMv2 2.6 ignores CK_EDDSA_PARAMS")
    pub, priv = edwards_keypair(session, "Ed448")
    ctx = b"opencf"
    sig = priv.sign(DATA, mechanism=Mechanism.EDDSA, mechanism_param=(False, ctx))
    assert pub.verify(DATA, sig, mechanism=Mechanism.EDDSA, mechanism_param=(False, ctx)) is True
    assert pub.verify(DATA, sig, mechanism=Mechanism.EDDSA, mechanism_param=(False, b"other")) is False
    assert sig != priv.sign(DATA, mechanism=Mechanism.EDDSA, mechanism_param=(False, None))


@pytest.mark.mechanisms(Mechanism.EDDSA)
def test_imported_ed25519_public_key_verifies(session):
    theirs = ed25519.Ed25519PrivateKey.generate()
    raw = theirs.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    pub = session.create_object({
        Attribute.CLASS: ObjectClass.PUBLIC_KEY, Attribute.KEY_TYPE: KeyType.EC_EDWARDS,
        Attribute.TOKEN: False, Attribute.VERIFY: True,
        Attribute.EC_PARAMS: p11ext.der_oid(p11ext.EDWARDS["Ed25519"][0]),
        Attribute.EC_POINT: p11ext.der_octet_string(raw),
    })
    sig = theirs.sign(DATA)
    assert pub.verify(DATA, sig, mechanism=Mechanism.EDDSA) is True
    assert pub.verify(DATA + b"?", sig, mechanism=Mechanism.EDDSA) is False


# --- Montgomery: X25519, X448 ----------------------------------------------------

MONTGOMERY_PARAMS = [
    pytest.param("X25519", x25519, id="X25519"),
    pytest.param("X448", x448, id="X448"),
]


def montgomery_keypair(session, name):
    oid = p11ext.MONTGOMERY[name][0]
    return session.generate_keypair(
        p11ext.CKK_EC_MONTGOMERY, mechanism=p11ext.CKM_EC_MONTGOMERY_KEY_PAIR_GEN,
        capabilities=MechanismFlag.DERIVE, label=unique(name),
        public_template={Attribute.EC_PARAMS: p11ext.der_oid(oid)})


@pytest.mark.mechanisms(p11ext.CKM_EC_MONTGOMERY_KEY_PAIR_GEN, Mechanism.ECDH1_DERIVE)
@pytest.mark.parametrize("name,mod", MONTGOMERY_PARAMS)
def test_xdh_both_sides_agree(session, name, mod):
    size = p11ext.MONTGOMERY[name][1]
    a_pub, a_priv = montgomery_keypair(session, name)
    b_pub, b_priv = montgomery_keypair(session, name)
    assert a_priv[Attribute.KEY_TYPE] == p11ext.CKK_EC_MONTGOMERY
    a_raw = p11ext.unwrap_octet_string(a_pub[Attribute.EC_POINT], size)
    b_raw = p11ext.unwrap_octet_string(b_pub[Attribute.EC_POINT], size)
    ab = ecdh(a_priv, b_raw, size * 8)[Attribute.VALUE]
    ba = ecdh(b_priv, a_raw, size * 8)[Attribute.VALUE]
    assert ab == ba and len(ab) == size

    private_cls = getattr(mod, f"{name}PrivateKey")
    public_cls = getattr(mod, f"{name}PublicKey")
    peer = private_cls.generate()
    peer_raw = peer.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    ours = ecdh(a_priv, peer_raw, size * 8)[Attribute.VALUE]
    assert ours == peer.exchange(public_cls.from_public_bytes(a_raw))
