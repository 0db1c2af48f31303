//! Message authentication codes: HMAC over SHA-1, SHA-2 and SHA-3 (`CKM_*_HMAC` and
//! `CKM_*_HMAC_GENERAL`) and AES-CMAC (`CKM_AES_CMAC`, `CKM_AES_CMAC_GENERAL`), computed by
//! OpenSSL's `EVP_MAC` ([`opencf_abi::ossl_sym::Mac`]).
//!
//! HMAC keys are `CKK_GENERIC_SECRET` or the `CKK_SHA*_HMAC` type of the mechanism's hash, of
//! any length from one byte to 64 KiB (the range `C_GetMechanismInfo` gives); CMAC keys are
//! AES keys. The `_GENERAL` variants take the output length (`CK_MAC_GENERAL_PARAMS`), from 1
//! to the full MAC length. Verification compares in constant time.

use super::{digest, ossl_err, sym, Key, SignOp, VerifyOp};
use opencf_abi::ossl_sym::Mac;
use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechParam, Mechanism, OutBuf};
use std::ffi::CStr;

/// What a MAC mechanism computes.
struct MacSpec {
    /// HMAC: the hash mechanism; CMAC: `None`.
    hash: Option<CK_MECHANISM_TYPE>,
    /// The HMAC key type that goes with the hash.
    hmac_key_type: CK_KEY_TYPE,
    /// Takes a `CK_MAC_GENERAL_PARAMS`.
    general: bool,
}

fn spec(m: CK_MECHANISM_TYPE) -> Option<MacSpec> {
    let hmac = |hash, kt, general| {
        Some(MacSpec {
            hash: Some(hash),
            hmac_key_type: kt,
            general,
        })
    };
    match m {
        CKM_SHA_1_HMAC => hmac(CKM_SHA_1, CKK_SHA_1_HMAC, false),
        CKM_SHA_1_HMAC_GENERAL => hmac(CKM_SHA_1, CKK_SHA_1_HMAC, true),
        CKM_SHA224_HMAC => hmac(CKM_SHA224, CKK_SHA224_HMAC, false),
        CKM_SHA224_HMAC_GENERAL => hmac(CKM_SHA224, CKK_SHA224_HMAC, true),
        CKM_SHA256_HMAC => hmac(CKM_SHA256, CKK_SHA256_HMAC, false),
        CKM_SHA256_HMAC_GENERAL => hmac(CKM_SHA256, CKK_SHA256_HMAC, true),
        CKM_SHA384_HMAC => hmac(CKM_SHA384, CKK_SHA384_HMAC, false),
        CKM_SHA384_HMAC_GENERAL => hmac(CKM_SHA384, CKK_SHA384_HMAC, true),
        CKM_SHA512_HMAC => hmac(CKM_SHA512, CKK_SHA512_HMAC, false),
        CKM_SHA512_HMAC_GENERAL => hmac(CKM_SHA512, CKK_SHA512_HMAC, true),
        CKM_SHA3_224_HMAC => hmac(CKM_SHA3_224, CKK_SHA3_224_HMAC, false),
        CKM_SHA3_224_HMAC_GENERAL => hmac(CKM_SHA3_224, CKK_SHA3_224_HMAC, true),
        CKM_SHA3_256_HMAC => hmac(CKM_SHA3_256, CKK_SHA3_256_HMAC, false),
        CKM_SHA3_256_HMAC_GENERAL => hmac(CKM_SHA3_256, CKK_SHA3_256_HMAC, true),
        CKM_SHA3_384_HMAC => hmac(CKM_SHA3_384, CKK_SHA3_384_HMAC, false),
        CKM_SHA3_384_HMAC_GENERAL => hmac(CKM_SHA3_384, CKK_SHA3_384_HMAC, true),
        CKM_SHA3_512_HMAC => hmac(CKM_SHA3_512, CKK_SHA3_512_HMAC, false),
        CKM_SHA3_512_HMAC_GENERAL => hmac(CKM_SHA3_512, CKK_SHA3_512_HMAC, true),
        CKM_AES_CMAC => Some(MacSpec {
            hash: None,
            hmac_key_type: CKK_AES,
            general: false,
        }),
        CKM_AES_CMAC_GENERAL => Some(MacSpec {
            hash: None,
            hmac_key_type: CKK_AES,
            general: true,
        }),
        _ => None,
    }
}

/// True for the MAC mechanisms of this module.
pub fn is_mac(m: CK_MECHANISM_TYPE) -> bool {
    spec(m).is_some()
}

/// A keyed MAC computation and the length of its output.
struct MacOp {
    mac: Mac,
    out_len: usize,
}

fn cmac_cipher(len: usize) -> Option<&'static CStr> {
    match len {
        16 => Some(c"AES-128-CBC"),
        24 => Some(c"AES-192-CBC"),
        32 => Some(c"AES-256-CBC"),
        _ => None,
    }
}

