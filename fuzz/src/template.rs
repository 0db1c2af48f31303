//! Template fuzz harness, shared by the libFuzzer target
//! (`fuzz/fuzz_targets/template.rs`) and the stable driver
//! (`tests/pkcs11-tests/tests/fuzz_template.rs`), which include this file
//! with `#[path]`. It only needs the `opencf_abi` and `opencf_softtoken_core`
//! crates.
//!
//! Input format: a sequence of attributes, each
//!
//! ```text
//! header  u8
//!   bit 0   type is a u64 (LE) instead of a u32 (LE)
//!   bit 1   type is one byte, an index into KNOWN_TYPES (bit 0 ignored)
//!   bit 2   length is a u16 (LE) instead of a u8
//!   bit 3-4 value: 0, 3 = `length` raw bytes (cut short at the end of input)
//!                  1    = one byte, an index into KNOWN_ULONGS, stored as a
//!                         native CK_ULONG (no length field)
//!                  2    = one byte, stored as a CK_BBOOL (no length field)
//! type, [length], value
//! ```
//!
//! Every byte string parses, so the fuzzer never wastes inputs on framing.
//! The properties checked are that nothing panics, that the nested-template
//! encoding round-trips, and that the accelerator's check of a template
//! (`opencf_abi::schema::check_template`) answers as the software token's does.

use opencf_abi::schema;
use opencf_abi::sys::*;
use opencf_abi::{decode_template, encode_template, Attribute, ARRAY_ATTRIBUTE_FLAG};
use opencf_softtoken_core::attrs::{from_template, AttrMap};
use opencf_softtoken_core::{mech, policy};

/// Attribute types a one-byte type index picks from.
pub const KNOWN_TYPES: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_CLASS,
    CKA_TOKEN,
    CKA_PRIVATE,
    CKA_LABEL,
    CKA_APPLICATION,
    CKA_VALUE,
    CKA_OBJECT_ID,
    CKA_CERTIFICATE_TYPE,
    CKA_ISSUER,
    CKA_SERIAL_NUMBER,
    CKA_TRUSTED,
    CKA_CERTIFICATE_CATEGORY,
    CKA_JAVA_MIDP_SECURITY_DOMAIN,
    CKA_URL,
    CKA_HASH_OF_SUBJECT_PUBLIC_KEY,
    CKA_HASH_OF_ISSUER_PUBLIC_KEY,
    CKA_NAME_HASH_ALGORITHM,
    CKA_CHECK_VALUE,
    CKA_KEY_TYPE,
    CKA_SUBJECT,
    CKA_ID,
    CKA_SENSITIVE,
    CKA_ENCRYPT,
    CKA_DECRYPT,
    CKA_WRAP,
    CKA_UNWRAP,
    CKA_SIGN,
    CKA_SIGN_RECOVER,
    CKA_VERIFY,
    CKA_VERIFY_RECOVER,
    CKA_DERIVE,
    CKA_START_DATE,
    CKA_END_DATE,
    CKA_MODULUS,
    CKA_MODULUS_BITS,
    CKA_PUBLIC_EXPONENT,
    CKA_PRIVATE_EXPONENT,
    CKA_PRIME_1,
    CKA_PRIME_2,
    CKA_EXPONENT_1,
    CKA_EXPONENT_2,
    CKA_COEFFICIENT,
    CKA_PUBLIC_KEY_INFO,
    CKA_VALUE_LEN,
    CKA_EXTRACTABLE,
    CKA_LOCAL,
    CKA_NEVER_EXTRACTABLE,
    CKA_ALWAYS_SENSITIVE,
    CKA_KEY_GEN_MECHANISM,
    CKA_MODIFIABLE,
    CKA_COPYABLE,
    CKA_DESTROYABLE,
    CKA_EC_PARAMS,
    CKA_EC_POINT,
    CKA_ALWAYS_AUTHENTICATE,
    CKA_WRAP_WITH_TRUSTED,
    CKA_WRAP_TEMPLATE,
    CKA_UNWRAP_TEMPLATE,
    CKA_DERIVE_TEMPLATE,
    CKA_ALLOWED_MECHANISMS,
    CKA_UNIQUE_ID,
    CKA_PARAMETER_SET,
    CKA_SEED,
    CKA_ENCAPSULATE,
    CKA_DECAPSULATE,
    CKA_ENCAPSULATE_TEMPLATE,
    CKA_DECAPSULATE_TEMPLATE,
    CKA_VENDOR_DEFINED,
    CKA_VENDOR_DEFINED | 1,
];

