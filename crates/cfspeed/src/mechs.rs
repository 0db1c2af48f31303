//! The benchmarks' implementations: what one operation is for a PKCS#11
//! module and for native OpenSSL, and the one-off setup each needs (keys,
//! objects, and the cross-check of one result against OpenSSL, so that a
//! module computing a wrong result cannot produce a figure).

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cryptoki::object::{Attribute as CkAttribute, ObjectClass};
use opencf_abi as abi;
use opencf_abi::sys::*;
use opencf_abi::{AttrValue, Attribute, MechParam};
use openssl::bn::{BigNum, BigNumContext};
use openssl::cipher::Cipher as OsslCipher;
use openssl::cipher_ctx::CipherCtx;
use openssl::derive::Deriver;
use openssl::ec::{EcGroup, EcKey, EcPoint, PointConversionForm};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::{Hasher, MessageDigest};
use openssl::md::Md;
use openssl::pkey::{Id, PKey, Private, Public};
use openssl::pkey_ctx::PkeyCtx;
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{RsaPssSaltlen, Signer, Verifier};

use crate::bench::Worker;
use crate::p11::{describe, Module};
use crate::raw::{label_template, nonce_mut, rv_name, RawModule};
use crate::spec::{Bench, Cipher, Curve, PkOp, RsaMech};

/// The fixed key every cipher implementation encrypts with (AES-128 takes
/// the first 16 bytes, ChaCha20 all 32).
const CIPHER_KEY: [u8; 32] = *b"cfspeed-aes-key!cfspeed-chacha20";
/// The HMAC key.
const HMAC_KEY: [u8; 32] = *b"cfspeed-hmac-key-of-thirty-two-b";
/// The message signed, encrypted for OAEP, or hashed for ECDSA.
const MESSAGE: [u8; 32] = *b"cfspeed signs this 32-byte text.";
/// Application tag and label prefix of the `find` benchmark's objects.
const FIND_APP: &[u8] = b"cfspeed-find";
/// `CKA_EC_PARAMS` of Ed25519 (OID 1.3.101.112).
const ED25519_PARAMS: [u8; 5] = [0x06, 0x03, 0x2b, 0x65, 0x70];
/// Output room for public-key operations (an ML-DSA-65 signature is 3309
/// bytes, an ML-KEM-768 ciphertext 1088).
const PK_OUT: usize = 8192;

/// Something that can run a benchmark: makes one worker per thread.
pub trait Target {
    /// The implementation's name in the report.
    fn name(&self) -> String;
    /// `n` workers for input size `size`, each with its own session or context.
    fn workers(&self, n: usize, size: usize) -> Result<Vec<Box<dyn Worker>>, String>;
}

fn ossl(what: &str, e: openssl::error::ErrorStack) -> String {
    format!("OpenSSL {what}: {e}")
}

/// Names the PKCS#11 function of a failed setup call.
fn call<T>(what: &str, r: abi::CkResult<T>) -> Result<T, String> {
    r.map_err(|rv| format!("{what} returned {}", rv_name(rv)))
}

/// Writes a counter into the last 8 bytes of a nonce (a new nonce per
/// operation, as an AEAD requires).
fn next_nonce(nonce: &mut [u8], counter: &mut u64) {
    *counter = counter.wrapping_add(1);
    if let Some(tail) = nonce.len().checked_sub(8) {
        nonce[tail..].copy_from_slice(&counter.to_be_bytes());
    }
}

fn cipher_key(c: Cipher) -> &'static [u8] {
    &CIPHER_KEY[..c.key_len()]
}

/// The PKCS#11 mechanism of cipher `c` with IV (nonce, counter block) `iv`.
fn cipher_mechanism(c: Cipher, iv: &[u8]) -> abi::Mechanism {
    let param = match c {
        Cipher::AesGcm => MechParam::Gcm {
            iv: iv.to_vec(),
            iv_bits: 96,
            aad: Vec::new(),
            tag_bits: 128,
        },
        Cipher::ChaCha20Poly1305 => MechParam::ChaCha20Poly1305 {
            nonce: iv.to_vec(),
            aad: Vec::new(),
        },
        Cipher::AesCbc | Cipher::AesCbcPad => MechParam::Bytes(iv.to_vec()),
        Cipher::AesCtr => MechParam::AesCtr {
            counter_bits: 128,
            cb: iv.try_into().unwrap_or([0; 16]),
        },
        Cipher::AesEcb => MechParam::None,
    };
    abi::Mechanism {
        mechanism: c.mechanism(),
        param,
    }
}

/// OpenSSL's one-shot encryption (`symm::Crypter`): the reference every
/// implementation's output is compared with. AEAD output ends with the tag.
fn reference_encrypt(c: Cipher, iv: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
    use openssl::symm::{Crypter, Mode};
    let e = |x| ossl("reference cipher", x);
    let iv = (!iv.is_empty()).then_some(iv);
    let mut cr = Crypter::new(c.symm(), Mode::Encrypt, cipher_key(c), iv).map_err(e)?;
    cr.pad(c.padded());
    let mut out = vec![0u8; data.len() + 32];
    let n = cr.update(data, &mut out).map_err(e)?;
    let m = cr.finalize(&mut out[n..]).map_err(e)?;
    out.truncate(n + m);
    if c.aead() {
        let mut tag = [0u8; 16];
        cr.get_tag(&mut tag).map_err(e)?;
        out.extend_from_slice(&tag);
    }
    Ok(out)
}

/// OpenSSL's HMAC-SHA-256 with the benchmark key.
fn reference_hmac(data: &[u8]) -> Result<Vec<u8>, String> {
    let key = PKey::hmac(&HMAC_KEY).map_err(|e| ossl("HMAC key", e))?;
    let mut s = Signer::new(MessageDigest::sha256(), &key).map_err(|e| ossl("HMAC", e))?;
    s.update(data).map_err(|e| ossl("HMAC", e))?;
    s.sign_to_vec().map_err(|e| ossl("HMAC", e))
}

/// The data a public-key benchmark signs (ECDSA: the message's SHA-256).
fn pk_data(bench: Bench) -> Vec<u8> {
    match bench {
        Bench::Ecdsa { .. } => openssl::sha::sha256(&MESSAGE).to_vec(),
        _ => MESSAGE.to_vec(),
    }
}