fn start(mech: &Mechanism, key: Key) -> CkResult<MacOp> {
    let s = spec(mech.mechanism).ok_or(CKR_MECHANISM_INVALID)?;
    let kt = key.key_type()?;
    let value = key.value()?;
    let mac = match s.hash {
        Some(hash) => {
            if kt != CKK_GENERIC_SECRET && kt != s.hmac_key_type {
                return Err(CKR_KEY_TYPE_INCONSISTENT);
            }
            // The mechanism table's range: every length such a key may have.
            if sym::secret_len_fits(kt, value.len()) != Some(true) {
                return Err(CKR_KEY_SIZE_RANGE);
            }
            let name = digest::ossl_name(hash).ok_or(CKR_MECHANISM_INVALID)?;
            Mac::hmac(name, value).map_err(ossl_err)?
        }
        None => {
            if kt != CKK_AES {
                return Err(CKR_KEY_TYPE_INCONSISTENT);
            }
            let name = cmac_cipher(value.len()).ok_or(CKR_KEY_SIZE_RANGE)?;
            Mac::cmac(name, value).map_err(ossl_err)?
        }
    };
    let full = mac.size();
    let out_len = match (&mech.param, s.general) {
        (MechParam::Ulong(n), true) => match usize::try_from(*n) {
            Ok(n) if (1..=full).contains(&n) => n,
            _ => return Err(CKR_MECHANISM_PARAM_INVALID),
        },
        (MechParam::None, false) => full,
        (MechParam::Bytes(b), false) if b.is_empty() => full,
        _ => return Err(CKR_MECHANISM_PARAM_INVALID),
    };
    Ok(MacOp { mac, out_len })
}

/// `C_SignInit` with a MAC mechanism.
pub fn sign_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn SignOp>> {
    Ok(Box::new(start(mech, key)?))
}

/// `C_VerifyInit` with a MAC mechanism.
pub fn verify_init(mech: &Mechanism, key: Key) -> CkResult<Box<dyn VerifyOp>> {
    Ok(Box::new(start(mech, key)?))
}

impl MacOp {
    fn check(&mut self, sig: &[u8]) -> CkResult<()> {
        if sig.len() != self.out_len {
            return Err(CKR_SIGNATURE_LEN_RANGE);
        }
        let full = self.mac.finish().map_err(ossl_err)?;
        if openssl::memcmp::eq(&full[..self.out_len], sig) {
            Ok(())
        } else {
            Err(CKR_SIGNATURE_INVALID)
        }
    }
}

impl SignOp for MacOp {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        self.mac.update(data).map_err(ossl_err)
    }

    fn finalize(&mut self, out: &mut OutBuf) -> CkResult<()> {
        if let Some(buf) = out.reserve(self.out_len)? {
            let full = self.mac.finish().map_err(ossl_err)?;
            buf.copy_from_slice(&full[..self.out_len]);
        }
        Ok(())
    }

    fn one_shot(&mut self, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if let Some(buf) = out.reserve(self.out_len)? {
            self.mac.update(data).map_err(ossl_err)?;
            let full = self.mac.finish().map_err(ossl_err)?;
            buf.copy_from_slice(&full[..self.out_len]);
        }
        Ok(())
    }
}

impl VerifyOp for MacOp {
    fn update(&mut self, data: &[u8]) -> CkResult<()> {
        self.mac.update(data).map_err(ossl_err)
    }

    fn finalize(&mut self, sig: &[u8]) -> CkResult<()> {
        self.check(sig)
    }