/// Classes every input is checked against (plus the one in the template).
pub const CLASSES: &[CK_OBJECT_CLASS] = &[
    CKO_DATA,
    CKO_CERTIFICATE,
    CKO_PUBLIC_KEY,
    CKO_PRIVATE_KEY,
    CKO_SECRET_KEY,
    CKO_DOMAIN_PARAMETERS,
    CKO_VENDOR_DEFINED,
];

/// Key types every input is completed as (plus the one in the template).
pub const KEY_TYPES: &[CK_KEY_TYPE] = &[
    CKK_RSA,
    CKK_EC,
    CKK_EC_EDWARDS,
    CKK_EC_MONTGOMERY,
    CKK_ML_DSA,
    CKK_ML_KEM,
    CKK_GENERIC_SECRET,
    CKK_AES,
    CKK_DES3,
    CKK_CHACHA20,
    CKK_HKDF,
    CKK_SHA_1_HMAC,
    CKK_SHA256_HMAC,
    CKK_SHA512_HMAC,
    CKK_SHA3_256_HMAC,
    CKK_DSA,
    CKK_VENDOR_DEFINED,
];

/// CK_ULONG values a one-byte value index picks from.
pub const KNOWN_ULONGS: &[CK_ULONG] = &[
    0,
    1,
    2,
    3,
    4,
    5,
    7,
    16,
    24,
    32,
    64,
    128,
    256,
    1024,
    2048,
    4096,
    CKK_EC,
    CKK_EC_EDWARDS,
    CKK_EC_MONTGOMERY,
    CKK_ML_DSA,
    CKK_ML_KEM,
    CKK_GENERIC_SECRET,
    CKK_AES,
    CKK_DES3,
    CKK_CHACHA20,
    CKK_HKDF,
    CKK_SHA256_HMAC,
    CKP_ML_DSA_44,
    CKP_ML_DSA_65,
    CKP_ML_DSA_87,
    CKP_ML_KEM_512,
    CKP_ML_KEM_768,
    CKP_ML_KEM_1024,
    CKM_AES_KEY_GEN,
    CKM_RSA_PKCS_KEY_PAIR_GEN,
    CKM_EC_KEY_PAIR_GEN,
    CK_UNAVAILABLE_INFORMATION,
    CKO_VENDOR_DEFINED,
    CK_ULONG::MAX,
    CK_ULONG::MAX / 2 + 1,
    u32::MAX as CK_ULONG,
];

/// Decodes fuzzer bytes into a template (see the module docs). Total: every
/// input yields a (possibly empty) template.
pub fn parse(mut b: &[u8]) -> Vec<Attribute> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> &'a [u8] {
        let n = n.min(b.len());
        let (head, tail) = b.split_at(n);
        *b = tail;
        head
    }
    fn le(bytes: &[u8]) -> u64 {
        bytes
            .iter()
            .rev()
            .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
    }
    let mut out = Vec::new();
    while let Some((&h, rest)) = b.split_first() {
        b = rest;
        let kind: CK_ATTRIBUTE_TYPE = if h & 0x02 != 0 {
            let i = le(take(&mut b, 1)) as usize;
            KNOWN_TYPES[i % KNOWN_TYPES.len()]
        } else if h & 0x01 != 0 {
            le(take(&mut b, 8)) as CK_ATTRIBUTE_TYPE
        } else {
            le(take(&mut b, 4)) as CK_ATTRIBUTE_TYPE
        };
        let value = match (h >> 3) & 0x03 {
            1 => {
                let i = le(take(&mut b, 1)) as usize;
                KNOWN_ULONGS[i % KNOWN_ULONGS.len()].to_ne_bytes().to_vec()
            }
            2 => take(&mut b, 1).to_vec(),
            _ => {
                let len = if h & 0x04 != 0 {
                    le(take(&mut b, 2))
                } else {
                    le(take(&mut b, 1))
                } as usize;
                take(&mut b, len).to_vec()
            }
        };
        out.push(Attribute { kind, value });
    }
    out
}