/// ECDSA `r || s` (PKCS#11) to DER (OpenSSL).
pub(crate) fn ecdsa_raw_to_der(sig: &[u8]) -> Result<Vec<u8>, String> {
    let half = sig.len() / 2;
    let r = BigNum::from_slice(&sig[..half]).map_err(|e| ossl("BN", e))?;
    let s = BigNum::from_slice(&sig[half..]).map_err(|e| ossl("BN", e))?;
    EcdsaSig::from_private_components(r, s)
        .and_then(|s| s.to_der())
        .map_err(|e| ossl("ECDSA signature", e))
}

/// Sets PSS parameters (SHA-256, MGF1-SHA-256, salt = digest length).
macro_rules! pss {
    ($ctx:expr) => {{
        $ctx.set_rsa_padding(Padding::PKCS1_PSS)?;
        $ctx.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)?;
        $ctx.set_rsa_mgf1_md(MessageDigest::sha256())?;
    }};
}

/// The PKCS#11 parameter of RSA mechanism `mech` (SHA-256, MGF1-SHA-256, a 32-byte PSS salt,
/// no OAEP label).
pub(crate) fn rsa_param(mech: RsaMech) -> MechParam {
    match mech {
        RsaMech::Pkcs => MechParam::None,
        RsaMech::Pss => MechParam::RsaPss {
            hash_alg: CKM_SHA256,
            mgf: CKG_MGF1_SHA256,
            salt_len: 32,
        },
        RsaMech::Oaep => MechParam::RsaOaep {
            hash_alg: CKM_SHA256,
            mgf: CKG_MGF1_SHA256,
            source: CKZ_DATA_SPECIFIED,
            source_data: Vec::new(),
        },
    }
}

/// Verifies with OpenSSL a signature made by benchmark `bench`'s mechanism
/// (`der`: an ECDSA signature is DER rather than `r || s`).
pub(crate) fn ossl_verify<T: openssl::pkey::HasPublic>(
    bench: Bench,
    key: &PKey<T>,
    data: &[u8],
    sig: &[u8],
) -> Result<bool, openssl::error::ErrorStack> {
    match bench {
        Bench::Rsa { mech, .. } => {
            let mut v = Verifier::new(MessageDigest::sha256(), key)?;
            if mech == RsaMech::Pss {
                pss!(v);
            }
            v.verify_oneshot(sig, data)
        }
        Bench::Ecdsa { .. } => {
            let mut ctx = PkeyCtx::new(key)?;
            ctx.verify_init()?;
            ctx.verify(data, sig)
        }
        Bench::Eddsa { .. } => Verifier::new_without_digest(key)?.verify_oneshot(sig, data),
        _ => Ok(false),
    }
}

/// Native keys by name, made once per process (RSA-4096 takes a while).
static NATIVE_KEYS: Mutex<Option<HashMap<String, PKey<Private>>>> = Mutex::new(None);

fn native_key(
    name: &str,
    make: impl FnOnce() -> Result<PKey<Private>, String>,
) -> Result<PKey<Private>, String> {
    let mut g = NATIVE_KEYS.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(k) = map.get(name) {
        return Ok(k.clone());
    }
    let k = make()?;
    map.insert(name.to_string(), k.clone());
    Ok(k)
}

fn native_ec(curve: Curve) -> Result<PKey<Private>, String> {
    let group = EcGroup::from_curve_name(curve.nid()).map_err(|e| ossl("EC", e))?;
    let ec = EcKey::generate(&group).map_err(|e| ossl("EC keygen", e))?;
    PKey::from_ec_key(ec).map_err(|e| ossl("PKey", e))
}

// ---------------------------------------------------------------------------
// PKCS#11 side
// ---------------------------------------------------------------------------

/// What a PKCS#11 worker calls per operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Encrypt(Cipher),
    Digest,
    /// Sign (HMAC too), verify, decrypt, derive, encapsulate, decapsulate.
    Pk(PkOp),
    Find,
}

fn call_of(bench: Bench) -> Call {
    match bench {
        Bench::Cipher(c) => Call::Encrypt(c),
        Bench::Digest(_) => Call::Digest,
        Bench::Hmac => Call::Pk(PkOp::Sign),
        Bench::Rsa { op, .. }
        | Bench::Ecdsa { op, .. }
        | Bench::Eddsa { op }
        | Bench::MlDsa { op }
        | Bench::MlKem { op } => Call::Pk(op),
        Bench::Ecdh => Call::Pk(PkOp::Derive),
        Bench::Find => Call::Find,
    }
}

/// The keys (or objects) one benchmark uses in one module, made once.
pub struct P11Target {
    bench: Bench,
    module: Rc<Module>,
    /// The key each operation uses (secret, private, or public for verify
    /// and encapsulate).
    key: CK_OBJECT_HANDLE,
    /// Session objects to destroy at the end.
    objects: Vec<CK_OBJECT_HANDLE>,
    /// The mechanism (ciphers: workers make their own with their nonce).
    mech: abi::Mechanism,
    /// Public-key input: the data signed or verified, the ciphertext
    /// decrypted or decapsulated.
    input: Vec<u8>,
    /// Verify: the signature.
    sig: Vec<u8>,
    /// Derive, encapsulate, decapsulate: the new key's template; find: the
    /// label template.
    template: Vec<Attribute>,
    /// Ciphers: give every thread after the first its own key object.
    pub key_per_thread: bool,
    /// Ciphers: encrypt multi-part, `C_EncryptUpdate` of this many bytes at a time.
    pub update_size: Option<usize>,
}

/// A template for a secret key the module creates (derive, encapsulate):
/// readable, so that setup can compare it.
fn readable_secret(private: bool, len: Option<CK_ULONG>) -> Vec<Attribute> {
    let mut t = vec![
        Attribute::ulong(CKA_CLASS, CKO_SECRET_KEY),
        Attribute::ulong(CKA_KEY_TYPE, CKK_GENERIC_SECRET),
        Attribute::bool(CKA_TOKEN, false),
        Attribute::bool(CKA_PRIVATE, private),
        Attribute::bool(CKA_SENSITIVE, false),
        Attribute::bool(CKA_EXTRACTABLE, true),
    ];
    if let Some(n) = len {
        t.push(Attribute::ulong(CKA_VALUE_LEN, n));
    }
    t
}

