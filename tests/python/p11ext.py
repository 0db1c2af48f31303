"""PKCS#11 constants and mechanism parameters that python-pkcs11 0.10.1 lacks.

python-pkcs11 accepts a mechanism only if it is a member of its ``Mechanism``
enum, a key type only if it is a member of ``KeyType``, and reads the key type
of every object it is handed back into ``KeyType``. It has no member for
ChaCha20, HKDF or Montgomery curves (X25519/X448), and no parameter classes for
them or for PBKDF2. It does pass a ``bytes`` mechanism parameter through to the
module unchanged.

This module therefore

* adds the missing PKCS#11 3.0 numbers (from pkcs11t.h) as real members of
  python-pkcs11's enums, so the ordinary python-pkcs11 calls accept them, and
* lays out the C parameter structures with ctypes (x86-64 Linux: CK_ULONG and
  pointers are 8 bytes) and hands python-pkcs11 their bytes.

Every call still goes through python-pkcs11 into the module's C ABI; nothing
here computes a result.
"""

from __future__ import annotations

import ctypes
import enum

from pkcs11 import Attribute, KeyType, Mechanism

# --- enum members python-pkcs11 does not define ------------------------------


def _extend(enum_cls: type[enum.IntEnum], name: str, value: int) -> enum.IntEnum:
    """Add NAME = VALUE to an IntEnum unless it already has the value."""
    existing = enum_cls._value2member_map_.get(value)
    if existing is not None:
        return existing
    member = int.__new__(enum_cls, value)
    member._name_ = name
    member._value_ = value
    member.__objclass__ = enum_cls
    enum_cls._member_map_[name] = member
    enum_cls._value2member_map_[value] = member
    enum_cls._member_names_.append(name)
    return member


CKM_CHACHA20_KEY_GEN = _extend(Mechanism, "CHACHA20_KEY_GEN", 0x00001225)
CKM_CHACHA20_POLY1305 = _extend(Mechanism, "CHACHA20_POLY1305", 0x00004021)
CKM_EC_MONTGOMERY_KEY_PAIR_GEN = _extend(Mechanism, "EC_MONTGOMERY_KEY_PAIR_GEN", 0x00001056)
CKM_HKDF_DERIVE = _extend(Mechanism, "HKDF_DERIVE", 0x0000402A)
CKM_HKDF_DATA = _extend(Mechanism, "HKDF_DATA", 0x0000402B)
CKM_HKDF_KEY_GEN = _extend(Mechanism, "HKDF_KEY_GEN", 0x0000402C)

CKK_CHACHA20 = _extend(KeyType, "CHACHA20", 0x00000033)
CKK_EC_MONTGOMERY = _extend(KeyType, "EC_MONTGOMERY", 0x00000041)
CKK_HKDF = _extend(KeyType, "HKDF", 0x00000042)

CKF_USER_PIN_TO_BE_CHANGED = 0x00080000

# PBKDF2
CKZ_SALT_SPECIFIED = 0x00000001
CKP_PKCS5_PBKD2_HMAC_SHA1 = 0x00000001
CKP_PKCS5_PBKD2_HMAC_SHA256 = 0x00000004
CKP_PKCS5_PBKD2_HMAC_SHA512 = 0x00000006

# HKDF
CKF_HKDF_SALT_NULL = 0x00000001
CKF_HKDF_SALT_DATA = 0x00000002
CKF_HKDF_SALT_KEY = 0x00000004

# ML-DSA / SLH-DSA signing context (PKCS#11 3.2)
CKH_HEDGE_PREFERRED = 0x00000000
CKH_HEDGE_REQUIRED = 0x00000001
CKH_DETERMINISTIC_REQUIRED = 0x00000002

assert Attribute.PARAMETER_SET == 0x61D


# --- parameter structures ----------------------------------------------------

CK_ULONG = ctypes.c_ulong
CK_BBOOL = ctypes.c_ubyte
CK_BYTE_PTR = ctypes.c_void_p


