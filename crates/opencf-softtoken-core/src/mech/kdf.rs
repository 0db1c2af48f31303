//! Key derivation: PBKDF2 (`CKM_PKCS5_PBKD2` through `C_GenerateKey`) and HKDF
//! (`CKM_HKDF_DERIVE`, `CKM_HKDF_DATA` through `C_DeriveKey`), computed by OpenSSL.

use super::sym::{check_secret_len, implied_len, secret_attrs};
use super::{digest, ossl_err, Key};
use crate::attrs::{AttrMap, AttrMapExt};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechParam, Mechanism};
use openssl::hash::MessageDigest;
use openssl::kdf::{hkdf, HkdfMode};
use openssl::md::Md;
use zeroize::Zeroizing;

/// The digest of a `CKP_PKCS5_PBKD2_HMAC_*` pseudo-random function.
fn pbkdf2_md(prf: CK_ULONG) -> CkResult<MessageDigest> {
    let md = match prf {
        CKP_PKCS5_PBKD2_HMAC_SHA1 => Some(MessageDigest::sha1()),
        CKP_PKCS5_PBKD2_HMAC_SHA224 => Some(MessageDigest::sha224()),
        CKP_PKCS5_PBKD2_HMAC_SHA256 => Some(MessageDigest::sha256()),
        CKP_PKCS5_PBKD2_HMAC_SHA384 => Some(MessageDigest::sha384()),
        CKP_PKCS5_PBKD2_HMAC_SHA512 => Some(MessageDigest::sha512()),
        CKP_PKCS5_PBKD2_HMAC_SHA512_224 => MessageDigest::from_name("SHA512-224"),
        CKP_PKCS5_PBKD2_HMAC_SHA512_256 => MessageDigest::from_name("SHA512-256"),
        _ => None,
    };
    md.ok_or(CKR_MECHANISM_PARAM_INVALID)
}

