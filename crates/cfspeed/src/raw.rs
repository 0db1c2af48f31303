//! The timed path: the module's functions called one to one through
//! `opencf_abi::provider::Provider`.
//!
//! Setup (sessions, login, objects, key generation) goes through the
//! `cryptoki` crate. The operations that are timed are exactly the calls a
//! careful application makes (`C_EncryptInit` + one `C_Encrypt`,
//! `C_SignInit` + one `C_Sign`, `C_FindObjectsInit` + `C_FindObjects` +
//! `C_FindObjectsFinal`) with caller-sized buffers: nothing of a binding (an
//! extra length-query call, a `Vec` per output) is measured. The `Provider`
//! lays out the mechanism parameter pointing into the worker's own
//! [`Mechanism`] and passes the output buffer straight through, so an
//! operation allocates nothing.

use std::path::Path;

use opencf_abi::provider::Provider;
use opencf_abi::sys::{CKA_LABEL, CK_OBJECT_HANDLE, CK_RV, CK_SESSION_HANDLE};
use opencf_abi::{Attribute, MechParam, Mechanism, OutBuf};

/// A PKCS#11 return value other than `CKR_OK`, with the function that gave it.
#[derive(Debug, Clone, Copy)]
pub struct CallError {
    /// The PKCS#11 function name.
    pub function: &'static str,
    /// Its return value.
    pub rv: CK_RV,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} returned {}", self.function, rv_name(self.rv))
    }
}

/// Names the function of a failed call.
fn at<T>(function: &'static str, r: Result<T, CK_RV>) -> Result<T, CallError> {
    r.map_err(|rv| CallError { function, rv })
}

/// The nonce bytes of an AEAD mechanism (GCM IV, ChaCha20-Poly1305 nonce),
/// which workers rewrite in place before every operation; empty for any
/// other mechanism.
pub fn nonce_mut(mech: &mut Mechanism) -> &mut [u8] {
    match &mut mech.param {
        MechParam::Gcm { iv, .. } => iv,
        MechParam::ChaCha20Poly1305 { nonce, .. } => nonce,
        _ => &mut [],
    }
}

/// The template of the `find` benchmark: one `CKA_LABEL`.
pub fn label_template(label: &[u8]) -> Vec<Attribute> {
    vec![Attribute::new(CKA_LABEL, label.to_vec())]
}

/// The module the timed operations call.
pub struct RawModule {
    provider: Provider,
}

impl RawModule {
    /// Opens `path` (the same mapping the `cryptoki` context already holds:
    /// the dynamic loader returns the loaded library) and reads its function
    /// table. The module must already be initialized through `cryptoki`.
    pub fn open(path: &Path) -> Result<RawModule, String> {
        let provider = Provider::load(path).map_err(|e| e.to_string())?;
        Ok(RawModule { provider })
    }