class RawParam:
    """A C parameter structure and the buffers its pointers refer to.

    ``bytes(param)`` is what python-pkcs11 passes as pParameter. Keep the
    RawParam object alive until the PKCS#11 call has returned: the pointers
    inside the bytes refer to buffers it owns.
    """

    def __init__(self, struct: ctypes.Structure, buffers: list):
        self.struct = struct
        self.buffers = buffers

    def __bytes__(self) -> bytes:
        return ctypes.string_at(ctypes.addressof(self.struct), ctypes.sizeof(self.struct))


def _buf(data: bytes | None, keep: list) -> tuple[int | None, int]:
    if data is None:
        return None, 0
    b = ctypes.create_string_buffer(bytes(data), len(data) or 1)
    keep.append(b)
    return ctypes.addressof(b), len(data)


class _HKDF(ctypes.Structure):
    _fields_ = [
        ("bExtract", CK_BBOOL),
        ("bExpand", CK_BBOOL),
        ("prfHashMechanism", CK_ULONG),
        ("ulSaltType", CK_ULONG),
        ("pSalt", CK_BYTE_PTR),
        ("ulSaltLen", CK_ULONG),
        ("hSaltKey", CK_ULONG),
        ("pInfo", CK_BYTE_PTR),
        ("ulInfoLen", CK_ULONG),
    ]


def hkdf_params(
    prf: Mechanism,
    *,
    salt: bytes | None,
    info: bytes | None,
    extract: bool = True,
    expand: bool = True,
    salt_key: int = 0,
) -> RawParam:
    """CK_HKDF_PARAMS. salt=None means CKF_HKDF_SALT_NULL (or SALT_KEY with salt_key)."""
    keep: list = []
    p = _HKDF()
    p.bExtract = 1 if extract else 0
    p.bExpand = 1 if expand else 0
    p.prfHashMechanism = int(prf)
    if salt_key:
        p.ulSaltType = CKF_HKDF_SALT_KEY
        p.hSaltKey = salt_key
    elif salt is None:
        p.ulSaltType = CKF_HKDF_SALT_NULL
    else:
        p.ulSaltType = CKF_HKDF_SALT_DATA
        p.pSalt, p.ulSaltLen = _buf(salt, keep)
    p.pInfo, p.ulInfoLen = _buf(info, keep)
    return RawParam(p, keep)


class _PBKD2Params2(ctypes.Structure):
    # CK_PKCS5_PBKD2_PARAMS2 (PKCS#11 3.0): ulPasswordLen held by value.
    _fields_ = [
        ("saltSource", CK_ULONG),
        ("pSaltSourceData", CK_BYTE_PTR),
        ("ulSaltSourceDataLen", CK_ULONG),
        ("iterations", CK_ULONG),
        ("prf", CK_ULONG),
        ("pPrfData", CK_BYTE_PTR),
        ("ulPrfDataLen", CK_ULONG),
        ("pPassword", CK_BYTE_PTR),
        ("ulPasswordLen", CK_ULONG),
    ]


class _PBKD2Params(ctypes.Structure):
    # CK_PKCS5_PBKD2_PARAMS (2.40): ulPasswordLen is a CK_ULONG_PTR.
    _fields_ = [
        ("saltSource", CK_ULONG),
        ("pSaltSourceData", CK_BYTE_PTR),
        ("ulSaltSourceDataLen", CK_ULONG),
        ("iterations", CK_ULONG),
        ("prf", CK_ULONG),
        ("pPrfData", CK_BYTE_PTR),
        ("ulPrfDataLen", CK_ULONG),
        ("pPassword", CK_BYTE_PTR),
        ("ulPasswordLen", ctypes.c_void_p),
    ]


def pbkdf2_params(password: bytes, salt: bytes, iterations: int, prf: int, *, v240: bool = False) -> RawParam:
    """CK_PKCS5_PBKD2_PARAMS2, or the 2.40 CK_PKCS5_PBKD2_PARAMS with v240=True."""
    keep: list = []
    p = _PBKD2Params() if v240 else _PBKD2Params2()
    p.saltSource = CKZ_SALT_SPECIFIED
    p.pSaltSourceData, p.ulSaltSourceDataLen = _buf(salt, keep)
    p.iterations = iterations
    p.prf = prf
    p.pPrfData, p.ulPrfDataLen = None, 0
    p.pPassword, plen = _buf(password, keep)
    if v240:
        n = CK_ULONG(plen)
        keep.append(n)
        p.ulPasswordLen = ctypes.addressof(n)
    else:
        p.ulPasswordLen = plen
    return RawParam(p, keep)