/// `C_GenerateKey` with `CKM_PKCS5_PBKD2`: a secret key derived from the password of the
/// parameter. The key type is the template's `CKA_KEY_TYPE` (default
/// `CKK_GENERIC_SECRET`); the length its `CKA_VALUE_LEN`, or the type's fixed length
/// (Triple-DES 24, ChaCha20 32).
pub fn pbkdf2_generate(mech: &Mechanism, template: &AttrMap) -> CkResult<AttrMap> {
    let MechParam::Pbkdf2 {
        salt_source,
        salt,
        iterations,
        prf,
        password,
    } = &mech.param
    else {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    };
    if *salt_source != CKZ_SALT_SPECIFIED {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let md = pbkdf2_md(*prf)?;
    let int_max = i32::MAX as usize;
    let iter = usize::try_from(*iterations).map_err(|_| CKR_MECHANISM_PARAM_INVALID)?;
    if iter == 0 || iter > int_max || password.len() > int_max || salt.len() > int_max {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    if let Some(class) = template.ulong(CKA_CLASS)? {
        if class != CKO_SECRET_KEY {
            return Err(CKR_TEMPLATE_INCONSISTENT);
        }
    }
    let kt = template.ulong(CKA_KEY_TYPE)?.unwrap_or(CKK_GENERIC_SECRET);
    let len = match (template.ulong(CKA_VALUE_LEN)?, implied_len(kt)) {
        (Some(l), Some(f)) if usize::try_from(l).ok() != Some(f) => {
            return Err(CKR_TEMPLATE_INCONSISTENT)
        }
        (_, Some(f)) => f,
        (Some(l), None) => usize::try_from(l).map_err(|_| CKR_ATTRIBUTE_VALUE_INVALID)?,
        (None, None) => return Err(CKR_TEMPLATE_INCOMPLETE),
    };
    check_secret_len(kt, len)?;
    let mut value = Zeroizing::new(vec![0u8; len]);
    openssl::pkcs5::pbkdf2_hmac(password, salt, iter, md, &mut value).map_err(ossl_err)?;
    Ok(secret_attrs(kt, value.to_vec()))
}

/// `C_DeriveKey` with `CKM_HKDF_DERIVE` (base: a generic secret or HKDF key) or
/// `CKM_HKDF_DATA` (base: a data object): extract, expand, or both. Expanding needs the output
/// length (`value_len`; absent → `CKR_TEMPLATE_INCOMPLETE`), at most 255 hash lengths; extract
/// alone gives the pseudo-random key, one hash length. An expand-only derivation takes the
/// base key's value as the pseudo-random key.
pub fn hkdf_derive(
    mech: &Mechanism,
    base: Key,
    salt_key: Option<Key>,
    value_len: Option<usize>,
) -> CkResult<Zeroizing<Vec<u8>>> {
    let MechParam::Hkdf {
        extract,
        expand,
        prf_hash,
        salt_type,
        salt,
        info,
        ..
    } = &mech.param
    else {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    };
    if !*extract && !*expand {
        return Err(CKR_MECHANISM_PARAM_INVALID);
    }
    let hash_len = digest::output_len(*prf_hash).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
    let md_name = digest::md_for(*prf_hash).ok_or(CKR_MECHANISM_PARAM_INVALID)?;
    let md = Md::from_nid(md_name.type_()).ok_or(CKR_MECHANISM_PARAM_INVALID)?;

    if mech.mechanism == CKM_HKDF_DERIVE {
        let kt = base.key_type()?;
        if kt != CKK_GENERIC_SECRET && kt != CKK_HKDF {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        }
    }
    let ikm = base.value()?;

    let salt: Option<&[u8]> = if *extract {
        match *salt_type {
            CKF_HKDF_SALT_NULL => None,
            CKF_HKDF_SALT_DATA => Some(salt),
            CKF_HKDF_SALT_KEY => {
                let sk = salt_key.ok_or(CKR_MECHANISM_PARAM_INVALID)?;
                let kt = sk.key_type()?;
                if kt != CKK_GENERIC_SECRET && kt != CKK_HKDF {
                    return Err(CKR_KEY_TYPE_INCONSISTENT);
                }
                Some(sk.value()?)
            }
            _ => return Err(CKR_MECHANISM_PARAM_INVALID),
        }
    } else {
        None
    };

    let (mode, len) = match (*extract, *expand) {
        (true, false) => {
            if value_len.is_some_and(|l| l != hash_len) {
                return Err(CKR_TEMPLATE_INCONSISTENT);
            }
            (HkdfMode::ExtractOnly, hash_len)
        }
        (e, _) => {
            let len = value_len.ok_or(CKR_TEMPLATE_INCOMPLETE)?;
            if len == 0 || len > 255 * hash_len {
                return Err(CKR_KEY_SIZE_RANGE);
            }
            (
                if e {
                    HkdfMode::ExtractAndExpand
                } else {
                    HkdfMode::ExpandOnly
                },
                len,
            )
        }
    };
    let info = if *expand && !info.is_empty() {
        Some(info.as_slice())
    } else {
        None
    };
    let mut out = Zeroizing::new(vec![0u8; len]);
    hkdf(md, ikm, salt, info, mode, None, &mut out).map_err(ossl_err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mech::KeyCache;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn pbkdf2(prf: CK_ULONG, pw: &[u8], salt: &[u8], iter: CK_ULONG, len: usize) -> Vec<u8> {
        let mech = Mechanism {
            mechanism: CKM_PKCS5_PBKD2,
            param: MechParam::Pbkdf2 {
                salt_source: CKZ_SALT_SPECIFIED,
                salt: salt.to_vec(),
                iterations: iter,
                prf,
                password: pw.to_vec(),
            },
        };
        let mut t = AttrMap::new();
        t.set_ulong(CKA_VALUE_LEN, len as CK_ULONG);
        let m = pbkdf2_generate(&mech, &t).unwrap();
        assert_eq!(m.ulong(CKA_KEY_TYPE).unwrap(), Some(CKK_GENERIC_SECRET));
        assert_eq!(m.ulong(CKA_CLASS).unwrap(), Some(CKO_SECRET_KEY));
        assert_eq!(m.ulong(CKA_VALUE_LEN).unwrap(), Some(len as CK_ULONG));
        m.bytes(CKA_VALUE).unwrap().to_vec()
    }

    #[test]
    fn rfc6070_pbkdf2() {
        let sha1 = CKP_PKCS5_PBKD2_HMAC_SHA1;
        assert_eq!(
            pbkdf2(sha1, b"password", b"salt", 1, 20),
            unhex("0c60c80f961f0e71f3a9b524af6012062fe037a6")
        );
        assert_eq!(
            pbkdf2(sha1, b"password", b"salt", 4096, 20),
            unhex("4b007901b765489abead49d926f721d065a429c1")
        );
        assert_eq!(
            pbkdf2(
                sha1,
                b"passwordPASSWORDpassword",
                b"saltSALTsaltSALTsaltSALTsaltSALTsalt",
                4096,
                25
            ),
            unhex("3d2eec4fe41c849b80c8d83662c0e44a8b291a964cf2f07038")
        );
        assert_eq!(
            pbkdf2(sha1, b"pass\0word", b"sa\0lt", 4096, 16),
            unhex("56fa6aa75548099dcc37d7f03425e0c3")
        );
    }

    #[test]
    fn pbkdf2_key_types_and_errors() {
        let mut mech = Mechanism {
            mechanism: CKM_PKCS5_PBKD2,
            param: MechParam::Pbkdf2 {
                salt_source: CKZ_SALT_SPECIFIED,
                salt: b"salt".to_vec(),
                iterations: 10,
                prf: CKP_PKCS5_PBKD2_HMAC_SHA256,
                password: b"pw".to_vec(),
            },
        };
        let mut t = AttrMap::new();
        t.set_ulong(CKA_KEY_TYPE, CKK_DES3);
        let m = pbkdf2_generate(&mech, &t).unwrap();
        assert_eq!(m.bytes(CKA_VALUE).unwrap().len(), 24);
        let mut t = AttrMap::new();
        t.set_ulong(CKA_KEY_TYPE, CKK_AES);
        assert_eq!(
            pbkdf2_generate(&mech, &t).err(),
            Some(CKR_TEMPLATE_INCOMPLETE)
        );
        t.set_ulong(CKA_VALUE_LEN, 20);
        assert_eq!(
            pbkdf2_generate(&mech, &t).err(),
            Some(CKR_ATTRIBUTE_VALUE_INVALID)
        );
        t.set_ulong(CKA_VALUE_LEN, 32);
        let m = pbkdf2_generate(&mech, &t).unwrap();
        assert_eq!(m.ulong(CKA_KEY_TYPE).unwrap(), Some(CKK_AES));
        if let MechParam::Pbkdf2 { iterations, .. } = &mut mech.param {
            *iterations = 0;
        }
        assert_eq!(
            pbkdf2_generate(&mech, &t).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        if let MechParam::Pbkdf2 {
            iterations, prf, ..
        } = &mut mech.param
        {
            *iterations = 1;
            *prf = CKP_PKCS5_PBKD2_HMAC_GOSTR3411;
        }
        assert_eq!(
            pbkdf2_generate(&mech, &t).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
    }

    fn secret(kt: CK_KEY_TYPE, v: &[u8]) -> AttrMap {
        let mut m = AttrMap::new();
        m.set_ulong(CKA_CLASS, CKO_SECRET_KEY);
        m.set_ulong(CKA_KEY_TYPE, kt);
        m.insert(CKA_VALUE, v.to_vec());
        m
    }

    fn hkdf_mech(
        extract: bool,
        expand: bool,
        salt_type: CK_ULONG,
        salt: &[u8],
        info: &[u8],
    ) -> Mechanism {
        Mechanism {
            mechanism: CKM_HKDF_DERIVE,
            param: MechParam::Hkdf {
                extract,
                expand,
                prf_hash: CKM_SHA256,
                salt_type,
                salt: salt.to_vec(),
                salt_key: 0,
                info: info.to_vec(),
            },
        }
    }

    #[test]
    fn rfc5869_hkdf() {
        // Test case 1 (SHA-256).
        let ikm = secret(CKK_GENERIC_SECRET, &[0x0b; 22]);
        let salt = unhex("000102030405060708090a0b0c");
        let info = unhex("f0f1f2f3f4f5f6f7f8f9");
        let prk = "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5";
        let okm =
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865";
        let cache = KeyCache::default();
        let base = Key {
            attrs: &ikm,
            cache: &cache,
        };
        let both = hkdf_mech(true, true, CKF_HKDF_SALT_DATA, &salt, &info);
        assert_eq!(
            hkdf_derive(&both, base, None, Some(42)).unwrap().to_vec(),
            unhex(okm)
        );
        let ext = hkdf_mech(true, false, CKF_HKDF_SALT_DATA, &salt, &info);
        assert_eq!(
            hkdf_derive(&ext, base, None, None).unwrap().to_vec(),
            unhex(prk)
        );
        // Expand only, from the PRK as a key.
        let prk_key = secret(CKK_HKDF, &unhex(prk));
        let exp = hkdf_mech(false, true, CKF_HKDF_SALT_NULL, b"", &info);
        let k = Key {
            attrs: &prk_key,
            cache: &cache,
        };
        assert_eq!(
            hkdf_derive(&exp, k, None, Some(42)).unwrap().to_vec(),
            unhex(okm)
        );
        // Salt as a key.
        let salt_key = secret(CKK_GENERIC_SECRET, &salt);
        let sk = Key {
            attrs: &salt_key,
            cache: &cache,
        };
        let with_key = hkdf_mech(true, true, CKF_HKDF_SALT_KEY, b"", &info);
        assert_eq!(
            hkdf_derive(&with_key, base, Some(sk), Some(42))
                .unwrap()
                .to_vec(),
            unhex(okm)
        );
        assert_eq!(
            hkdf_derive(&with_key, base, None, Some(42)).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        // Test case 3: no salt, no info.
        let none = hkdf_mech(true, true, CKF_HKDF_SALT_NULL, b"", b"");
        assert_eq!(
            hkdf_derive(&none, base, None, Some(42)).unwrap().to_vec(),
            unhex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")
        );
        // Errors.
        assert_eq!(
            hkdf_derive(&both, base, None, None).err(),
            Some(CKR_TEMPLATE_INCOMPLETE)
        );
        assert_eq!(
            hkdf_derive(&both, base, None, Some(255 * 32 + 1)).err(),
            Some(CKR_KEY_SIZE_RANGE)
        );
        assert!(hkdf_derive(&both, base, None, Some(255 * 32)).is_ok());
        assert_eq!(
            hkdf_derive(&ext, base, None, Some(16)).err(),
            Some(CKR_TEMPLATE_INCONSISTENT)
        );
        let neither = hkdf_mech(false, false, CKF_HKDF_SALT_NULL, b"", b"");
        assert_eq!(
            hkdf_derive(&neither, base, None, Some(16)).err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        let aes = secret(CKK_AES, &[0; 16]);
        let ak = Key {
            attrs: &aes,
            cache: &cache,
        };
        assert_eq!(
            hkdf_derive(&both, ak, None, Some(16)).err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
    }
}