impl P11Target {
    /// Creates what `bench` needs in `module` and checks one operation's
    /// result against OpenSSL. `Ok(None)`: the module does not list the
    /// mechanism.
    pub fn setup(
        bench: Bench,
        module: Rc<Module>,
        find_objects: usize,
    ) -> Result<Option<P11Target>, String> {
        if let Some(m) = bench.mechanism() {
            if !module.mechanisms.contains(&m) {
                return Ok(None);
            }
        }
        let mut t = P11Target {
            bench,
            module: module.clone(),
            key: 0,
            objects: Vec::new(),
            mech: abi::Mechanism::new(bench.mechanism().unwrap_or(0)),
            input: Vec::new(),
            sig: Vec::new(),
            template: Vec::new(),
            key_per_thread: false,
            update_size: None,
        };
        let r = t.prepare(find_objects);
        r.map(|()| Some(t))
            .map_err(|e| format!("{}: {e}", module.name))
    }

    fn prepare(&mut self, find_objects: usize) -> Result<(), String> {
        let module = self.module.clone();
        let raw = &module.raw;
        let s = module.anchor.handle();
        let p = raw.provider();
        let private = module.logged_in;
        let sample: Vec<u8> = (0..96u8).collect();
        let mut out = vec![0u8; PK_OUT];
        let err = |e: crate::raw::CallError| e.to_string();
        match self.bench {
            Bench::Cipher(c) => {
                self.key = self.create_cipher_key(c)?;
                let iv = vec![7u8; c.iv_len()];
                let n = raw
                    .crypt(
                        false,
                        s,
                        self.key,
                        &cipher_mechanism(c, &iv),
                        &sample,
                        &mut out,
                    )
                    .map_err(err)?;
                if out[..n] != reference_encrypt(c, &iv, &sample)?[..] {
                    return Err(format!("{} output differs from OpenSSL's", c.name()));
                }
            }
            Bench::Digest(d) => {
                let n = raw.digest(s, &self.mech, &sample, &mut out).map_err(err)?;
                let want = openssl::hash::hash(d.md(), &sample).map_err(|e| ossl("hash", e))?;
                if out[..n] != want[..] {
                    return Err(format!("{} output differs from OpenSSL's", d.name()));
                }
            }
            Bench::Hmac => {
                self.key =
                    self.create_secret(CKK_GENERIC_SECRET, &HMAC_KEY, &[CKA_SIGN, CKA_VERIFY])?;
                let n = raw
                    .sign(s, &self.mech, self.key, &sample, &mut out)
                    .map_err(err)?;
                if out[..n] != reference_hmac(&sample)?[..] {
                    return Err("HMAC-SHA-256 output differs from OpenSSL's".into());
                }
            }
            Bench::Find => {
                let label = ensure_find_objects(&module, find_objects)?;
                self.template = label_template(&label);
                let mut found = [0 as CK_OBJECT_HANDLE; 4];
                let n = raw
                    .find_by_label(s, &self.template, &mut found)
                    .map_err(err)?;
                if n != 1 {
                    return Err(format!(
                        "searching label {:?} found {n} objects, expected 1",
                        String::from_utf8_lossy(&label)
                    ));
                }
            }
            bench => {
                let (public, priv_key) = self.generate_pair()?;
                let data = pk_data(bench);
                if let Bench::Rsa { mech, .. } = bench {
                    self.mech.param = rsa_param(mech);
                }
                match call_of(bench) {
                    Call::Pk(PkOp::Sign) | Call::Pk(PkOp::Verify) => {
                        let n = raw
                            .sign(s, &self.mech, priv_key, &data, &mut out)
                            .map_err(err)?;
                        let sig = out[..n].to_vec();
                        self.check_signature(public, &data, &sig)?;
                        if call_of(bench) == Call::Pk(PkOp::Verify) {
                            raw.verify(s, &self.mech, public, &data, &sig)
                                .map_err(err)?;
                            let mut bad = sig.clone();
                            bad[n / 2] ^= 1;
                            if raw.verify(s, &self.mech, public, &data, &bad).is_ok() {
                                return Err("C_Verify accepted a corrupted signature".into());
                            }
                            self.sig = sig;
                            self.key = public;
                        } else {
                            self.key = priv_key;
                        }
                        self.input = data;
                    }
                    Call::Pk(PkOp::Decrypt) => {
                        let pkey = self.public_pkey(public)?;
                        let ct = oaep_encrypt(&pkey, &MESSAGE)?;
                        let n = raw
                            .crypt(true, s, priv_key, &self.mech, &ct, &mut out)
                            .map_err(err)?;
                        if out[..n] != MESSAGE {
                            return Err("OAEP decryption of OpenSSL's ciphertext is wrong".into());
                        }
                        self.key = priv_key;
                        self.input = ct;
                    }
                    Call::Pk(PkOp::Derive) => {
                        let peer = native_ec(Curve::P256)?;
                        let peer_ec = peer.ec_key().map_err(|e| ossl("EC", e))?;
                        let mut bn = BigNumContext::new().map_err(|e| ossl("BN", e))?;
                        let point = peer_ec
                            .public_key()
                            .to_bytes(peer_ec.group(), PointConversionForm::UNCOMPRESSED, &mut bn)
                            .map_err(|e| ossl("EC point", e))?;
                        self.mech.param = MechParam::Ecdh1 {
                            kdf: CKD_NULL,
                            shared_data: Vec::new(),
                            public_data: point,
                        };
                        self.template = readable_secret(private, Some(32));
                        let h = call(
                            "C_DeriveKey",
                            p.derive_key(s, &self.mech, priv_key, &self.template),
                        )?;
                        let got = self.value_of(h);
                        let _ = p.destroy_object(s, h);
                        let mine = self.public_pkey(public)?;
                        let mut d = Deriver::new(&peer).map_err(|e| ossl("derive", e))?;
                        d.set_peer(&mine).map_err(|e| ossl("derive", e))?;
                        let want = d.derive_to_vec().map_err(|e| ossl("derive", e))?;
                        if got? != want {
                            return Err("ECDH secret differs from OpenSSL's".into());
                        }
                        self.key = priv_key;
                    }
                    Call::Pk(PkOp::Encapsulate) | Call::Pk(PkOp::Decapsulate) => {
                        self.template = readable_secret(private, None);
                        let mut ct = vec![0u8; PK_OUT];
                        let mut ob = abi::OutBuf::new(Some(&mut ct));
                        let k1 = call(
                            "C_EncapsulateKey",
                            p.encapsulate_key(s, &self.mech, public, &self.template, &mut ob),
                        )?
                        .ok_or("C_EncapsulateKey returned no key")?;
                        let n = ob.len();
                        ct.truncate(n);
                        let k2 = call(
                            "C_DecapsulateKey",
                            p.decapsulate_key(s, &self.mech, priv_key, &self.template, &ct),
                        )?;
                        let (v1, v2) = (self.value_of(k1), self.value_of(k2));
                        let _ = p.destroy_object(s, k1);
                        let _ = p.destroy_object(s, k2);
                        if v1? != v2? {
                            return Err(
                                "ML-KEM: decapsulated secret differs from the encapsulated one"
                                    .into(),
                            );
                        }
                        crate::report::note(format!(
                            "{}: {}: checked against itself (encapsulate, decapsulate); \
                             cfspeed has no OpenSSL ML-KEM reference",
                            self.module.name,
                            bench.name()
                        ));
                        if call_of(bench) == Call::Pk(PkOp::Encapsulate) {
                            self.key = public;
                        } else {
                            self.key = priv_key;
                            self.input = ct;
                        }
                    }
                    _ => unreachable!("public-key benchmarks only"),
                }
            }
        }
        Ok(())
    }

