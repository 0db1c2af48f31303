"""PyKCS11 against libopencf.so slot 0: key generation, signatures and encryption, each
token result checked with the `cryptography` package. One PASS/FAIL line per check.

    python opencf_pykcs11.py LIB PIN
"""
import sys
import traceback

import PyKCS11
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

LIB, PIN = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(name, fn):
    global passed, failed
    try:
        detail = fn()
        print(f"PASS {name}" + (f" ({detail})" if detail else ""))
        passed += 1
    except Exception as e:  # noqa: BLE001 - every failure is reported and counted
        print(f"FAIL {name}: {e!r}")
        traceback.print_exc(limit=3, file=sys.stdout)
        failed += 1


pkcs11 = PyKCS11.PyKCS11Lib()
pkcs11.load(LIB)
slot = pkcs11.getSlotList(tokenPresent=True)[0]
session = None
keys = {}
DATA = b"signed by the OpenCF metaslot through PyKCS11"


def open_session():
    global session
    label = pkcs11.getTokenInfo(slot).label.strip()
    assert label == "OpenCF Metaslot", label
    session = pkcs11.openSession(slot, PyKCS11.CKF_SERIAL_SESSION | PyKCS11.CKF_RW_SESSION)
    session.login(PIN)
    return f"slot {slot}: {label}"


def attr(obj, a):
    return bytes(session.getAttributeValue(obj, [a])[0])


def gen_rsa():
    pub_t = [(PyKCS11.CKA_CLASS, PyKCS11.CKO_PUBLIC_KEY), (PyKCS11.CKA_TOKEN, True),
             (PyKCS11.CKA_MODULUS_BITS, 2048), (PyKCS11.CKA_PUBLIC_EXPONENT, (1, 0, 1)),
             (PyKCS11.CKA_VERIFY, True), (PyKCS11.CKA_ENCRYPT, True), (PyKCS11.CKA_LABEL, "py-rsa")]
    priv_t = [(PyKCS11.CKA_CLASS, PyKCS11.CKO_PRIVATE_KEY), (PyKCS11.CKA_TOKEN, True),
              (PyKCS11.CKA_PRIVATE, True), (PyKCS11.CKA_SENSITIVE, True), (PyKCS11.CKA_EXTRACTABLE, False),
              (PyKCS11.CKA_SIGN, True), (PyKCS11.CKA_DECRYPT, True), (PyKCS11.CKA_LABEL, "py-rsa")]
    keys["rsa"] = session.generateKeyPair(pub_t, priv_t, mecha=PyKCS11.MechanismRSAGENERATEKEYPAIR)
    pub = keys["rsa"][0]
    keys["rsa_pub"] = rsa.RSAPublicNumbers(int.from_bytes(attr(pub, PyKCS11.CKA_PUBLIC_EXPONENT), "big"),
                                           int.from_bytes(attr(pub, PyKCS11.CKA_MODULUS), "big")).public_key()


def gen_ec():
    params = bytes.fromhex("06082a8648ce3d030107")  # OID prime256v1
    pub_t = [(PyKCS11.CKA_CLASS, PyKCS11.CKO_PUBLIC_KEY), (PyKCS11.CKA_TOKEN, True),
             (PyKCS11.CKA_EC_PARAMS, params), (PyKCS11.CKA_VERIFY, True), (PyKCS11.CKA_LABEL, "py-ec")]
    priv_t = [(PyKCS11.CKA_CLASS, PyKCS11.CKO_PRIVATE_KEY), (PyKCS11.CKA_TOKEN, True),
              (PyKCS11.CKA_PRIVATE, True), (PyKCS11.CKA_SENSITIVE, True), (PyKCS11.CKA_SIGN, True),
              (PyKCS11.CKA_LABEL, "py-ec")]
    keys["ec"] = session.generateKeyPair(pub_t, priv_t, mecha=PyKCS11.MechanismECGENERATEKEYPAIR)
    point = attr(keys["ec"][0], PyKCS11.CKA_EC_POINT)
    assert point[0] == 0x04 and point[1] == 65, "CKA_EC_POINT is not a DER OCTET STRING"
    keys["ec_pub"] = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point[2:])