class _ChaChaPoly(ctypes.Structure):
    _fields_ = [
        ("pNonce", CK_BYTE_PTR),
        ("ulNonceLen", CK_ULONG),
        ("pAAD", CK_BYTE_PTR),
        ("ulAADLen", CK_ULONG),
    ]


def chacha20_poly1305_params(nonce: bytes, aad: bytes | None = None) -> RawParam:
    """CK_SALSA20_CHACHA20_POLY1305_PARAMS."""
    keep: list = []
    p = _ChaChaPoly()
    p.pNonce, p.ulNonceLen = _buf(nonce, keep)
    p.pAAD, p.ulAADLen = _buf(aad, keep)
    return RawParam(p, keep)


class _SignContext(ctypes.Structure):
    _fields_ = [
        ("hedgeVariant", CK_ULONG),
        ("pContext", CK_BYTE_PTR),
        ("ulContextLen", CK_ULONG),
    ]


def sign_context_params(context: bytes | None, hedge: int = CKH_HEDGE_PREFERRED) -> RawParam:
    """CK_SIGN_ADDITIONAL_CONTEXT (ML-DSA, PKCS#11 3.2)."""
    keep: list = []
    p = _SignContext()
    p.hedgeVariant = hedge
    p.pContext, p.ulContextLen = _buf(context, keep)
    return RawParam(p, keep)


# --- DER helpers ---------------------------------------------------------------


def der_oid(dotted: str) -> bytes:
    """DER encoding of an OBJECT IDENTIFIER (CKA_EC_PARAMS for a named curve)."""
    parts = [int(x) for x in dotted.split(".")]
    body = bytearray([40 * parts[0] + parts[1]])
    for n in parts[2:]:
        chunk = [n & 0x7F]
        n >>= 7
        while n:
            chunk.append(0x80 | (n & 0x7F))
            n >>= 7
        body.extend(reversed(chunk))
    return bytes([0x06, len(body)]) + bytes(body)


def der_printable(text: str) -> bytes:
    """DER PrintableString (the curve-name form of CKA_EC_PARAMS)."""
    raw = text.encode("ascii")
    return bytes([0x13, len(raw)]) + raw


def der_octet_string(data: bytes) -> bytes:
    n = len(data)
    if n < 0x80:
        head = bytes([0x04, n])
    elif n < 0x100:
        head = bytes([0x04, 0x81, n])
    else:
        head = bytes([0x04, 0x82, n >> 8, n & 0xFF])
    return head + data


def unwrap_octet_string(data: bytes, expected_len: int) -> bytes:
    """CKA_EC_POINT as raw bytes: accepts the DER OCTET STRING form or raw bytes."""
    if len(data) == expected_len:
        return data
    if data[:1] == b"\x04":
        if data[1] < 0x80:
            hdr = 2
            n = data[1]
        else:
            k = data[1] & 0x7F
            hdr = 2 + k
            n = int.from_bytes(data[2:hdr], "big")
        if n == expected_len and len(data) == hdr + n:
            return data[hdr:]
    raise AssertionError(f"CKA_EC_POINT of {len(data)} bytes is neither {expected_len} raw bytes nor their DER OCTET STRING")


CURVES = {
    # name: (OID, cryptography curve name, field size in bytes)
    "secp256r1": ("1.2.840.10045.3.1.7", "SECP256R1", 32),
    "secp384r1": ("1.3.132.0.34", "SECP384R1", 48),
    "secp521r1": ("1.3.132.0.35", "SECP521R1", 66),
    "secp256k1": ("1.3.132.0.10", "SECP256K1", 32),
}

EDWARDS = {
    # name: (OID, public key bytes, signature bytes)
    "Ed25519": ("1.3.101.112", 32, 64),
    "Ed448": ("1.3.101.113", 57, 114),
}

MONTGOMERY = {
    # name: (OID, public key bytes)
    "X25519": ("1.3.101.110", 32),
    "X448": ("1.3.101.111", 56),
}