    /// A session secret key with `value` and the `usage` flags set.
    fn create_secret(
        &mut self,
        key_type: CK_KEY_TYPE,
        value: &[u8],
        usage: &[CK_ATTRIBUTE_TYPE],
    ) -> Result<CK_OBJECT_HANDLE, String> {
        let h = create_secret(&self.module, key_type, value, usage)?;
        self.objects.push(h);
        Ok(h)
    }

    fn create_cipher_key(&mut self, c: Cipher) -> Result<CK_OBJECT_HANDLE, String> {
        let kt = if c == Cipher::ChaCha20Poly1305 {
            CKK_CHACHA20
        } else {
            CKK_AES
        };
        self.create_secret(kt, cipher_key(c), &[CKA_ENCRYPT, CKA_DECRYPT])
    }

    /// Generates the benchmark's key pair as session objects.
    fn generate_pair(&mut self) -> Result<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE), String> {
        let m = &self.module;
        let f = |k, v| Attribute::bool(k, v);
        let mut public = vec![f(CKA_TOKEN, false)];
        let mut private = vec![
            f(CKA_TOKEN, false),
            f(CKA_PRIVATE, m.logged_in),
            f(CKA_SENSITIVE, true),
            Attribute::new(CKA_LABEL, b"cfspeed".to_vec()),
        ];
        let (mech, what) = match self.bench {
            Bench::Rsa { bits, .. } => {
                public.extend([
                    f(CKA_VERIFY, true),
                    f(CKA_ENCRYPT, true),
                    Attribute::ulong(CKA_MODULUS_BITS, bits as CK_ULONG),
                    Attribute::new(CKA_PUBLIC_EXPONENT, vec![1, 0, 1]),
                ]);
                private.extend([f(CKA_SIGN, true), f(CKA_DECRYPT, true)]);
                (CKM_RSA_PKCS_KEY_PAIR_GEN, format!("RSA-{bits}"))
            }
            Bench::Ecdsa { curve, .. } => {
                public.extend([
                    f(CKA_VERIFY, true),
                    Attribute::new(CKA_EC_PARAMS, curve.params().to_vec()),
                ]);
                private.push(f(CKA_SIGN, true));
                (CKM_EC_KEY_PAIR_GEN, curve.name().to_string())
            }
            Bench::Ecdh => {
                public.push(Attribute::new(CKA_EC_PARAMS, Curve::P256.params().to_vec()));
                private.push(f(CKA_DERIVE, true));
                (CKM_EC_KEY_PAIR_GEN, "P-256".into())
            }
            Bench::Eddsa { .. } => {
                public.extend([
                    f(CKA_VERIFY, true),
                    Attribute::new(CKA_EC_PARAMS, ED25519_PARAMS.to_vec()),
                ]);
                private.push(f(CKA_SIGN, true));
                (CKM_EC_EDWARDS_KEY_PAIR_GEN, "Ed25519".into())
            }
            Bench::MlDsa { .. } => {
                public.extend([
                    f(CKA_VERIFY, true),
                    Attribute::ulong(CKA_PARAMETER_SET, CKP_ML_DSA_65 as CK_ULONG),
                ]);
                private.push(f(CKA_SIGN, true));
                (CKM_ML_DSA_KEY_PAIR_GEN, "ML-DSA-65".into())
            }
            Bench::MlKem { .. } => {
                public.extend([
                    f(CKA_ENCAPSULATE, true),
                    Attribute::ulong(CKA_PARAMETER_SET, CKP_ML_KEM_768 as CK_ULONG),
                ]);
                private.push(f(CKA_DECAPSULATE, true));
                (CKM_ML_KEM_KEY_PAIR_GEN, "ML-KEM-768".into())
            }
            _ => return Err("no key pair for this benchmark".into()),
        };
        let (pu, pr) = call(
            &format!("C_GenerateKeyPair ({what})"),
            m.raw.provider().generate_key_pair(
                m.anchor.handle(),
                &abi::Mechanism::new(mech),
                &public,
                &private,
            ),
        )?;
        self.objects.extend([pu, pr]);
        Ok((pu, pr))
    }

    /// The value of a readable key.
    fn value_of(&self, h: CK_OBJECT_HANDLE) -> Result<Vec<u8>, String> {
        let m = &self.module;
        match call(
            "C_GetAttributeValue(CKA_VALUE)",
            m.raw
                .provider()
                .get_attribute_value(m.anchor.handle(), h, &[CKA_VALUE]),
        )?
        .pop()
        {
            Some(AttrValue::Value(v)) => Ok(v),
            _ => Err("the new key's CKA_VALUE cannot be read".into()),
        }
    }

    fn attribute(&self, h: CK_OBJECT_HANDLE, t: CK_ATTRIBUTE_TYPE) -> Result<Vec<u8>, String> {
        let m = &self.module;
        match call(
            "C_GetAttributeValue",
            m.raw
                .provider()
                .get_attribute_value(m.anchor.handle(), h, &[t]),
        )?
        .pop()
        {
            Some(AttrValue::Value(v)) => Ok(v),
            _ => Err(format!("the public key lacks attribute 0x{t:x}")),
        }
    }

    /// The token's public key as an OpenSSL key.
    fn public_pkey(&self, public: CK_OBJECT_HANDLE) -> Result<PKey<Public>, String> {
        match self.bench {
            Bench::Rsa { .. } => {
                let n = self.attribute(public, CKA_MODULUS)?;
                let e = self.attribute(public, CKA_PUBLIC_EXPONENT)?;
                let rsa = Rsa::from_public_components(
                    BigNum::from_slice(&n).map_err(|e| ossl("BN", e))?,
                    BigNum::from_slice(&e).map_err(|e| ossl("BN", e))?,
                )
                .map_err(|e| ossl("RSA", e))?;
                PKey::from_rsa(rsa).map_err(|e| ossl("PKey", e))
            }
            Bench::Ecdsa { .. } | Bench::Ecdh => {
                let curve = match self.bench {
                    Bench::Ecdsa { curve, .. } => curve,
                    _ => Curve::P256,
                };
                let point = self.attribute(public, CKA_EC_POINT)?;
                let raw = unwrap_octets(&point, 2 * curve.field_bytes() + 1);
                let group = EcGroup::from_curve_name(curve.nid()).map_err(|e| ossl("EC", e))?;
                let mut bn = BigNumContext::new().map_err(|e| ossl("BN", e))?;
                let p =
                    EcPoint::from_bytes(&group, raw, &mut bn).map_err(|e| ossl("EC point", e))?;
                let key = EcKey::from_public_key(&group, &p).map_err(|e| ossl("EC key", e))?;
                PKey::from_ec_key(key).map_err(|e| ossl("PKey", e))
            }
            Bench::Eddsa { .. } => {
                let point = self.attribute(public, CKA_EC_POINT)?;
                PKey::public_key_from_raw_bytes(unwrap_octets(&point, 32), Id::ED25519)
                    .map_err(|e| ossl("Ed25519 key", e))
            }
            _ => Err("no OpenSSL public key for this benchmark".into()),
        }
    }

    /// Checks a signature made by the token: with OpenSSL where cfspeed has
    /// the algorithm, else with the token's own C_Verify (and a corrupted
    /// copy must fail).
    fn check_signature(
        &self,
        public: CK_OBJECT_HANDLE,
        data: &[u8],
        sig: &[u8],
    ) -> Result<(), String> {
        if let Bench::MlDsa { .. } = self.bench {
            let m = &self.module;
            let s = m.anchor.handle();
            m.raw
                .verify(s, &self.mech, public, data, sig)
                .map_err(|e| e.to_string())?;
            let mut bad = sig.to_vec();
            bad[sig.len() / 2] ^= 1;
            if m.raw.verify(s, &self.mech, public, data, &bad).is_ok() {
                return Err("C_Verify accepted a corrupted ML-DSA signature".into());
            }
            crate::report::note(format!(
                "{}: {}: signature checked with the token's own C_Verify; cfspeed has no \
                 OpenSSL ML-DSA reference",
                m.name,
                self.bench.name()
            ));
            return Ok(());
        }
        let pkey = self.public_pkey(public)?;
        let sig = match self.bench {
            Bench::Ecdsa { curve, .. } => {
                if sig.len() != 2 * curve.field_bytes() {
                    return Err(format!("ECDSA signature is {} bytes", sig.len()));
                }
                ecdsa_raw_to_der(sig)?
            }
            _ => sig.to_vec(),
        };
        if ossl_verify(self.bench, &pkey, data, &sig).map_err(|e| ossl("verify", e))? {
            Ok(())
        } else {
            Err(format!(
                "the {} signature does not verify with OpenSSL",
                self.bench.name()
            ))
        }
    }
}

