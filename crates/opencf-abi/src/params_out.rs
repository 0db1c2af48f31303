//! The reverse of `params.rs` and of the template reader in `convert.rs`: safe values
//! ([`Mechanism`], [`Attribute`] slices, [`MessageParams`]) laid out again as the C structures
//! a loaded PKCS#11 module expects, for [`crate::provider::Provider`].
//!
//! Every C structure built here points into the safe value it was made from (borrowed, never
//! copied: a GCM parameter points at the [`Mechanism`]'s own IV and AAD), or into storage held
//! by the guard object, so the guard must outlive the call it is passed to. Structures that
//! live inside the guard itself (the parameter structure, a short template) are pointed at
//! when the pointer is asked for (`as_mut_ptr`), so the guard may be moved before that.
//!
//! Nothing here allocates for a mechanism; a template allocates only when it has more than
//! [`INLINE_ATTRS`] attributes or nested templates.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::size_of;
use std::ptr::null_mut;

use crate::sys::*;
use crate::types::*;

/// A byte string as a C pointer: NULL when empty, else its address. Modules only read these
/// (mechanism parameters and template values are inputs in PKCS#11); the `*mut` is the C type.
fn ptr_of(b: &[u8]) -> *mut u8 {
    if b.is_empty() {
        null_mut()
    } else {
        b.as_ptr() as *mut u8
    }
}

/// A length as `CK_ULONG`.
fn len_of(b: &[u8]) -> CK_ULONG {
    b.len() as CK_ULONG
}

fn bbool(b: bool) -> CK_BBOOL {
    if b {
        CK_TRUE
    } else {
        CK_FALSE
    }
}

/// The parameter structure of a [`CMechanism`], held inline.
enum Param {
    /// No parameter, or raw bytes already pointed at by `CMechanism::mech`.
    External,
    Ulong(CK_ULONG),
    AesCtr(CK_AES_CTR_PARAMS),
    Gcm(CK_GCM_PARAMS),
    ChaCha20Poly1305(CK_SALSA20_CHACHA20_POLY1305_PARAMS),
    RsaPss(CK_RSA_PKCS_PSS_PARAMS),
    RsaOaep(CK_RSA_PKCS_OAEP_PARAMS),
    Ecdh1(CK_ECDH1_DERIVE_PARAMS),
    Pbkdf2(CK_PKCS5_PBKD2_PARAMS2),
    Hkdf(CK_HKDF_PARAMS),
    Eddsa(CK_EDDSA_PARAMS),
    SignContext(CK_SIGN_ADDITIONAL_CONTEXT),
    HashSignContext(CK_HASH_SIGN_ADDITIONAL_CONTEXT),
}

/// Address and size of an inline parameter structure.
fn raw<T>(s: &mut T) -> (*mut c_void, CK_ULONG) {
    ((s as *mut T).cast(), size_of::<T>() as CK_ULONG)
}

/// A [`Mechanism`] as a C `CK_MECHANISM`, with its parameter structure; inner pointers point
/// into the borrowed [`Mechanism`].
pub(crate) struct CMechanism<'a> {
    mech: CK_MECHANISM,
    param: Param,
    _borrow: PhantomData<&'a Mechanism>,
}

