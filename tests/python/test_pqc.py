"""ML-DSA-44/65/87 and ML-KEM-512/768/1024 (PKCS#11 3.2).

python-pkcs11 0.10.1 supports both: key generation with CKA_PARAMETER_SET,
C_Sign/C_Verify with CKM_ML_DSA, and C_EncapsulateKey/C_DecapsulateKey through
the 3.2 function list it asks the module for with C_GetInterface. The signing
context (CK_SIGN_ADDITIONAL_CONTEXT) is laid out by p11ext. Signatures and
shared secrets are checked with the `cryptography` package (ML-DSA-44/65/87,
ML-KEM-768/1024; it has no ML-KEM-512, which is checked token-to-token only).
"""

from __future__ import annotations

import os

import p11ext
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import mldsa, mlkem
from testkeys import READABLE, unique
from pkcs11 import (
    Attribute,
    GCMParams,
    KeyType,
    Mechanism,
    MechanismFlag,
    MLDSAParameterSet,
    MLKEMParameterSet,
    ObjectClass,
)

DATA = b"post-quantum signatures through PKCS#11"

ML_DSA = [
    pytest.param(MLDSAParameterSet.ML_DSA_44, mldsa.MLDSA44PublicKey, 1312, 2420, id="ML-DSA-44"),
    pytest.param(MLDSAParameterSet.ML_DSA_65, mldsa.MLDSA65PublicKey, 1952, 3309, id="ML-DSA-65"),
    pytest.param(MLDSAParameterSet.ML_DSA_87, mldsa.MLDSA87PublicKey, 2592, 4627, id="ML-DSA-87"),
]

ML_KEM = [
    pytest.param(MLKEMParameterSet.ML_KEM_512, None, 800, 768, id="ML-KEM-512"),
    pytest.param(MLKEMParameterSet.ML_KEM_768, mlkem.MLKEM768PublicKey, 1184, 1088, id="ML-KEM-768"),
    pytest.param(MLKEMParameterSet.ML_KEM_1024, mlkem.MLKEM1024PublicKey, 1568, 1568, id="ML-KEM-1024"),
]


def mldsa_keypair(session, pset):
    return session.generate_keypair(
        KeyType.ML_DSA, label=unique("mldsa"),
        public_template={Attribute.PARAMETER_SET: pset})


def mlkem_keypair(session, pset):
    return session.generate_keypair(
        KeyType.ML_KEM, label=unique("mlkem"),
        public_template={Attribute.PARAMETER_SET: pset})


@pytest.mark.mechanisms(Mechanism.ML_DSA_KEY_PAIR_GEN, Mechanism.ML_DSA)
@pytest.mark.parametrize("pset,pubcls,pub_len,sig_len", ML_DSA)
def test_ml_dsa_sign_verifies_with_cryptography(session, pset, pubcls, pub_len, sig_len):
    pub, priv = mldsa_keypair(session, pset)
    assert pub[Attribute.PARAMETER_SET] == pset
    assert priv[Attribute.PARAMETER_SET] == pset
    assert priv[Attribute.KEY_TYPE] == KeyType.ML_DSA
    raw = pub[Attribute.VALUE]
    assert len(raw) == pub_len
    theirs = pubcls.from_public_bytes(raw)

    sig = priv.sign(DATA, mechanism=Mechanism.ML_DSA)
    assert len(sig) == sig_len
    theirs.verify(sig, DATA)
    with pytest.raises(InvalidSignature):
        theirs.verify(sig, DATA + b"!")
    assert pub.verify(DATA, sig, mechanism=Mechanism.ML_DSA) is True
    assert pub.verify(DATA[:-1], sig, mechanism=Mechanism.ML_DSA) is False


@pytest.mark.mechanisms(Mechanism.ML_DSA)
def test_ml_dsa_context(session):
    pub, priv = mldsa_keypair(session, MLDSAParameterSet.ML_DSA_65)
    theirs = mldsa.MLDSA65PublicKey.from_public_bytes(pub[Attribute.VALUE])
    ctx = p11ext.sign_context_params(b"opencf context")
    sig = priv.sign(DATA, mechanism=Mechanism.ML_DSA, mechanism_param=bytes(ctx))
    theirs.verify(sig, DATA, b"opencf context")
    with pytest.raises(InvalidSignature):
        theirs.verify(sig, DATA)  # empty context
    assert pub.verify(DATA, sig, mechanism=Mechanism.ML_DSA, mechanism_param=bytes(ctx)) is True
    assert pub.verify(DATA, sig, mechanism=Mechanism.ML_DSA) is False


