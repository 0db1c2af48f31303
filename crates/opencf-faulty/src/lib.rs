//! A test-only PKCS#11 provider, `libopencf_faulty.so`: the software token, run in-process,
//! that fails on command. Built for the framework's failover tests; never installed.
//!
//! The fault mode is read at every call, from `$OPENCF_FAULTY_MODE`, else from the first line
//! of the file named by `$OPENCF_FAULTY_SWITCH` (so a test can switch it while the module is
//! loaded):
//!
//! * `device-error`: every crypto init (`C_EncryptInit`, `C_DecryptInit`, `C_SignInit`,
//!   `C_VerifyInit`, `C_DigestInit`, the recover and `C_VerifySignatureInit` variants) and
//!   every single-part call (`C_Encrypt`, `C_Decrypt`, `C_Sign`, `C_Verify`, `C_Digest`, …)
//!   answers `CKR_DEVICE_ERROR`;
//! * `busy`: the same calls answer `CKR_DEVICE_MEMORY`;
//! * `op-error`: only the single-part calls answer `CKR_DEVICE_ERROR` (the inits succeed), so
//!   a caller sees the failure after it bound the operation here;
//! * `slow:MS`: every single-part call sleeps MS milliseconds, then goes through (a token
//!   behind a network, or a busy hardware module, as the caller sees it); a call that only
//!   asks for the output's length does not wait;
//! * `attr-error:LABEL`: `C_GetAttributeValue` on an object labelled LABEL answers
//!   `CKR_DEVICE_ERROR` (an object damaged in its store, as a caller sees it); every other call
//!   goes through;
//! * anything else, or nothing: every call goes through to the software token.
//!
//! The (initialized) token reports the label "OpenCF Faulty" so that it is never taken for the softtoken
//! (the metaslot chooses its keystore by label).
//!
//! The software token is not linked in (its rlib exports the same `C_*` symbols as this
//! module): the module loads a private copy of `libopencf_softtoken.so` (`$OPENCF_FAULTY_INNER`,
//! else found beside the executable or in `$OPENCF_LIB_DIR`) and forwards every call to it.
//! That copy reads the software token's keystore directory (`$OPENCF_SOFTTOKEN_DIR`, …), so a
//! test that loads both modules has them share one keystore directory, which SQLite allows.

#![deny(unsafe_code)]

use opencf_abi::provider::Provider;
use opencf_abi::sys::*;
use opencf_abi::{
    pad_field, AttrValue, Attribute, Backend, CkResult, InitArgs, Mechanism, MessageParams, OutBuf,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The token label this module reports.
pub const LABEL: &str = "OpenCF Faulty";

/// What the module does with crypto calls now.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Pass,
    DeviceError,
    Busy,
    OpError,
    /// Milliseconds each single-part call waits before it goes through.
    Slow(u64),
}

/// The mode's word: `$OPENCF_FAULTY_MODE`, else the switch file's first line.
fn mode_word() -> String {
    let word = match std::env::var("OPENCF_FAULTY_MODE") {
        Ok(m) if !m.trim().is_empty() => m,
        _ => match std::env::var_os("OPENCF_FAULTY_SWITCH") {
            Some(f) => std::fs::read_to_string(f).unwrap_or_default(),
            None => String::new(),
        },
    };
    word.lines().next().unwrap_or("").trim().to_string()
}

/// In `attr-error:LABEL` mode, the label whose objects cannot be read.
fn damaged_label() -> Option<String> {
    mode_word().strip_prefix("attr-error:").map(str::to_string)
}

fn mode() -> Mode {
    let word = mode_word();
    let word = word.as_str();
    match word {
        "device-error" => Mode::DeviceError,
        "busy" => Mode::Busy,
        "op-error" => Mode::OpError,
        _ => match word.strip_prefix("slow:").map(str::parse) {
            Some(Ok(ms)) => Mode::Slow(ms),
            _ => Mode::Pass,
        },
    }
}

/// For a crypto init: the error of the current mode, if any.
fn fault_init() -> CkResult<()> {
    match mode() {
        Mode::DeviceError => Err(CKR_DEVICE_ERROR),
        Mode::Busy => Err(CKR_DEVICE_MEMORY),
        Mode::OpError | Mode::Slow(_) | Mode::Pass => Ok(()),
    }
}

/// Output room for the call that ends an operation a fault interrupted.
const SCRATCH: usize = 1 << 16;

/// For a single-part crypto call: the error of the current mode, if any. `query` is true for
/// a call that only asks for the output's length, which a slow token answers at once.
fn fault(query: bool) -> CkResult<()> {
    match mode() {
        Mode::DeviceError | Mode::OpError => Err(CKR_DEVICE_ERROR),
        Mode::Busy => Err(CKR_DEVICE_MEMORY),
        Mode::Slow(_) if query => Ok(()),
        Mode::Slow(ms) => {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            Ok(())
        }
        Mode::Pass => Ok(()),
    }
}