    /// The loaded module's functions (setup calls that `cryptoki` lacks).
    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    /// An `*Init` that returned `init`, then one single-part call `run` into
    /// `out`. Returns the output length.
    fn single(
        init: (&'static str, opencf_abi::CkResult<()>),
        function: &'static str,
        out: &mut [u8],
        run: impl FnOnce(&mut OutBuf) -> opencf_abi::CkResult<()>,
    ) -> Result<usize, CallError> {
        at(init.0, init.1)?;
        let mut out = OutBuf::new(Some(out));
        at(function, run(&mut out))?;
        Ok(out.len())
    }

    /// One single-part encryption (`C_EncryptInit` + `C_Encrypt`) or, with
    /// `decrypt`, decryption (`C_DecryptInit` + `C_Decrypt`) into `out`
    /// (large enough). Returns the output length.
    pub fn crypt(
        &self,
        decrypt: bool,
        session: CK_SESSION_HANDLE,
        key: CK_OBJECT_HANDLE,
        mech: &Mechanism,
        data: &[u8],
        out: &mut [u8],
    ) -> Result<usize, CallError> {
        let p = &self.provider;
        if decrypt {
            let init = ("C_DecryptInit", p.decrypt_init(session, mech, key));
            Self::single(init, "C_Decrypt", out, |o| p.decrypt(session, data, o))
        } else {
            let init = ("C_EncryptInit", p.encrypt_init(session, mech, key));
            Self::single(init, "C_Encrypt", out, |o| p.encrypt(session, data, o))
        }
    }

    /// One multi-part encryption into `out` (large enough): `C_EncryptInit`,
    /// `C_EncryptUpdate` of `update` bytes at a time (at least one call),
    /// `C_EncryptFinal`. Returns the output length.
    pub fn encrypt_parts(
        &self,
        session: CK_SESSION_HANDLE,
        key: CK_OBJECT_HANDLE,
        mech: &Mechanism,
        data: &[u8],
        update: usize,
        out: &mut [u8],
    ) -> Result<usize, CallError> {
        let p = &self.provider;
        at("C_EncryptInit", p.encrypt_init(session, mech, key))?;
        let mut n = 0;
        for part in data.chunks(update.max(1)) {
            let mut o = OutBuf::new(Some(&mut out[n..]));
            at("C_EncryptUpdate", p.encrypt_update(session, part, &mut o))?;
            n += o.len();
        }
        if data.is_empty() {
            let mut o = OutBuf::new(Some(&mut out[n..]));
            at("C_EncryptUpdate", p.encrypt_update(session, data, &mut o))?;
            n += o.len();
        }
        let mut o = OutBuf::new(Some(&mut out[n..]));
        at("C_EncryptFinal", p.encrypt_final(session, &mut o))?;
        Ok(n + o.len())
    }

    /// One single-part digest: `C_DigestInit` + `C_Digest`.
    pub fn digest(
        &self,
        session: CK_SESSION_HANDLE,
        mech: &Mechanism,
        data: &[u8],
        out: &mut [u8],
    ) -> Result<usize, CallError> {
        let p = &self.provider;
        let init = ("C_DigestInit", p.digest_init(session, mech));
        Self::single(init, "C_Digest", out, |o| p.digest(session, data, o))
    }

    /// One single-part signature: `C_SignInit` with `mech`, then one `C_Sign`
    /// into `sig`. Returns the signature length.
    pub fn sign(
        &self,
        session: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
        data: &[u8],
        sig: &mut [u8],
    ) -> Result<usize, CallError> {
        let p = &self.provider;
        let init = ("C_SignInit", p.sign_init(session, mech, key));
        Self::single(init, "C_Sign", sig, |o| p.sign(session, data, o))
    }

    /// One single-part verification: `C_VerifyInit` + `C_Verify` (an
    /// invalid signature is an error).
    pub fn verify(
        &self,
        session: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
        data: &[u8],
        sig: &[u8],
    ) -> Result<(), CallError> {
        at(
            "C_VerifyInit",
            self.provider.verify_init(session, mech, key),
        )?;
        at("C_Verify", self.provider.verify(session, data, sig))
    }

    /// `C_DeriveKey`, then `C_DestroyObject` of the new key.
    pub fn derive_and_destroy(
        &self,
        session: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> Result<(), CallError> {
        let h = at(
            "C_DeriveKey",
            self.provider.derive_key(session, mech, key, template),
        )?;
        at("C_DestroyObject", self.provider.destroy_object(session, h))
    }

    /// `C_EncapsulateKey` into `ct`, then `C_DestroyObject` of the new key.
    pub fn encapsulate_and_destroy(
        &self,
        session: CK_SESSION_HANDLE,
        mech: &Mechanism,
        public: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ct: &mut [u8],
    ) -> Result<(), CallError> {
        let mut out = OutBuf::new(Some(ct));
        let h = at(
            "C_EncapsulateKey",
            self.provider
                .encapsulate_key(session, mech, public, template, &mut out),
        )?;
        match h {
            Some(h) => at("C_DestroyObject", self.provider.destroy_object(session, h)),
            None => Err(CallError {
                function: "C_EncapsulateKey",
                rv: opencf_abi::sys::CKR_GENERAL_ERROR,
            }),
        }
    }

    /// `C_DecapsulateKey` of `ct`, then `C_DestroyObject` of the new key.
    pub fn decapsulate_and_destroy(
        &self,
        session: CK_SESSION_HANDLE,
        mech: &Mechanism,
        private: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ct: &[u8],
    ) -> Result<(), CallError> {
        let h = at(
            "C_DecapsulateKey",
            self.provider
                .decapsulate_key(session, mech, private, template, ct),
        )?;
        at("C_DestroyObject", self.provider.destroy_object(session, h))
    }

    /// One search with `template` (made by [`label_template`]):
    /// `C_FindObjectsInit`, one `C_FindObjects` for up to `found.len()`
    /// handles, `C_FindObjectsFinal`. Returns how many handles were written.
    pub fn find_by_label(
        &self,
        session: CK_SESSION_HANDLE,
        template: &[Attribute],
        found: &mut [CK_OBJECT_HANDLE],
    ) -> Result<usize, CallError> {
        at(
            "C_FindObjectsInit",
            self.provider.find_objects_init(session, template),
        )?;
        let n = self.provider.find_objects_into(session, found);
        let done = self.provider.find_objects_final(session);
        let n = at("C_FindObjects", n)?;
        at("C_FindObjectsFinal", done)?;
        Ok(n)
    }
}

pub use opencf_abi::rv_names::rv_name;