/// The contents of a DER OCTET STRING (`CKA_EC_POINT`), or `v` itself when
/// it already has the raw length.
fn unwrap_octets(v: &[u8], raw_len: usize) -> &[u8] {
    if v.len() == raw_len || v.first() != Some(&0x04) {
        return v;
    }
    match v.get(1) {
        Some(&n) if n < 0x80 && v.len() == 2 + n as usize => &v[2..],
        Some(0x81) if v.len() > 3 && v.len() == 3 + v[2] as usize => &v[3..],
        _ => v,
    }
}

fn oaep_encrypt(key: &PKey<Public>, msg: &[u8]) -> Result<Vec<u8>, String> {
    let e = |x| ossl("OAEP encrypt", x);
    let mut ctx = PkeyCtx::new(key).map_err(e)?;
    ctx.encrypt_init().map_err(e)?;
    ctx.set_rsa_padding(Padding::PKCS1_OAEP).map_err(e)?;
    ctx.set_rsa_oaep_md(Md::sha256()).map_err(e)?;
    ctx.set_rsa_mgf1_md(Md::sha256()).map_err(e)?;
    let mut out = Vec::new();
    ctx.encrypt_to_vec(msg, &mut out).map_err(e)?;
    Ok(out)
}

/// Creates a session secret key in `module`.
fn create_secret(
    module: &Module,
    key_type: CK_KEY_TYPE,
    value: &[u8],
    usage: &[CK_ATTRIBUTE_TYPE],
) -> Result<CK_OBJECT_HANDLE, String> {
    let mut t = vec![
        Attribute::ulong(CKA_CLASS, CKO_SECRET_KEY),
        Attribute::ulong(CKA_KEY_TYPE, key_type),
        Attribute::bool(CKA_TOKEN, false),
        Attribute::bool(CKA_PRIVATE, module.logged_in),
        Attribute::bool(CKA_SENSITIVE, true),
        Attribute::new(CKA_LABEL, b"cfspeed".to_vec()),
        Attribute::new(CKA_VALUE, value.to_vec()),
    ];
    t.extend(usage.iter().map(|&u| Attribute::bool(u, true)));
    call(
        "C_CreateObject (secret key)",
        module
            .raw
            .provider()
            .create_object(module.anchor.handle(), &t),
    )
}

impl Drop for P11Target {
    fn drop(&mut self) {
        let m = &self.module;
        for h in self.objects.drain(..) {
            let _ = m.raw.provider().destroy_object(m.anchor.handle(), h);
        }
    }
}