/// The module this one wraps: `$OPENCF_FAULTY_INNER`, else `libopencf_softtoken.so` found
/// through `$OPENCF_LIB_DIR` or the executable's directory.
fn inner_path() -> CkResult<PathBuf> {
    if let Some(p) = std::env::var_os("OPENCF_FAULTY_INNER").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("OPENCF_LIB_DIR").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
    {
        dirs.push(d);
    }
    dirs.into_iter()
        .map(|d| d.join("libopencf_softtoken.so"))
        .find(|p| p.exists())
        .ok_or_else(|| {
            eprintln!("opencf-faulty: set OPENCF_FAULTY_INNER to the module to wrap");
            CKR_GENERAL_ERROR
        })
}

/// Loads a private copy of the wrapped module. The copy has its own inode, so the dynamic
/// loader gives it its own globals even when the process (the framework beside this module)
/// has loaded the original too; the file is removed once mapped.
fn load_inner() -> CkResult<Provider> {
    static N: AtomicU64 = AtomicU64::new(0);
    let src = inner_path()?;
    let copy = std::env::temp_dir().join(format!(
        "opencf-faulty-inner-{}-{}.so",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::copy(&src, &copy).map_err(|e| {
        eprintln!("opencf-faulty: copying {}: {e}", src.display());
        CKR_GENERAL_ERROR
    })?;
    let loaded = Provider::load(&copy);
    let _ = std::fs::remove_file(&copy);
    loaded.map_err(|e| {
        eprintln!("opencf-faulty: {e}");
        CKR_GENERAL_ERROR
    })
}

/// The faulty provider: the wrapped module behind a fault switch.
pub struct Faulty {
    inner: Provider,
}

impl Backend for Faulty {
    fn initialize(_args: &InitArgs) -> CkResult<Self> {
        let inner = load_inner()?;
        inner.initialize()?;
        Ok(Faulty { inner })
    }
    fn finalize(&self) {
        let _ = self.inner.finalize();
    }
    fn get_info(&self) -> CkResult<CK_INFO> {
        self.inner.get_info()
    }
    fn get_token_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
        let mut info = self.inner.get_token_info(slot)?;
        // Only the default token is renamed; a slot without an initialized token stays blank.
        if info.label.iter().any(|b| *b != b' ') {
            info.label = pad_field(LABEL);
        }
        Ok(info)
    }
    fn get_slot_list(&self, token_present: bool) -> CkResult<Vec<CK_SLOT_ID>> {
        self.inner.get_slot_list(token_present)
    }
    fn get_slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO> {
        self.inner.get_slot_info(slot)
    }
    fn get_mechanism_list(&self, slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>> {
        self.inner.get_mechanism_list(slot)
    }
    fn get_mechanism_info(
        &self,
        slot: CK_SLOT_ID,
        mech: CK_MECHANISM_TYPE,
    ) -> CkResult<CK_MECHANISM_INFO> {
        self.inner.get_mechanism_info(slot, mech)
    }
    fn init_token(&self, slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> CkResult<()> {
        self.inner.init_token(slot, so_pin, label)
    }
    fn init_pin(&self, s: CK_SESSION_HANDLE, pin: &[u8]) -> CkResult<()> {
        self.inner.init_pin(s, pin)
    }
    fn set_pin(&self, s: CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> CkResult<()> {
        self.inner.set_pin(s, old, new)
    }
    fn wait_for_slot_event(&self, dont_block: bool) -> CkResult<CK_SLOT_ID> {
        self.inner.wait_for_slot_event(dont_block)
    }
    fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        self.inner.open_session(slot, flags)
    }
    fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.inner.close_session(s)
    }
    fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        self.inner.close_all_sessions(slot)
    }
    fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        self.inner.get_session_info(s)
    }
    fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        self.inner.session_cancel(s, flags)
    }
    fn get_operation_state(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.inner.get_operation_state(s, out)
    }
    fn set_operation_state(
        &self,
        s: CK_SESSION_HANDLE,
        state: &[u8],
        enc_key: CK_OBJECT_HANDLE,
        auth_key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.inner.set_operation_state(s, state, enc_key, auth_key)
    }
    fn login(&self, s: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> CkResult<()> {
        self.inner.login(s, user, pin)
    }
    fn login_user(
        &self,
        s: CK_SESSION_HANDLE,
        user: CK_USER_TYPE,
        pin: &[u8],
        username: &[u8],
    ) -> CkResult<()> {
        self.inner.login_user(s, user, pin, username)
    }
    fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.inner.logout(s)
    }
    fn get_session_validation_flags(
        &self,
        s: CK_SESSION_HANDLE,
        kind: CK_SESSION_VALIDATION_FLAGS_TYPE,
    ) -> CkResult<CK_FLAGS> {
        self.inner.get_session_validation_flags(s, kind)
    }
    fn create_object(
        &self,
        s: CK_SESSION_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.inner.create_object(s, template)
    }
    fn copy_object(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.inner.copy_object(s, obj, template)
    }
    fn destroy_object(&self, s: CK_SESSION_HANDLE, obj: CK_OBJECT_HANDLE) -> CkResult<()> {
        self.inner.destroy_object(s, obj)
    }
    fn get_object_size(&self, s: CK_SESSION_HANDLE, obj: CK_OBJECT_HANDLE) -> CkResult<CK_ULONG> {
        self.inner.get_object_size(s, obj)
    }
    fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        if let Some(label) = damaged_label() {
            let l = self.inner.get_attribute_value(s, obj, &[CKA_LABEL])?;
            if matches!(l.first(), Some(AttrValue::Value(v)) if *v == label.as_bytes()) {
                return Err(CKR_DEVICE_ERROR);
            }
        }
        self.inner.get_attribute_value(s, obj, types)
    }
    fn set_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<()> {
        self.inner.set_attribute_value(s, obj, template)
    }
    fn find_objects_init(&self, s: CK_SESSION_HANDLE, template: &[Attribute]) -> CkResult<()> {
        self.inner.find_objects_init(s, template)
    }
    fn find_objects(&self, s: CK_SESSION_HANDLE, max: usize) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        self.inner.find_objects(s, max)
    }
    fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.inner.find_objects_final(s)
    }
    fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        fault_init()?;
        self.inner.encrypt_init(s, mech, key)
    }
    fn encrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if let Err(rv) = fault(out.is_query()) {
            // A failed single-part call ends the operation, as in a real device.
            let mut scratch = vec![0u8; SCRATCH];
            let _ = self
                .inner
                .encrypt(s, data, &mut OutBuf::new(Some(&mut scratch[..])));
            return Err(rv);
        }
        self.inner.encrypt(s, data, out)
    }
    fn encrypt_update(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.inner.encrypt_update(s, data, out)
    }
    fn encrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.inner.encrypt_final(s, out)
    }
    fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        fault_init()?;
        self.inner.decrypt_init(s, mech, key)
    }
    fn decrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if let Err(rv) = fault(out.is_query()) {
            // A failed single-part call ends the operation, as in a real device.
            let mut scratch = vec![0u8; SCRATCH];
            let _ = self
                .inner
                .decrypt(s, data, &mut OutBuf::new(Some(&mut scratch[..])));
            return Err(rv);
        }
        self.inner.decrypt(s, data, out)
    }
    fn decrypt_update(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.inner.decrypt_update(s, data, out)
    }
    fn decrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.inner.decrypt_final(s, out)
    }
    fn message_encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.inner.message_encrypt_init(s, mech, key)
    }
    fn encrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.inner.encrypt_message(s, params, aad, data, out)
    }
    fn encrypt_message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
    ) -> CkResult<()> {
        self.inner.encrypt_message_begin(s, params, aad)
    }
    fn encrypt_message_next(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        data: &[u8],
        out: &mut OutBuf,
        last: bool,
    ) -> CkResult<()> {
        self.inner.encrypt_message_next(s, params, data, out, last)
    }
    fn message_encrypt_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.inner.message_encrypt_final(s)
    }
    fn message_decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.inner.message_decrypt_init(s, mech, key)
    }
    fn decrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.inner.decrypt_message(s, params, aad, data, out)
    }
    fn decrypt_message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
    ) -> CkResult<()> {
        self.inner.decrypt_message_begin(s, params, aad)
    }
    fn decrypt_message_next(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        data: &[u8],
        out: &mut OutBuf,
        last: bool,
    ) -> CkResult<()> {
        self.inner.decrypt_message_next(s, params, data, out, last)
    }
    fn message_decrypt_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.inner.message_decrypt_final(s)
    }
    fn digest_init(&self, s: CK_SESSION_HANDLE, mech: &Mechanism) -> CkResult<()> {
        fault_init()?;
        self.inner.digest_init(s, mech)
    }
    fn digest(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if let Err(rv) = fault(out.is_query()) {
            // A failed single-part call ends the operation, as in a real device.
            let mut scratch = vec![0u8; SCRATCH];
            let _ = self
                .inner
                .digest(s, data, &mut OutBuf::new(Some(&mut scratch[..])));
            return Err(rv);
        }
        self.inner.digest(s, data, out)
    }
    fn digest_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        self.inner.digest_update(s, data)
    }
    fn digest_key(&self, s: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) -> CkResult<()> {
        self.inner.digest_key(s, key)
    }
    fn digest_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.inner.digest_final(s, out)
    }
    fn sign_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        fault_init()?;
        self.inner.sign_init(s, mech, key)
    }
    fn sign(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if let Err(rv) = fault(out.is_query()) {
            // A failed single-part call ends the operation, as in a real device.
            let mut scratch = vec![0u8; SCRATCH];
            let _ = self
                .inner
                .sign(s, data, &mut OutBuf::new(Some(&mut scratch[..])));
            return Err(rv);
        }
        self.inner.sign(s, data, out)
    }
    fn sign_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        self.inner.sign_update(s, data)
    }
    fn sign_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.inner.sign_final(s, out)
    }
    fn sign_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        fault_init()?;
        self.inner.sign_recover_init(s, mech, key)
    }
    fn sign_recover(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if let Err(rv) = fault(out.is_query()) {
            // A failed single-part call ends the operation, as in a real device.
            let mut scratch = vec![0u8; SCRATCH];
            let _ = self
                .inner
                .sign_recover(s, data, &mut OutBuf::new(Some(&mut scratch[..])));
            return Err(rv);
        }
        self.inner.sign_recover(s, data, out)
    }
    fn verify_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        fault_init()?;
        self.inner.verify_init(s, mech, key)
    }
    fn verify(&self, s: CK_SESSION_HANDLE, data: &[u8], sig: &[u8]) -> CkResult<()> {
        if let Err(rv) = fault(false) {
            // A failed single-part call ends the operation, as in a real device.
            let _ = self.inner.verify(s, data, sig);
            return Err(rv);
        }
        self.inner.verify(s, data, sig)
    }
    fn verify_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        self.inner.verify_update(s, data)
    }
    fn verify_final(&self, s: CK_SESSION_HANDLE, sig: &[u8]) -> CkResult<()> {
        self.inner.verify_final(s, sig)
    }
    fn verify_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        fault_init()?;
        self.inner.verify_recover_init(s, mech, key)
    }
    fn verify_recover(&self, s: CK_SESSION_HANDLE, sig: &[u8], out: &mut OutBuf) -> CkResult<()> {
        if let Err(rv) = fault(out.is_query()) {
            // A failed single-part call ends the operation, as in a real device.
            let mut scratch = vec![0u8; SCRATCH];
            let _ = self
                .inner
                .verify_recover(s, sig, &mut OutBuf::new(Some(&mut scratch[..])));
            return Err(rv);
        }
        self.inner.verify_recover(s, sig, out)
    }
    fn verify_signature_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        fault_init()?;
        self.inner.verify_signature_init(s, mech, key, sig)
    }
    fn verify_signature(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        if let Err(rv) = fault(false) {
            // A failed single-part call ends the operation, as in a real device.
            let _ = self.inner.verify_signature(s, data);
            return Err(rv);
        }
        self.inner.verify_signature(s, data)
    }
    fn verify_signature_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        self.inner.verify_signature_update(s, data)
    }
    fn verify_signature_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.inner.verify_signature_final(s)
    }
    fn digest_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.inner.digest_encrypt_update(s, data, out)
    }
    fn decrypt_digest_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.inner.decrypt_digest_update(s, data, out)
    }
    fn sign_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.inner.sign_encrypt_update(s, data, out)
    }
    fn decrypt_verify_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.inner.decrypt_verify_update(s, data, out)
    }
    fn generate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.inner.generate_key(s, mech, template)
    }
    fn generate_key_pair(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        public_template: &[Attribute],
        private_template: &[Attribute],
    ) -> CkResult<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        self.inner
            .generate_key_pair(s, mech, public_template, private_template)
    }
    fn wrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        wrapping_key: CK_OBJECT_HANDLE,
        key: CK_OBJECT_HANDLE,
        out: &mut OutBuf,
    ) -> CkResult<()> {
        self.inner.wrap_key(s, mech, wrapping_key, key, out)
    }
    fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        unwrapping_key: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.inner
            .unwrap_key(s, mech, unwrapping_key, wrapped, template)
    }
    fn derive_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        base_key: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.inner.derive_key(s, mech, base_key, template)
    }
    fn encapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        public_key: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ciphertext: &mut OutBuf,
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        self.inner
            .encapsulate_key(s, mech, public_key, template, ciphertext)
    }
    fn decapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        private_key: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ciphertext: &[u8],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.inner
            .decapsulate_key(s, mech, private_key, template, ciphertext)
    }
    fn seed_random(&self, s: CK_SESSION_HANDLE, seed: &[u8]) -> CkResult<()> {
        self.inner.seed_random(s, seed)
    }
    fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        self.inner.generate_random(s, out)
    }
    fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.inner.get_session_info(s).map(|_| ())
    }
}

opencf_abi::pkcs11_module!(Faulty);
