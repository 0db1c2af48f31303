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
use opencf_abi::sys::{CKA_LABEL, CKM_AES_GCM, CK_OBJECT_HANDLE, CK_RV, CK_SESSION_HANDLE};
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

/// The AES-GCM mechanism of the benchmark: a 96-bit IV, no AAD, a 128-bit
/// tag. Workers keep one and rewrite its IV in place ([`gcm_iv`]).
pub fn gcm_mechanism(iv: [u8; 12]) -> Mechanism {
    Mechanism {
        mechanism: CKM_AES_GCM,
        param: MechParam::Gcm {
            iv: iv.to_vec(),
            iv_bits: 96,
            aad: Vec::new(),
            tag_bits: 128,
        },
    }
}

/// The IV bytes of a mechanism made by [`gcm_mechanism`] (empty for any
/// other).
pub fn gcm_iv(mech: &mut Mechanism) -> &mut [u8] {
    match &mut mech.param {
        MechParam::Gcm { iv, .. } => iv,
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

    /// One single-part AES-GCM encryption: `C_EncryptInit` with `mech` (made
    /// by [`gcm_mechanism`]), then one `C_Encrypt` into `out` (which must
    /// hold the data and the tag). Returns the output length.
    pub fn aes_gcm_encrypt(
        &self,
        session: CK_SESSION_HANDLE,
        key: CK_OBJECT_HANDLE,
        mech: &Mechanism,
        data: &[u8],
        out: &mut [u8],
    ) -> Result<usize, CallError> {
        at(
            "C_EncryptInit",
            self.provider.encrypt_init(session, mech, key),
        )?;
        let mut out = OutBuf::new(Some(out));
        at("C_Encrypt", self.provider.encrypt(session, data, &mut out))?;
        Ok(out.len())
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
        at("C_SignInit", self.provider.sign_init(session, mech, key))?;
        let mut out = OutBuf::new(Some(sig));
        at("C_Sign", self.provider.sign(session, data, &mut out))?;
        Ok(out.len())
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

/// The `CKR_*` name of a return value, or its number in hex.
pub fn rv_name(rv: CK_RV) -> String {
    let name = match rv {
        0x000 => "CKR_OK",
        0x005 => "CKR_GENERAL_ERROR",
        0x006 => "CKR_FUNCTION_FAILED",
        0x007 => "CKR_ARGUMENTS_BAD",
        0x054 => "CKR_FUNCTION_NOT_SUPPORTED",
        0x060 => "CKR_KEY_HANDLE_INVALID",
        0x063 => "CKR_KEY_TYPE_INCONSISTENT",
        0x068 => "CKR_KEY_FUNCTION_NOT_PERMITTED",
        0x070 => "CKR_MECHANISM_INVALID",
        0x071 => "CKR_MECHANISM_PARAM_INVALID",
        0x082 => "CKR_OBJECT_HANDLE_INVALID",
        0x090 => "CKR_OPERATION_ACTIVE",
        0x091 => "CKR_OPERATION_NOT_INITIALIZED",
        0x0A0 => "CKR_PIN_INCORRECT",
        0x0A3 => "CKR_PIN_EXPIRED",
        0x0B3 => "CKR_SESSION_HANDLE_INVALID",
        0x0D1 => "CKR_TEMPLATE_INCONSISTENT",
        0x101 => "CKR_USER_NOT_LOGGED_IN",
        0x150 => "CKR_BUFFER_TOO_SMALL",
        0x190 => "CKR_CRYPTOKI_NOT_INITIALIZED",
        _ => return format!("CKR 0x{rv:X}"),
    };
    name.to_string()
}