impl<'a> CMechanism<'a> {
    /// Lays out `m` for a C call. Costs a few stores; allocates nothing.
    pub(crate) fn new(m: &'a Mechanism) -> CMechanism<'a> {
        let mut mech = CK_MECHANISM {
            mechanism: m.mechanism,
            pParameter: null_mut(),
            ulParameterLen: 0,
        };
        let param = match &m.param {
            MechParam::None => Param::External,
            MechParam::Bytes(b) => {
                mech.pParameter = ptr_of(b).cast();
                mech.ulParameterLen = len_of(b);
                Param::External
            }
            MechParam::Ulong(v) => Param::Ulong(*v),
            MechParam::AesCtr { counter_bits, cb } => Param::AesCtr(CK_AES_CTR_PARAMS {
                ulCounterBits: *counter_bits,
                cb: *cb,
            }),
            MechParam::Gcm {
                iv,
                iv_bits,
                aad,
                tag_bits,
            } => Param::Gcm(CK_GCM_PARAMS {
                pIv: ptr_of(iv),
                ulIvLen: len_of(iv),
                ulIvBits: *iv_bits,
                pAAD: ptr_of(aad),
                ulAADLen: len_of(aad),
                ulTagBits: *tag_bits,
            }),
            MechParam::ChaCha20Poly1305 { nonce, aad } => {
                Param::ChaCha20Poly1305(CK_SALSA20_CHACHA20_POLY1305_PARAMS {
                    pNonce: ptr_of(nonce),
                    ulNonceLen: len_of(nonce),
                    pAAD: ptr_of(aad),
                    ulAADLen: len_of(aad),
                })
            }
            MechParam::RsaPss {
                hash_alg,
                mgf,
                salt_len,
            } => Param::RsaPss(CK_RSA_PKCS_PSS_PARAMS {
                hashAlg: *hash_alg,
                mgf: *mgf,
                sLen: *salt_len,
            }),
            MechParam::RsaOaep {
                hash_alg,
                mgf,
                source,
                source_data,
            } => Param::RsaOaep(CK_RSA_PKCS_OAEP_PARAMS {
                hashAlg: *hash_alg,
                mgf: *mgf,
                source: *source,
                pSourceData: ptr_of(source_data).cast(),
                ulSourceDataLen: len_of(source_data),
            }),
            MechParam::Ecdh1 {
                kdf,
                shared_data,
                public_data,
            } => Param::Ecdh1(CK_ECDH1_DERIVE_PARAMS {
                kdf: *kdf,
                ulSharedDataLen: len_of(shared_data),
                pSharedData: ptr_of(shared_data),
                ulPublicDataLen: len_of(public_data),
                pPublicData: ptr_of(public_data),
            }),
            MechParam::Pbkdf2 {
                salt_source,
                salt,
                iterations,
                prf,
                password,
            } => Param::Pbkdf2(CK_PKCS5_PBKD2_PARAMS2 {
                saltSource: *salt_source,
                pSaltSourceData: ptr_of(salt).cast(),
                ulSaltSourceDataLen: len_of(salt),
                iterations: *iterations,
                prf: *prf,
                pPrfData: null_mut(),
                ulPrfDataLen: 0,
                pPassword: ptr_of(password),
                ulPasswordLen: len_of(password),
            }),
            MechParam::Hkdf {
                extract,
                expand,
                prf_hash,
                salt_type,
                salt,
                salt_key,
                info,
            } => Param::Hkdf(CK_HKDF_PARAMS {
                bExtract: bbool(*extract),
                bExpand: bbool(*expand),
                prfHashMechanism: *prf_hash,
                ulSaltType: *salt_type,
                pSalt: ptr_of(salt),
                ulSaltLen: len_of(salt),
                hSaltKey: *salt_key,
                pInfo: ptr_of(info),
                ulInfoLen: len_of(info),
            }),
            MechParam::Eddsa { ph, context } => Param::Eddsa(CK_EDDSA_PARAMS {
                phFlag: bbool(*ph),
                ulContextDataLen: len_of(context),
                pContextData: ptr_of(context),
            }),
            MechParam::SignContext { hedge, context } => {
                Param::SignContext(CK_SIGN_ADDITIONAL_CONTEXT {
                    hedgeVariant: *hedge,
                    pContext: ptr_of(context),
                    ulContextLen: len_of(context),
                })
            }
            MechParam::HashSignContext {
                hedge,
                context,
                hash,
            } => Param::HashSignContext(CK_HASH_SIGN_ADDITIONAL_CONTEXT {
                hedgeVariant: *hedge,
                pContext: ptr_of(context),
                ulContextLen: len_of(context),
                hash: *hash,
            }),
        };
        CMechanism {
            mech,
            param,
            _borrow: PhantomData,
        }
    }

    /// The `CK_MECHANISM` to pass to a module: valid while `self` is neither moved nor
    /// dropped (and the borrowed [`Mechanism`] lives).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut CK_MECHANISM {
        let inline = match &mut self.param {
            Param::External => None,
            Param::Ulong(v) => Some(raw(v)),
            Param::AesCtr(s) => Some(raw(s)),
            Param::Gcm(s) => Some(raw(s)),
            Param::ChaCha20Poly1305(s) => Some(raw(s)),
            Param::RsaPss(s) => Some(raw(s)),
            Param::RsaOaep(s) => Some(raw(s)),
            Param::Ecdh1(s) => Some(raw(s)),
            Param::Pbkdf2(s) => Some(raw(s)),
            Param::Hkdf(s) => Some(raw(s)),
            Param::Eddsa(s) => Some(raw(s)),
            Param::SignContext(s) => Some(raw(s)),
            Param::HashSignContext(s) => Some(raw(s)),
        };
        if let Some((p, len)) = inline {
            self.mech.pParameter = p;
            self.mech.ulParameterLen = len;
        }
        &mut self.mech
    }
}