def gen_aes():
    t = [(PyKCS11.CKA_CLASS, PyKCS11.CKO_SECRET_KEY), (PyKCS11.CKA_KEY_TYPE, PyKCS11.CKK_AES),
         (PyKCS11.CKA_VALUE_LEN, 32), (PyKCS11.CKA_TOKEN, True), (PyKCS11.CKA_SENSITIVE, True),
         (PyKCS11.CKA_ENCRYPT, True), (PyKCS11.CKA_DECRYPT, True), (PyKCS11.CKA_LABEL, "py-aes")]
    keys["aes"] = session.generateKey(t, mecha=PyKCS11.Mechanism(PyKCS11.CKM_AES_KEY_GEN))


def sign_rsa():
    sig = bytes(session.sign(keys["rsa"][1], DATA, PyKCS11.Mechanism(PyKCS11.CKM_SHA256_RSA_PKCS)))
    keys["rsa_pub"].verify(sig, DATA, padding.PKCS1v15(), hashes.SHA256())
    return "verified by cryptography"


def sign_pss():
    mech = PyKCS11.RSA_PSS_Mechanism(PyKCS11.CKM_SHA256_RSA_PKCS_PSS, PyKCS11.CKM_SHA256, PyKCS11.CKG_MGF1_SHA256, 32)
    sig = bytes(session.sign(keys["rsa"][1], DATA, mech))
    keys["rsa_pub"].verify(sig, DATA, padding.PSS(padding.MGF1(hashes.SHA256()), 32), hashes.SHA256())
    return "verified by cryptography"


def sign_ecdsa():
    sig = bytes(session.sign(keys["ec"][1], DATA, PyKCS11.Mechanism(PyKCS11.CKM_ECDSA_SHA256)))
    r, s = int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")
    keys["ec_pub"].verify(utils.encode_dss_signature(r, s), DATA, ec.ECDSA(hashes.SHA256()))
    return "verified by cryptography"


def oaep():
    ct = keys["rsa_pub"].encrypt(DATA, padding.OAEP(padding.MGF1(hashes.SHA256()), hashes.SHA256(), None))
    mech = PyKCS11.RSAOAEPMechanism(PyKCS11.CKM_SHA256, PyKCS11.CKG_MGF1_SHA256)
    pt = bytes(session.decrypt(keys["rsa"][1], ct, mech))
    assert pt == DATA, "decryption differs"
    return "cryptography encrypted, the token decrypted"


def aes_gcm():
    iv = bytes(session.generateRandom(12))
    mech = PyKCS11.AES_GCM_Mechanism(iv, b"aad", 128)
    ct = bytes(session.encrypt(keys["aes"], DATA, mech))
    assert len(ct) == len(DATA) + 16
    pt = bytes(session.decrypt(keys["aes"], ct, PyKCS11.AES_GCM_Mechanism(iv, b"aad", 128)))
    assert pt == DATA, "round trip differs"
    bad = bytes([ct[0] ^ 1]) + ct[1:]
    try:
        session.decrypt(keys["aes"], bad, PyKCS11.AES_GCM_Mechanism(iv, b"aad", 128))
    except PyKCS11.PyKCS11Error as e:
        return f"forgery rejected: {e}"
    raise AssertionError("a forged ciphertext decrypted")


def stored():
    found = session.findObjects([(PyKCS11.CKA_LABEL, "py-rsa"), (PyKCS11.CKA_CLASS, PyKCS11.CKO_PRIVATE_KEY)])
    assert len(found) == 1, found
    return "CKA_TOKEN keys are found again"


check("PyKCS11 loads libopencf.so, slot 0 is the metaslot, login", open_session)
if session is None:
    print(f"python: {passed} passed, {failed} failed")
    sys.exit(1)
check("generate RSA-2048 key pair (sensitive, non-extractable)", gen_rsa)
check("generate EC P-256 key pair", gen_ec)
check("generate AES-256 key", gen_aes)
check("find the generated private key", stored)
check("sign CKM_SHA256_RSA_PKCS", sign_rsa)
check("sign CKM_SHA256_RSA_PKCS_PSS", sign_pss)
check("sign CKM_ECDSA_SHA256", sign_ecdsa)
check("decrypt CKM_RSA_PKCS_OAEP (SHA-256)", oaep)
check("encrypt and decrypt CKM_AES_GCM", aes_gcm)
session.logout()
session.closeSession()
print(f"python: {passed} passed, {failed} failed")
sys.exit(0 if failed == 0 else 1)