/// Encodes a template in the fuzz input format (raw u64 type, u16 length),
/// for seed inputs.
pub fn unparse(attrs: &[Attribute]) -> Vec<u8> {
    let mut out = Vec::new();
    for a in attrs {
        out.push(0x01 | 0x04);
        out.extend_from_slice(&a.kind.to_le_bytes());
        let len = a.value.len().min(u16::MAX as usize);
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(&a.value[..len]);
    }
    out
}

fn ulong_of(m: &AttrMap, t: CK_ATTRIBUTE_TYPE) -> Option<CK_ULONG> {
    m.get(&t)
        .and_then(|v| <[u8; std::mem::size_of::<CK_ULONG>()]>::try_from(v.as_slice()).ok())
        .map(CK_ULONG::from_ne_bytes)
}

/// Runs one input through the template-handling code. Panics only if the
/// code under test panics or the nested-template encoding does not
/// round-trip.
pub fn run(data: &[u8]) {
    // The raw bytes as an encoded nested template, as a caller's array
    // attribute value would arrive.
    let _ = decode_template(data);

    let attrs = parse(data);
    let encoded = encode_template(&attrs);
    let decoded = decode_template(&encoded).expect("encode_template output must decode");
    assert!(
        decoded == attrs,
        "nested template round trip changed the attributes"
    );
    for a in &attrs {
        if a.kind & ARRAY_ATTRIBUTE_FLAG != 0 {
            if let Ok(inner) = decode_template(&a.value) {
                let _ = from_template(&inner);
            }
        }
    }

    // The map C_CreateObject would build; an inconsistent template still
    // gets a last-wins map so the rest of the pipeline is exercised.
    let parsed = from_template(&attrs);
    let map = match &parsed {
        Ok(m) => m.clone(),
        Err(_) => attrs.iter().map(|a| (a.kind, a.value.clone())).collect(),
    };
    let pairs: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)> =
        attrs.iter().map(|a| (a.kind, a.value.clone())).collect();

    let mut classes = CLASSES.to_vec();
    if let Some(c) = ulong_of(&map, CKA_CLASS) {
        classes.push(c);
    }
    let mut key_types = KEY_TYPES.to_vec();
    if let Some(k) = ulong_of(&map, CKA_KEY_TYPE) {
        key_types.push(k);
    }
    let gen_mech = ulong_of(&map, CKA_KEY_GEN_MECHANISM).unwrap_or(CKM_AES_KEY_GEN);

    let _ = policy::matches(&map, &pairs);
    for &class in &classes {
        // The accelerator checks the caller's slice with `schema::check_template`, the token
        // its map: both give the same answer to the same template.
        let token = parsed
            .as_ref()
            .map_err(|e| *e)
            .and_then(|m| policy::check_template(m, class));
        assert_eq!(schema::check_template(&attrs, class), token);
        let _ = policy::check_template(&map, class);
        for t in map.keys() {
            let _ = schema::allowed(class, *t);
            let _ = policy::is_hidden(&map, *t);
        }
        for origin in [
            policy::Origin::Created,
            policy::Origin::Generated(gen_mech),
            policy::Origin::Derived,
        ] {
            let mut m = map.clone();
            policy::apply_defaults(&mut m, class, origin);
            let _ = policy::matches(&m, &pairs);
            for (t, v) in &pairs {
                let _ = policy::is_hidden(&m, *t);
                for so in [false, true] {
                    for copying in [false, true] {
                        let _ = policy::check_change(&m, *t, v, so, copying);
                        let _ = policy::check_change(&map, *t, v, so, copying);
                    }
                }
            }
            if origin != policy::Origin::Created {
                continue;
            }
            // C_CreateObject's order: check, defaults, key material.
            for &kt in &key_types {
                let mut k = m.clone();
                k.insert(CKA_KEY_TYPE, kt.to_ne_bytes().to_vec());
                if mech::complete_key(class, kt, &mut k).is_ok() {
                    let _ = policy::matches(&k, &pairs);
                    for t in k.keys() {
                        let _ = policy::is_hidden(&k, *t);
                    }
                }
            }
        }
        // Key completion on the bare caller map as well (unwrap/derive paths).
        for &kt in &key_types {
            let mut k = map.clone();
            let _ = mech::complete_key(class, kt, &mut k);
        }
    }
}