/// Templates up to this many attributes are laid out without allocating.
pub(crate) const INLINE_ATTRS: usize = 8;

const EMPTY_ATTR: CK_ATTRIBUTE = CK_ATTRIBUTE {
    type_: 0,
    pValue: null_mut(),
    ulValueLen: 0,
};

/// A nested template (the value of `CKA_WRAP_TEMPLATE` and the like) decoded from its
/// [`encode_template`] form, with its C array. Both live on the heap, so moving this value
/// leaves the pointers into them valid.
struct Nested {
    _attrs: Vec<Attribute>,
    _array: Vec<CK_ATTRIBUTE>,
}

/// An [`Attribute`] slice as a C `CK_ATTRIBUTE` array whose values point into the borrowed
/// attributes. Nested templates are decoded (see [`decode_template`]) into storage owned
/// here.
pub(crate) struct CTemplate<'a> {
    inline: [CK_ATTRIBUTE; INLINE_ATTRS],
    heap: Vec<CK_ATTRIBUTE>,
    len: usize,
    _nested: Vec<Nested>,
    _borrow: PhantomData<&'a [Attribute]>,
}

/// One attribute whose value is plain bytes.
fn plain(a: &Attribute) -> CK_ATTRIBUTE {
    CK_ATTRIBUTE {
        type_: a.kind,
        pValue: ptr_of(&a.value).cast(),
        ulValueLen: len_of(&a.value),
    }
}

impl<'a> CTemplate<'a> {
    /// Lays out `attrs`. A nested template that does not decode is
    /// `CKR_ATTRIBUTE_VALUE_INVALID`.
    pub(crate) fn new(attrs: &'a [Attribute]) -> CkResult<CTemplate<'a>> {
        let mut t = CTemplate {
            inline: [EMPTY_ATTR; INLINE_ATTRS],
            heap: Vec::new(),
            len: attrs.len(),
            _nested: Vec::new(),
            _borrow: PhantomData,
        };
        let inline = attrs.len() <= INLINE_ATTRS;
        if !inline {
            t.heap.reserve_exact(attrs.len());
        }
        for (i, a) in attrs.iter().enumerate() {
            let c = if is_template_attribute(a.kind) {
                let nested_attrs = decode_template(&a.value)?;
                let array: Vec<CK_ATTRIBUTE> = nested_attrs.iter().map(plain).collect();
                let c = CK_ATTRIBUTE {
                    type_: a.kind,
                    pValue: if array.is_empty() {
                        null_mut()
                    } else {
                        array.as_ptr() as *mut c_void
                    },
                    ulValueLen: (array.len() * size_of::<CK_ATTRIBUTE>()) as CK_ULONG,
                };
                t._nested.push(Nested {
                    _attrs: nested_attrs,
                    _array: array,
                });
                c
            } else {
                plain(a)
            };
            if inline {
                t.inline[i] = c;
            } else {
                t.heap.push(c);
            }
        }
        Ok(t)
    }

    /// Number of attributes, as `CK_ULONG`.
    pub(crate) fn count(&self) -> CK_ULONG {
        self.len as CK_ULONG
    }

    /// The array to pass to a module (NULL when empty): valid while `self` is neither moved
    /// nor dropped (and the borrowed attributes live).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut CK_ATTRIBUTE {
        if self.len == 0 {
            null_mut()
        } else if self.len <= INLINE_ATTRS {
            self.inline.as_mut_ptr()
        } else {
            self.heap.as_mut_ptr()
        }
    }
}