    fn one_shot(&mut self, data: &[u8], sig: &[u8]) -> CkResult<()> {
        if sig.len() != self.out_len {
            return Err(CKR_SIGNATURE_LEN_RANGE);
        }
        self.mac.update(data).map_err(ossl_err)?;
        self.check(sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::{AttrMap, AttrMapExt};
    use crate::mech::KeyCache;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn key_attrs(kt: CK_KEY_TYPE, value: &[u8]) -> AttrMap {
        let mut m = AttrMap::new();
        m.set_ulong(CKA_CLASS, CKO_SECRET_KEY);
        m.set_ulong(CKA_KEY_TYPE, kt);
        m.insert(CKA_VALUE, value.to_vec());
        m
    }

    fn sign(mech: &Mechanism, attrs: &AttrMap, data: &[u8]) -> CkResult<Vec<u8>> {
        let cache = KeyCache::default();
        let mut op = sign_init(
            mech,
            Key {
                attrs,
                cache: &cache,
            },
        )?;
        let mut out = vec![0u8; 64];
        let mut ob = OutBuf::new(Some(&mut out));
        op.one_shot(data, &mut ob)?;
        let n = ob.len();
        out.truncate(n);
        Ok(out)
    }

    fn verify(mech: &Mechanism, attrs: &AttrMap, data: &[u8], sig: &[u8]) -> CkResult<()> {
        let cache = KeyCache::default();
        let mut op = verify_init(
            mech,
            Key {
                attrs,
                cache: &cache,
            },
        )?;
        op.one_shot(data, sig)
    }

    #[test]
    fn rfc4231_hmac() {
        // Test case 1.
        let k = key_attrs(CKK_GENERIC_SECRET, &[0x0b; 20]);
        let want256 = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";
        let got = sign(&Mechanism::new(CKM_SHA256_HMAC), &k, b"Hi There").unwrap();
        assert_eq!(got, unhex(want256));
        let want512 = "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cde\
                       daa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854";
        let got = sign(&Mechanism::new(CKM_SHA512_HMAC), &k, b"Hi There").unwrap();
        assert_eq!(got, unhex(want512));
        // Test case 2 with an HMAC key type, and the _GENERAL variant (truncated).
        let k2 = key_attrs(CKK_SHA224_HMAC, b"Jefe");
        let want224 = "a30e01098bc6dbbf45690f3a7e9e6d0f8bbea2a39e6148008fd05e44";
        let data = b"what do ya want for nothing?";
        assert_eq!(
            sign(&Mechanism::new(CKM_SHA224_HMAC), &k2, data).unwrap(),
            unhex(want224)
        );
        let general = Mechanism {
            mechanism: CKM_SHA224_HMAC_GENERAL,
            param: MechParam::Ulong(10),
        };
        assert_eq!(sign(&general, &k2, data).unwrap(), unhex(&want224[..20]));
        assert_eq!(verify(&general, &k2, data, &unhex(&want224[..20])), Ok(()));
        // The wrong HMAC key type for the hash.
        assert_eq!(
            sign(&Mechanism::new(CKM_SHA256_HMAC), &k2, data).err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
    }

    #[test]
    fn rfc4493_cmac() {
        let k = key_attrs(CKK_AES, &unhex("2b7e151628aed2a6abf7158809cf4f3c"));
        let m = Mechanism::new(CKM_AES_CMAC);
        assert_eq!(
            sign(&m, &k, b"").unwrap(),
            unhex("bb1d6929e95937287fa37d129b756746")
        );
        let msg = unhex("6bc1bee22e409f96e93d7e117393172a");
        assert_eq!(
            sign(&m, &k, &msg).unwrap(),
            unhex("070a16b46b4d4144f79bdd9dd04a287c")
        );
        let g = Mechanism {
            mechanism: CKM_AES_CMAC_GENERAL,
            param: MechParam::Ulong(8),
        };
        assert_eq!(sign(&g, &k, &msg).unwrap(), unhex("070a16b46b4d4144"));
        assert_eq!(
            sign(
                &Mechanism::new(CKM_AES_CMAC),
                &key_attrs(CKK_AES, &[1; 15]),
                b""
            )
            .err(),
            Some(CKR_KEY_SIZE_RANGE)
        );
    }

    #[test]
    fn multi_part_verify_and_errors() {
        let k = key_attrs(CKK_GENERIC_SECRET, b"some key bytes");
        let data: Vec<u8> = (0..500u32).map(|i| i as u8).collect();
        for m in [
            CKM_SHA_1_HMAC,
            CKM_SHA384_HMAC,
            CKM_SHA3_256_HMAC,
            CKM_SHA3_512_HMAC,
        ] {
            let mech = Mechanism::new(m);
            let one = sign(&mech, &k, &data).unwrap();
            let cache = KeyCache::default();
            let mut op = sign_init(
                &mech,
                Key {
                    attrs: &k,
                    cache: &cache,
                },
            )
            .unwrap();
            for c in data.chunks(33) {
                op.update(c).unwrap();
            }
            let mut q = OutBuf::new(None);
            op.finalize(&mut q).unwrap();
            assert_eq!(q.len(), one.len());
            let mut small = [0u8; 3];
            assert_eq!(
                op.finalize(&mut OutBuf::new(Some(&mut small))),
                Err(CKR_BUFFER_TOO_SMALL)
            );
            let mut out = vec![0u8; q.len()];
            op.finalize(&mut OutBuf::new(Some(&mut out))).unwrap();
            assert_eq!(out, one);

            assert_eq!(verify(&mech, &k, &data, &one), Ok(()));
            let mut bad = one.clone();
            bad[0] ^= 1;
            assert_eq!(verify(&mech, &k, &data, &bad), Err(CKR_SIGNATURE_INVALID));
            assert_eq!(
                verify(&mech, &k, &data, &one[1..]),
                Err(CKR_SIGNATURE_LEN_RANGE)
            );
            let mut vop = verify_init(
                &mech,
                Key {
                    attrs: &k,
                    cache: &cache,
                },
            )
            .unwrap();
            for c in data.chunks(100) {
                vop.update(c).unwrap();
            }
            assert_eq!(vop.finalize(&one), Ok(()));
        }
        let bad_len = Mechanism {
            mechanism: CKM_SHA256_HMAC_GENERAL,
            param: MechParam::Ulong(33),
        };
        assert_eq!(
            sign(&bad_len, &k, b"").err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        let zero = Mechanism {
            mechanism: CKM_SHA256_HMAC_GENERAL,
            param: MechParam::Ulong(0),
        };
        assert_eq!(
            sign(&zero, &k, b"").err(),
            Some(CKR_MECHANISM_PARAM_INVALID)
        );
        let aes = key_attrs(CKK_AES, &[0; 16]);
        assert_eq!(
            sign(&Mechanism::new(CKM_SHA256_HMAC), &aes, b"").err(),
            Some(CKR_KEY_TYPE_INCONSISTENT)
        );
    }
}
