"""Small helpers shared by the test files."""

from __future__ import annotations

import uuid

from cryptography.hazmat.primitives.asymmetric import rsa
from pkcs11 import Attribute, KeyType, ObjectClass

# Template for a derived/unwrapped/generated secret whose value the test reads
# back to compare with an independent implementation.
READABLE = {Attribute.SENSITIVE: False, Attribute.EXTRACTABLE: True}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def import_secret(session, key_type: KeyType, value: bytes, *, label: str | None = None,
                  sensitive: bool = False, extractable: bool = True, **flags: bool):
    """C_CreateObject of a session secret key with a known value.

    flags: encrypt/decrypt/sign/verify/wrap/unwrap/derive=True.
    """
    attrs = {
        Attribute.CLASS: ObjectClass.SECRET_KEY,
        Attribute.KEY_TYPE: key_type,
        Attribute.TOKEN: False,
        Attribute.PRIVATE: True,
        Attribute.SENSITIVE: sensitive,
        Attribute.EXTRACTABLE: extractable,
        Attribute.LABEL: label or unique("imported"),
        Attribute.VALUE: value,
    }
    names = {
        "encrypt": Attribute.ENCRYPT, "decrypt": Attribute.DECRYPT,
        "sign": Attribute.SIGN, "verify": Attribute.VERIFY,
        "wrap": Attribute.WRAP, "unwrap": Attribute.UNWRAP,
        "derive": Attribute.DERIVE,
    }
    for name, on in flags.items():
        attrs[names[name]] = on
    return session.create_object(attrs)


def rsa_public(pub) -> rsa.RSAPublicKey:
    """The token RSA public key as a `cryptography` key."""
    n = int.from_bytes(pub[Attribute.MODULUS], "big")
    e = int.from_bytes(pub[Attribute.PUBLIC_EXPONENT], "big")
    return rsa.RSAPublicNumbers(e, n).public_key()