/// Creates the `find` benchmark's token objects unless they exist already
/// (objects of an earlier run on the same keystore are reused) and returns
/// the label of the object in the middle.
fn ensure_find_objects(module: &Module, count: usize) -> Result<Vec<u8>, String> {
    let s = &module.anchor;
    let ck = |what: &str, e: cryptoki::error::Error| format!("{what}: {}", describe(&e));
    let label = |i: usize| format!("cfspeed-find-{i:06}").into_bytes();
    let existing = s
        .find_objects(&[
            CkAttribute::Class(ObjectClass::DATA),
            CkAttribute::Application(FIND_APP.to_vec()),
        ])
        .map_err(|e| ck("C_FindObjects (existing find objects)", e))?
        .len();
    if existing < count {
        let start = Instant::now();
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        for i in existing..count {
            s.create_object(&[
                CkAttribute::Class(ObjectClass::DATA),
                CkAttribute::Token(true),
                CkAttribute::Private(false),
                CkAttribute::Application(FIND_APP.to_vec()),
                CkAttribute::Label(label(i)),
                CkAttribute::Value(format!("cfspeed object {i}").into_bytes()),
            ])
            .map_err(|e| ck("C_CreateObject (find objects)", e))?;
            if tty && (i % 100 == 0 || i + 1 == count) {
                eprint!(
                    "\r{}: creating token objects {}/{count}",
                    module.name,
                    i + 1
                );
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let made = count - existing;
        if tty {
            eprintln!();
        }
        let line = format!(
            "{}: created {made} CKO_DATA token objects in {secs:.1} s ({:.2} ms per C_CreateObject)",
            module.name,
            secs * 1e3 / made as f64
        );
        eprintln!("{line}");
        crate::report::note(line);
    }
    Ok(label(count / 2))
}

impl Target for P11Target {
    fn name(&self) -> String {
        self.module.name.clone()
    }

    fn workers(&self, n: usize, size: usize) -> Result<Vec<Box<dyn Worker>>, String> {
        let call = call_of(self.bench);
        (0..n)
            .map(|i| {
                let session = self.module.session()?;
                let (key, mech, data) = match call {
                    Call::Encrypt(c) => {
                        let key = if self.key_per_thread && i > 0 {
                            // Destroyed with the anchor session.
                            create_secret(
                                &self.module,
                                if c == Cipher::ChaCha20Poly1305 {
                                    CKK_CHACHA20
                                } else {
                                    CKK_AES
                                },
                                cipher_key(c),
                                &[CKA_ENCRYPT],
                            )?
                        } else {
                            self.key
                        };
                        let iv = vec![i as u8; c.iv_len()];
                        let (mech, data) = (cipher_mechanism(c, &iv), vec![0x5a; size]);
                        if let (Some(n), 0) = (self.update_size, i) {
                            // The multi-part path gives OpenSSL's bytes too.
                            let mut out = vec![0; size + PK_OUT];
                            let got = self
                                .module
                                .raw
                                .encrypt_parts(session.handle(), key, &mech, &data, n, &mut out)
                                .map_err(|e| format!("{}: {e}", self.module.name))?;
                            if out[..got] != reference_encrypt(c, &iv, &data)?[..] {
                                return Err(format!(
                                    "{}: {} multi-part output differs from OpenSSL's",
                                    self.module.name,
                                    c.name()
                                ));
                            }
                        }
                        (key, mech, data)
                    }
                    Call::Digest | Call::Pk(PkOp::Sign) if self.bench.sized() => {
                        (self.key, self.mech.clone(), vec![0x5a; size])
                    }
                    _ => (self.key, self.mech.clone(), self.input.clone()),
                };
                let w = P11Worker {
                    call,
                    raw: self.module.raw.clone(),
                    handle: session.handle(),
                    _session: session,
                    key,
                    mech,
                    counter: 0,
                    data,
                    sig: self.sig.clone(),
                    template: self.template.clone(),
                    out: vec![0; size + PK_OUT],
                    found: [0; 16],
                    update_size: self.update_size,
                };
                Ok(Box::new(w) as Box<dyn Worker>)
            })
            .collect()
    }
}

struct P11Worker {
    call: Call,
    raw: Arc<RawModule>,
    handle: CK_SESSION_HANDLE,
    /// Keeps the session open; closed when the worker is dropped.
    _session: cryptoki::session::Session,
    key: CK_OBJECT_HANDLE,
    /// The mechanism, made once; AEADs rewrite their nonce in place per op.
    mech: abi::Mechanism,
    counter: u64,
    data: Vec<u8>,
    sig: Vec<u8>,
    template: Vec<Attribute>,
    out: Vec<u8>,
    found: [CK_OBJECT_HANDLE; 16],
    update_size: Option<usize>,
}

impl Worker for P11Worker {
    fn op(&mut self) -> Result<(), String> {
        let (h, k, raw) = (self.handle, self.key, &self.raw);
        let r = match self.call {
            Call::Encrypt(_) => {
                next_nonce(nonce_mut(&mut self.mech), &mut self.counter);
                match self.update_size {
                    Some(n) => raw.encrypt_parts(h, k, &self.mech, &self.data, n, &mut self.out),
                    None => raw.crypt(false, h, k, &self.mech, &self.data, &mut self.out),
                }
                .map(drop)
            }
            Call::Digest => raw
                .digest(h, &self.mech, &self.data, &mut self.out)
                .map(drop),
            Call::Pk(PkOp::Sign) => raw
                .sign(h, &self.mech, k, &self.data, &mut self.out)
                .map(drop),
            Call::Pk(PkOp::Verify) => raw.verify(h, &self.mech, k, &self.data, &self.sig),
            Call::Pk(PkOp::Decrypt) => raw
                .crypt(true, h, k, &self.mech, &self.data, &mut self.out)
                .map(drop),
            Call::Pk(PkOp::Derive) => raw.derive_and_destroy(h, &self.mech, k, &self.template),
            Call::Pk(PkOp::Encapsulate) => {
                raw.encapsulate_and_destroy(h, &self.mech, k, &self.template, &mut self.out)
            }
            Call::Pk(PkOp::Decapsulate) => {
                raw.decapsulate_and_destroy(h, &self.mech, k, &self.template, &self.data)
            }
            Call::Find => raw
                .find_by_label(h, &self.template, &mut self.found)
                .map(drop),
        };
        r.map_err(|e| e.to_string())
    }
}

// ---------------------------------------------------------------------------
// Native OpenSSL side
// ---------------------------------------------------------------------------

/// Which native variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeKind {
    /// The same work a PKCS#11 single-part call must do: a new EVP context
    /// per operation (keyed per operation for ciphers), keys parsed once.
    PerOp,
    /// AES-GCM only: one keyed EVP context kept; each op only sets the IV.
    Reuse,
}

/// Native OpenSSL EVP, in this process, as a baseline.
pub struct NativeTarget {
    bench: Bench,
    kind: NativeKind,
    cipher: Option<Arc<OsslCipher>>,
    pkey: Option<PKey<Private>>,
    /// ECDH: the peer's key (its public half is used per operation).
    peer: Option<PKey<Private>>,
    /// Verify: the signature; decrypt: the ciphertext.
    input: Vec<u8>,
}

impl NativeTarget {
    /// Prepares the keys for `bench` and checks one operation; `None` when
    /// there is no native counterpart (`find`, ML-DSA, ML-KEM, the reuse
    /// variant of anything but AES-GCM).
    pub fn setup(bench: Bench, kind: NativeKind) -> Result<Option<NativeTarget>, String> {
        let mut t = NativeTarget {
            bench,
            kind,
            cipher: None,
            pkey: None,
            peer: None,
            input: Vec::new(),
        };
        if kind == NativeKind::Reuse && bench != Bench::Cipher(Cipher::AesGcm) {
            return Ok(None);
        }
        match bench {
            Bench::Cipher(c) => {
                t.cipher = Some(Arc::new(
                    OsslCipher::fetch(None, c.ossl_name(), None).map_err(|e| ossl("fetch", e))?,
                ));
            }
            Bench::Digest(_) => {}
            Bench::Hmac => t.pkey = Some(PKey::hmac(&HMAC_KEY).map_err(|e| ossl("HMAC key", e))?),
            Bench::Rsa { bits, .. } => {
                t.pkey = Some(native_key(&format!("rsa-{bits}"), || {
                    let rsa = Rsa::generate(bits).map_err(|e| ossl("RSA keygen", e))?;
                    PKey::from_rsa(rsa).map_err(|e| ossl("PKey", e))
                })?);
            }
            Bench::Ecdsa { curve, .. } => {
                t.pkey = Some(native_key(curve.name(), || native_ec(curve))?)
            }
            Bench::Eddsa { .. } => {
                t.pkey = Some(native_key("ed25519", || {
                    PKey::generate_ed25519().map_err(|e| ossl("Ed25519 keygen", e))
                })?)
            }
            Bench::Ecdh => {
                t.pkey = Some(native_ec(Curve::P256)?);
                t.peer = Some(native_ec(Curve::P256)?);
            }
            Bench::MlDsa { .. } | Bench::MlKem { .. } | Bench::Find => return Ok(None),
        }
        let data = pk_data(bench);
        match call_of(bench) {
            Call::Pk(PkOp::Verify) => {
                let mut w = t.make_worker(0, 0)?;
                w.call = Call::Pk(PkOp::Sign);
                w.step()?;
                t.input = w.out[..w.out_len].to_vec();
            }
            Call::Pk(PkOp::Decrypt) => {
                let pkey = t.pkey.as_ref().ok_or("no key")?;
                let public = PKey::public_key_from_der(
                    &pkey.public_key_to_der().map_err(|e| ossl("DER", e))?,
                )
                .map_err(|e| ossl("DER", e))?;
                t.input = oaep_encrypt(&public, &MESSAGE)?;
            }
            _ => {}
        }
        // Check one operation.
        let sample: Vec<u8> = (0..96u8).collect();
        let mut w = t.make_worker(sample.len(), 7)?;
        if bench.sized() {
            w.data = sample.clone();
        }
        w.step()?;
        let got = &w.out[..w.out_len];
        let ok = match (bench, call_of(bench)) {
            (Bench::Cipher(c), _) => {
                // The worker's first IV: its seed bytes with counter 1.
                let mut iv = vec![7u8; c.iv_len()];
                if c.aead() {
                    next_nonce(&mut iv, &mut 0);
                }
                let mut v = got.to_vec();
                if c.aead() {
                    v.extend_from_slice(&w.tag);
                }
                v == reference_encrypt(c, &iv, &sample)?
            }
            (Bench::Digest(d), _) => {
                got == &openssl::hash::hash(d.md(), &sample).map_err(|e| ossl("hash", e))?[..]
            }
            (Bench::Hmac, _) => got == reference_hmac(&sample)?,
            (_, Call::Pk(PkOp::Sign)) => {
                let pkey = t.pkey.as_ref().ok_or("no key")?;
                ossl_verify(bench, pkey, &data, got).map_err(|e| ossl("verify", e))?
            }
            // The worker fails on a signature that does not verify.
            (_, Call::Pk(PkOp::Verify)) => true,
            (_, Call::Pk(PkOp::Decrypt)) => got == MESSAGE,
            (_, Call::Pk(PkOp::Derive)) => {
                let (mine, peer) = (
                    t.pkey.as_ref().ok_or("no key")?,
                    t.peer.as_ref().ok_or("no peer")?,
                );
                let mut d = Deriver::new(peer).map_err(|e| ossl("derive", e))?;
                d.set_peer(mine).map_err(|e| ossl("derive", e))?;
                got == d.derive_to_vec().map_err(|e| ossl("derive", e))?
            }
            _ => false,
        };
        if !ok {
            return Err(format!(
                "native {}: the worker's result does not check out",
                bench.name()
            ));
        }
        Ok(Some(t))
    }

    fn make_worker(&self, size: usize, i: usize) -> Result<NativeWorker, String> {
        let iv_len = match self.bench {
            Bench::Cipher(c) => c.iv_len(),
            _ => 0,
        };
        let mut w = NativeWorker {
            bench: self.bench,
            call: call_of(self.bench),
            kind: self.kind,
            cipher: self.cipher.clone(),
            pkey: self.pkey.clone(),
            peer: self.peer.clone(),
            ctx: None,
            iv: vec![i as u8; iv_len],
            counter: 0,
            data: if self.bench.sized() {
                vec![0x5a; size]
            } else if call_of(self.bench) == Call::Pk(PkOp::Decrypt) {
                self.input.clone()
            } else {
                pk_data(self.bench)
            },
            sig: self.input.clone(),
            out: vec![0; size + PK_OUT],
            out_len: 0,
            tag: [0; 16],
        };
        if self.kind == NativeKind::Reuse {
            let mut ctx = CipherCtx::new().map_err(|e| ossl("ctx", e))?;
            ctx.encrypt_init(
                w.cipher.as_deref().map(|c| &**c),
                Some(&CIPHER_KEY[..16]),
                Some(&w.iv),
            )
            .map_err(|e| ossl("EncryptInit", e))?;
            w.ctx = Some(ctx);
        }
        Ok(w)
    }
}

impl Target for NativeTarget {
    fn name(&self) -> String {
        match self.kind {
            NativeKind::PerOp => "native".into(),
            NativeKind::Reuse => "native-reuse".into(),
        }
    }

    fn workers(&self, n: usize, size: usize) -> Result<Vec<Box<dyn Worker>>, String> {
        (0..n)
            .map(|i| Ok(Box::new(self.make_worker(size, i)?) as Box<dyn Worker>))
            .collect()
    }
}

struct NativeWorker {
    bench: Bench,
    call: Call,
    kind: NativeKind,
    cipher: Option<Arc<OsslCipher>>,
    pkey: Option<PKey<Private>>,
    peer: Option<PKey<Private>>,
    ctx: Option<CipherCtx>,
    iv: Vec<u8>,
    counter: u64,
    data: Vec<u8>,
    /// Verify: the signature.
    sig: Vec<u8>,
    out: Vec<u8>,
    out_len: usize,
    tag: [u8; 16],
}

impl NativeWorker {
    fn step(&mut self) -> Result<(), String> {
        self.step_ossl().map_err(|e| ossl("operation", e))?
    }

    /// One operation; the outer error is OpenSSL's, the inner one a wrong
    /// result (a signature that does not verify).
    fn step_ossl(&mut self) -> Result<Result<(), String>, openssl::error::ErrorStack> {
        let key = || self.pkey.as_ref().expect("a key");
        match (self.bench, self.call) {
            (Bench::Cipher(c), _) => {
                if c.aead() {
                    next_nonce(&mut self.iv, &mut self.counter);
                }
                let iv = (!self.iv.is_empty()).then_some(&self.iv[..]);
                let mut fresh;
                let ctx = match (self.kind, self.ctx.as_mut()) {
                    (NativeKind::Reuse, Some(ctx)) => {
                        ctx.encrypt_init(None, None, iv)?;
                        ctx
                    }
                    _ => {
                        fresh = CipherCtx::new()?;
                        let cipher = self.cipher.as_deref().map(|c| &**c);
                        fresh.encrypt_init(cipher, Some(cipher_key(c)), iv)?;
                        &mut fresh
                    }
                };
                ctx.set_padding(c.padded());
                let n = ctx.cipher_update(&self.data, Some(&mut self.out))?;
                let m = ctx.cipher_final(&mut self.out[n..])?;
                self.out_len = n + m;
                if c.aead() {
                    ctx.tag(&mut self.tag)?;
                }
            }
            (Bench::Digest(d), _) => {
                let mut h = Hasher::new(d.md())?;
                h.update(&self.data)?;
                let dg = h.finish()?;
                self.out[..dg.len()].copy_from_slice(&dg);
                self.out_len = dg.len();
            }
            (Bench::Hmac, _) => {
                let mut s = Signer::new(MessageDigest::sha256(), key())?;
                s.update(&self.data)?;
                self.out_len = s.sign(&mut self.out)?;
            }
            (Bench::Rsa { mech, .. }, Call::Pk(PkOp::Sign)) => {
                let mut s = Signer::new(MessageDigest::sha256(), key())?;
                if mech == RsaMech::Pss {
                    pss!(s);
                }
                self.out_len = s.sign_oneshot(&mut self.out, &self.data)?;
            }
            (Bench::Rsa { .. }, Call::Pk(PkOp::Verify))
            | (Bench::Ecdsa { .. }, Call::Pk(PkOp::Verify))
            | (Bench::Eddsa { .. }, Call::Pk(PkOp::Verify)) => {
                if !ossl_verify(self.bench, key(), &self.data, &self.sig)? {
                    return Ok(Err("native: the signature does not verify".into()));
                }
            }
            (Bench::Rsa { .. }, Call::Pk(PkOp::Decrypt)) => {
                let mut ctx = PkeyCtx::new(key())?;
                ctx.decrypt_init()?;
                ctx.set_rsa_padding(Padding::PKCS1_OAEP)?;
                ctx.set_rsa_oaep_md(Md::sha256())?;
                ctx.set_rsa_mgf1_md(Md::sha256())?;
                self.out_len = ctx.decrypt(&self.data, Some(&mut self.out))?;
            }
            (Bench::Ecdsa { .. }, _) => {
                let mut ctx = PkeyCtx::new(key())?;
                ctx.sign_init()?;
                self.out_len = ctx.sign(&self.data, Some(&mut self.out))?;
            }
            (Bench::Eddsa { .. }, _) => {
                let mut s = Signer::new_without_digest(key())?;
                self.out_len = s.sign_oneshot(&mut self.out, &self.data)?;
            }
            (Bench::Ecdh, _) => {
                let mut d = Deriver::new(key())?;
                d.set_peer(self.peer.as_ref().expect("a peer"))?;
                self.out_len = d.derive(&mut self.out)?;
            }
            _ => return Ok(Err("no native implementation".into())),
        }
        Ok(Ok(()))
    }
}

impl Worker for NativeWorker {
    fn op(&mut self) -> Result<(), String> {
        self.step()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_native_counterpart_checks_out() {
        for n in crate::spec::EXAMPLES {
            for b in Bench::parse(n, &[1024]).unwrap() {
                // Small RSA keys keep the test quick.
                let b = match b {
                    Bench::Rsa { mech, op, .. } => Bench::Rsa {
                        mech,
                        bits: 1024,
                        op,
                    },
                    b => b,
                };
                let Some(t) = NativeTarget::setup(b, NativeKind::PerOp).unwrap() else {
                    assert!(matches!(
                        b,
                        Bench::MlDsa { .. } | Bench::MlKem { .. } | Bench::Find
                    ));
                    continue;
                };
                let mut ws = t.workers(1, 64).unwrap();
                ws[0].op().unwrap();
            }
        }
        assert!(NativeTarget::setup(
            Bench::parse("CKM_ML_DSA", &[]).unwrap()[0],
            NativeKind::PerOp
        )
        .unwrap()
        .is_none());
    }

    #[test]
    fn octet_strings() {
        let p: Vec<u8> = std::iter::once(4).chain(1..=64).collect();
        let mut der = vec![0x04, 65];
        der.extend(&p);
        assert_eq!(unwrap_octets(&der, 65), &p[..]);
        assert_eq!(unwrap_octets(&p, 65), &p[..]);
        let long: Vec<u8> = std::iter::once(4).chain(vec![9; 132]).collect();
        let mut der = vec![0x04, 0x81, 133];
        der.extend(&long);
        assert_eq!(unwrap_octets(&der, 133), &long[..]);
    }
}