@pytest.mark.mechanisms(Mechanism.ML_DSA)
def test_ml_dsa_deterministic_variant(session):
    pub, priv = mldsa_keypair(session, MLDSAParameterSet.ML_DSA_44)
    det = p11ext.sign_context_params(None, hedge=p11ext.CKH_DETERMINISTIC_REQUIRED)
    a = priv.sign(DATA, mechanism=Mechanism.ML_DSA, mechanism_param=bytes(det))
    b = priv.sign(DATA, mechanism=Mechanism.ML_DSA, mechanism_param=bytes(det))
    assert a == b
    hedged = priv.sign(DATA, mechanism=Mechanism.ML_DSA)
    assert hedged != priv.sign(DATA, mechanism=Mechanism.ML_DSA)  # randomised by default
    mldsa.MLDSA44PublicKey.from_public_bytes(pub[Attribute.VALUE]).verify(a, DATA)


@pytest.mark.mechanisms(Mechanism.ML_DSA)
def test_imported_ml_dsa_public_key_verifies(session):
    theirs = mldsa.MLDSA87PrivateKey.generate()
    pub = session.create_object({
        Attribute.CLASS: ObjectClass.PUBLIC_KEY,
        Attribute.KEY_TYPE: KeyType.ML_DSA, Attribute.TOKEN: False, Attribute.VERIFY: True,
        Attribute.PARAMETER_SET: MLDSAParameterSet.ML_DSA_87,
        Attribute.VALUE: theirs.public_key().public_bytes_raw(),
    })
    sig = theirs.sign(DATA)
    assert pub.verify(DATA, sig, mechanism=Mechanism.ML_DSA) is True
    assert pub.verify(DATA + b".", sig, mechanism=Mechanism.ML_DSA) is False


@pytest.mark.mechanisms(Mechanism.ML_KEM_KEY_PAIR_GEN, Mechanism.ML_KEM)
@pytest.mark.parametrize("pset,pubcls,pub_len,ct_len", ML_KEM)
def test_ml_kem_encapsulate_decapsulate(session, pset, pubcls, pub_len, ct_len):
    pub, priv = mlkem_keypair(session, pset)
    assert pub[Attribute.PARAMETER_SET] == pset
    assert priv[Attribute.PARAMETER_SET] == pset
    assert len(pub[Attribute.VALUE]) == pub_len

    ct, ours = pub.encapsulate_key(KeyType.GENERIC_SECRET, 256, template=READABLE)
    assert len(ct) == ct_len
    theirs = priv.decapsulate_key(ct, KeyType.GENERIC_SECRET, 256, template=READABLE)
    secret = ours[Attribute.VALUE]
    assert len(secret) == 32
    assert theirs[Attribute.VALUE] == secret

    # a different ciphertext gives a different secret (implicit rejection)
    bad = bytes([ct[0] ^ 1]) + ct[1:]
    other = priv.decapsulate_key(bad, KeyType.GENERIC_SECRET, 256, template=READABLE)
    assert other[Attribute.VALUE] != secret

    if pubcls is not None:  # cryptography encapsulates to the token's public key
        shared, their_ct = pubcls.from_public_bytes(pub[Attribute.VALUE]).encapsulate()
        got = priv.decapsulate_key(their_ct, KeyType.GENERIC_SECRET, 256, template=READABLE)
        assert got[Attribute.VALUE] == shared


@pytest.mark.mechanisms(Mechanism.ML_KEM, Mechanism.AES_GCM)
def test_ml_kem_into_aes_key(session):
    pub, priv = mlkem_keypair(session, MLKEMParameterSet.ML_KEM_768)
    caps = MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT
    ct, sender = pub.encapsulate_key(KeyType.AES, 256, capabilities=caps)
    receiver = priv.decapsulate_key(ct, KeyType.AES, 256, capabilities=caps)
    nonce = os.urandom(12)
    sealed = sender.encrypt(b"hello receiver", mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(nonce))
    assert receiver.decrypt(sealed, mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(nonce)) == b"hello receiver"