/// [`MessageParams`] as `CK_GCM_MESSAGE_PARAMS` or `CK_SALSA20_CHACHA20_POLY1305_MSG_PARAMS`
/// pointing at the params' own IV/nonce and tag, so that what the module writes back (a
/// generated IV, the tag of an encryption) lands in the [`MessageParams`] directly.
pub(crate) enum CMessageParams<'a> {
    Gcm(CK_GCM_MESSAGE_PARAMS, PhantomData<&'a mut MessageParams>),
    ChaCha20Poly1305(
        CK_SALSA20_CHACHA20_POLY1305_MSG_PARAMS,
        PhantomData<&'a mut MessageParams>,
    ),
}

impl<'a> CMessageParams<'a> {
    /// Lays out `p`. The tag buffer is resized to the tag length first (`ulTagBits / 8` for
    /// GCM, 16 bytes for ChaCha20-Poly1305) so the module has room to write it.
    pub(crate) fn new(p: &'a mut MessageParams) -> CMessageParams<'a> {
        match p {
            MessageParams::Gcm {
                iv,
                iv_fixed_bits,
                iv_generator,
                tag,
                tag_bits,
            } => {
                let tag_len = (*tag_bits / 8) as usize;
                if tag.len() != tag_len {
                    tag.resize(tag_len, 0);
                }
                CMessageParams::Gcm(
                    CK_GCM_MESSAGE_PARAMS {
                        pIv: ptr_mut(iv),
                        ulIvLen: iv.len() as CK_ULONG,
                        ulIvFixedBits: *iv_fixed_bits,
                        ivGenerator: *iv_generator,
                        pTag: ptr_mut(tag),
                        ulTagBits: *tag_bits,
                    },
                    PhantomData,
                )
            }
            MessageParams::ChaCha20Poly1305 { nonce, tag } => {
                if tag.len() != 16 {
                    tag.resize(16, 0);
                }
                CMessageParams::ChaCha20Poly1305(
                    CK_SALSA20_CHACHA20_POLY1305_MSG_PARAMS {
                        pNonce: ptr_mut(nonce),
                        ulNonceLen: nonce.len() as CK_ULONG,
                        pTag: ptr_mut(tag),
                    },
                    PhantomData,
                )
            }
        }
    }

    /// The structure's address and size, valid while `self` is neither moved nor dropped.
    pub(crate) fn as_raw(&mut self) -> (*mut c_void, CK_ULONG) {
        match self {
            CMessageParams::Gcm(s, _) => raw(s),
            CMessageParams::ChaCha20Poly1305(s, _) => raw(s),
        }
    }
}

/// A writable byte string as a C pointer (NULL when empty).
fn ptr_mut(b: &mut [u8]) -> *mut u8 {
    if b.is_empty() {
        null_mut()
    } else {
        b.as_mut_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::template;
    use crate::params::parse;

    fn round_trip(mechanism: CK_MECHANISM_TYPE, param: MechParam) {
        let m = Mechanism { mechanism, param };
        let mut c = CMechanism::new(&m);
        let p = c.as_mut_ptr();
        // SAFETY: `p` and everything it points to live as long as `c` and `m`.
        let back = unsafe {
            let raw = p.read();
            assert_eq!(raw.mechanism, mechanism);
            parse(raw.mechanism, raw.pParameter, raw.ulParameterLen)
        };
        assert_eq!(back, Ok(m.param.clone()), "{mechanism:#x}");
    }

    #[test]
    fn every_variant_round_trips() {
        round_trip(CKM_SHA256, MechParam::None);
        round_trip(CKM_AES_CBC_PAD, MechParam::Bytes(vec![5; 16]));
        round_trip(CKM_SHA256_HMAC_GENERAL, MechParam::Ulong(20));
        round_trip(
            CKM_AES_CTR,
            MechParam::AesCtr {
                counter_bits: 32,
                cb: [9; 16],
            },
        );
        round_trip(
            CKM_AES_GCM,
            MechParam::Gcm {
                iv: vec![1; 12],
                iv_bits: 96,
                aad: b"header".to_vec(),
                tag_bits: 128,
            },
        );
        round_trip(
            CKM_AES_GCM,
            MechParam::Gcm {
                iv: vec![1; 12],
                iv_bits: 96,
                aad: vec![],
                tag_bits: 96,
            },
        );
        round_trip(
            CKM_CHACHA20_POLY1305,
            MechParam::ChaCha20Poly1305 {
                nonce: vec![3; 12],
                aad: b"aad".to_vec(),
            },
        );
        round_trip(
            CKM_SHA256_RSA_PKCS_PSS,
            MechParam::RsaPss {
                hash_alg: CKM_SHA256,
                mgf: CKG_MGF1_SHA256,
                salt_len: 32,
            },
        );
        round_trip(
            CKM_RSA_PKCS_OAEP,
            MechParam::RsaOaep {
                hash_alg: CKM_SHA_1,
                mgf: CKG_MGF1_SHA1,
                source: CKZ_DATA_SPECIFIED,
                source_data: b"label".to_vec(),
            },
        );
        round_trip(
            CKM_ECDH1_DERIVE,
            MechParam::Ecdh1 {
                kdf: CKD_NULL,
                shared_data: vec![],
                public_data: vec![4; 65],
            },
        );
        round_trip(
            CKM_PKCS5_PBKD2,
            MechParam::Pbkdf2 {
                salt_source: CKZ_SALT_SPECIFIED,
                salt: b"NaCl".to_vec(),
                iterations: 1000,
                prf: CKP_PKCS5_PBKD2_HMAC_SHA256,
                password: b"password".to_vec(),
            },
        );
        round_trip(
            CKM_HKDF_DERIVE,
            MechParam::Hkdf {
                extract: true,
                expand: false,
                prf_hash: CKM_SHA384,
                salt_type: CKF_HKDF_SALT_DATA,
                salt: b"salt".to_vec(),
                salt_key: 0,
                info: b"info".to_vec(),
            },
        );
        round_trip(
            CKM_HKDF_DATA,
            MechParam::Hkdf {
                extract: false,
                expand: true,
                prf_hash: CKM_SHA256,
                salt_type: CKF_HKDF_SALT_KEY,
                salt: vec![],
                salt_key: 77,
                info: vec![],
            },
        );
        round_trip(
            CKM_EDDSA,
            MechParam::Eddsa {
                ph: true,
                context: b"ctx".to_vec(),
            },
        );
        round_trip(
            CKM_EDDSA,
            MechParam::Eddsa {
                ph: false,
                context: vec![],
            },
        );
        round_trip(CKM_EDDSA, MechParam::None);
        round_trip(
            CKM_ML_DSA,
            MechParam::SignContext {
                hedge: CKH_DETERMINISTIC_REQUIRED,
                context: b"ctx".to_vec(),
            },
        );
        round_trip(
            CKM_HASH_ML_DSA,
            MechParam::HashSignContext {
                hedge: CKH_HEDGE_PREFERRED,
                context: vec![],
                hash: CKM_SHA256,
            },
        );
    }

    #[test]
    fn gcm_borrows_the_mechanism() {
        let m = Mechanism {
            mechanism: CKM_AES_GCM,
            param: MechParam::Gcm {
                iv: vec![1; 12],
                iv_bits: 96,
                aad: vec![2; 5],
                tag_bits: 128,
            },
        };
        let MechParam::Gcm { iv, aad, .. } = &m.param else {
            unreachable!()
        };
        let mut c = CMechanism::new(&m);
        // SAFETY: as in `round_trip`.
        let s = unsafe { (c.as_mut_ptr().read().pParameter as *const CK_GCM_PARAMS).read() };
        assert_eq!(s.pIv as *const u8, iv.as_ptr());
        assert_eq!(s.pAAD as *const u8, aad.as_ptr());
    }

    fn template_round_trip(attrs: Vec<Attribute>) {
        let mut t = CTemplate::new(&attrs).unwrap();
        let (p, n) = (t.as_mut_ptr(), t.count());
        // SAFETY: the array and its values live as long as `t` and `attrs`.
        let back = unsafe { template(p, n) }.unwrap();
        assert_eq!(back, attrs);
    }

    #[test]
    fn templates_round_trip() {
        template_round_trip(vec![]);
        template_round_trip(vec![
            Attribute::ulong(CKA_CLASS, CKO_SECRET_KEY),
            Attribute::bool(CKA_TOKEN, false),
            Attribute::new(CKA_LABEL, b"".to_vec()),
            Attribute::new(CKA_VALUE, vec![7; 16]),
        ]);
        // Longer than the inline array.
        template_round_trip(
            (0..20)
                .map(|i| Attribute::ulong(CKA_VENDOR_DEFINED + i, i))
                .collect(),
        );
        // Nested templates.
        let wrap = encode_template(&[
            Attribute::bool(CKA_EXTRACTABLE, true),
            Attribute::ulong(CKA_KEY_TYPE, CKK_AES),
        ]);
        template_round_trip(vec![
            Attribute::bool(CKA_WRAP, true),
            Attribute::new(CKA_WRAP_TEMPLATE, wrap),
            Attribute::new(CKA_UNWRAP_TEMPLATE, Vec::new()),
        ]);
        // A nested template that does not decode.
        let bad = [Attribute::new(CKA_DERIVE_TEMPLATE, vec![1, 2, 3])];
        assert_eq!(
            CTemplate::new(&bad).err(),
            Some(CKR_ATTRIBUTE_VALUE_INVALID)
        );
    }

    #[test]
    fn message_params_point_at_the_params() {
        let mut p = MessageParams::Gcm {
            iv: vec![0; 12],
            iv_fixed_bits: 0,
            iv_generator: CKG_GENERATE_RANDOM,
            tag: vec![],
            tag_bits: 128,
        };
        let mut c = CMessageParams::new(&mut p);
        let (ptr, len) = c.as_raw();
        assert_eq!(len as usize, size_of::<CK_GCM_MESSAGE_PARAMS>());
        // SAFETY: the structure and its buffers live as long as `c`; the writes stay within
        // the lengths it states.
        unsafe {
            let s = (ptr as *const CK_GCM_MESSAGE_PARAMS).read();
            std::ptr::write_bytes(s.pIv, 7, s.ulIvLen as usize);
            std::ptr::write_bytes(s.pTag, 8, (s.ulTagBits / 8) as usize);
        }
        let MessageParams::Gcm { iv, tag, .. } = &p else {
            unreachable!()
        };
        assert_eq!(iv, &vec![7; 12]);
        assert_eq!(tag, &vec![8; 16]);
    }
}
