//! The OpenCF software token: a complete PKCS#11 3.2 token whose cryptography comes from
//! OpenSSL and whose objects live in an SQLite keystore, as a [`Backend`]. The `opencf-softtoken`
//! crate exports it as the module `libopencf_softtoken.so`; `libopencf.so` links it in and calls
//! it without the C ABI when the configuration names that module (docs/METASLOT.md, "The
//! software token linked in").
//!
//! The code is split by PKCS#11 function group, as the specification groups them:
//! [`general`] (`C_Initialize`, `C_GetInfo`), [`slot`] (slots, tokens, PINs), [`session`]
//! (sessions, login), [`object`] (objects and attributes), [`crypt`] (encryption, decryption,
//! message-based AEAD), [`digest`], [`sign`] (signing and verification), [`dual`]
//! (dual-function updates), [`keys`] (generation, wrapping, derivation, encapsulation),
//! [`random`]. Beside them: [`mech`] (every mechanism, computed by OpenSSL), [`policy`]
//! (attribute rules), [`token`] (one token's login state and objects), [`store`] (the
//! encrypted SQLite keystore). The C ABI itself is in the `opencf-abi` crate.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod attrs;
pub mod crypt;
pub mod digest;
pub mod dual;
pub mod general;
pub mod keys;
pub mod mech;
pub mod object;
pub mod policy;
pub mod random;
pub mod session;
pub mod sign;
pub mod slot;
pub mod store;
pub mod table;
pub mod token;

use object::Object;
use opencf_abi::sys::*;
use opencf_abi::{
    AttrValue, Attribute, Backend, CkResult, InitArgs, MechRef, Mechanism, MessageParams, OutBuf,
    RawMechanism,
};
use session::Session;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use table::HandleTable;
use token::Token;

/// The software token's state between `C_Initialize` and `C_Finalize`.
pub struct SoftToken {
    /// Keystore directory.
    pub dir: PathBuf,
    /// Tokens by slot ID.
    pub slots: RwLock<Vec<Arc<Token>>>,
    /// Open sessions.
    pub sessions: HandleTable<Session>,
    /// Objects (session objects and the token objects loaded in memory).
    pub objects: HandleTable<Object>,
    next_session: AtomicU64,
    next_object: AtomicU64,
    next_uid: AtomicU64,
    next_unique: AtomicU64,
    /// Bumped whenever an object changes or disappears, so sessions drop cached lookups.
    pub epoch: AtomicU64,
    /// Initialized by `libopencf.so` (`CKF_OPENCF_FRAMEWORK`): the framework's key
    /// migration mechanism is served.
    pub framework: bool,
}

impl SoftToken {
    /// A fresh object handle.
    pub fn new_object_handle(&self) -> CK_OBJECT_HANDLE {
        self.next_object.fetch_add(1, Ordering::Relaxed)
    }
    /// A value for `CKA_UNIQUE_ID`, unique in this keystore directory: time-based high bits,
    /// a counter below.
    pub fn new_unique_id(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        (now << 16)
            ^ self.next_unique.fetch_add(1, Ordering::Relaxed)
            ^ (std::process::id() as u64) << 48
    }
    /// Invalidates every session's cached object lookups.
    pub fn bump_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

impl Backend for SoftToken {
    fn initialize(args: &InitArgs) -> CkResult<Self> {
        SoftToken::init(args)
    }
    fn finalize(&self) {
        for t in self.slots.read().unwrap_or_else(|e| e.into_inner()).iter() {
            self.logout_token(t);
        }
    }
    fn get_info(&self) -> CkResult<CK_INFO> {
        Ok(self.info())
    }
    fn get_slot_list(&self, _token_present: bool) -> CkResult<Vec<CK_SLOT_ID>> {
        Ok(self.slot_list())
    }
    fn get_slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO> {
        self.slot_info(slot)
    }
    fn get_token_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
        self.token_info(slot)
    }
    fn get_mechanism_list(&self, slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>> {
        self.mechanisms(slot)
    }
    fn get_mechanism_info(
        &self,
        slot: CK_SLOT_ID,
        m: CK_MECHANISM_TYPE,
    ) -> CkResult<CK_MECHANISM_INFO> {
        self.mechanism(slot, m)
    }
    fn init_token(&self, slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> CkResult<()> {
        SoftToken::init_token(self, slot, so_pin, label)
    }
    fn init_pin(&self, s: CK_SESSION_HANDLE, pin: &[u8]) -> CkResult<()> {
        SoftToken::init_pin(self, s, pin)
    }
    fn set_pin(&self, s: CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> CkResult<()> {
        SoftToken::set_pin(self, s, old, new)
    }
    fn wait_for_slot_event(&self, dont_block: bool) -> CkResult<CK_SLOT_ID> {
        Err(if dont_block {
            CKR_NO_EVENT
        } else {
            CKR_FUNCTION_NOT_SUPPORTED
        })
    }
    fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        SoftToken::open_session(self, slot, flags)
    }
    fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        SoftToken::close_session(self, s)
    }
    fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        SoftToken::close_all_sessions(self, slot)
    }
    fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        SoftToken::get_session_info(self, s)
    }
    fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        SoftToken::session_cancel(self, s, flags)
    }
    fn get_operation_state(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        SoftToken::get_operation_state(self, s, out)
    }
    fn set_operation_state(
        &self,
        s: CK_SESSION_HANDLE,
        state: &[u8],
        _e: CK_OBJECT_HANDLE,
        _a: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        SoftToken::set_operation_state(self, s, state)
    }
    fn login(&self, s: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> CkResult<()> {
        SoftToken::login(self, s, user, pin)
    }
    fn login_user(
        &self,
        s: CK_SESSION_HANDLE,
        user: CK_USER_TYPE,
        pin: &[u8],
        _username: &[u8],
    ) -> CkResult<()> {
        SoftToken::login(self, s, user, pin)
    }
    fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        SoftToken::logout(self, s)
    }
    fn create_object(&self, s: CK_SESSION_HANDLE, t: &[Attribute]) -> CkResult<CK_OBJECT_HANDLE> {
        SoftToken::create_object(self, s, t)
    }
    fn copy_object(
        &self,
        s: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        SoftToken::copy_object(self, s, o, t)
    }
    fn destroy_object(&self, s: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> CkResult<()> {
        SoftToken::destroy_object(self, s, o)
    }
    fn get_object_size(&self, s: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> CkResult<CK_ULONG> {
        SoftToken::get_object_size(self, s, o)
    }
    fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        SoftToken::get_attribute_value(self, s, o, types)
    }
    fn set_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        t: &[Attribute],
    ) -> CkResult<()> {
        SoftToken::set_attribute_value(self, s, o, t)
    }
    fn find_objects_init(&self, s: CK_SESSION_HANDLE, t: &[Attribute]) -> CkResult<()> {
        SoftToken::find_objects_init(self, s, t)
    }
    fn find_objects(&self, s: CK_SESSION_HANDLE, max: usize) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        SoftToken::find_objects(self, s, max)
    }
    fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        SoftToken::find_objects_final(self, s)
    }
    fn pin_session(&self, s: CK_SESSION_HANDLE) -> Option<opencf_abi::Pinned> {
        SoftToken::pin_session(self, s)
    }
    fn pinned_encrypt_init(
        &self,
        p: &opencf_abi::Pinned,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.cipher_init(self.pinned(p)?, m.into(), k, true)
    }
    fn pinned_encrypt(&self, p: &opencf_abi::Pinned, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        self.cipher_one_shot(self.pinned(p)?, true, d, o)
    }
    fn pinned_decrypt_init(
        &self,
        p: &opencf_abi::Pinned,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.cipher_init(self.pinned(p)?, m.into(), k, false)
    }
    fn pinned_decrypt(&self, p: &opencf_abi::Pinned, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        self.cipher_one_shot(self.pinned(p)?, false, d, o)
    }
    fn pinned_sign_init(
        &self,
        p: &opencf_abi::Pinned,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.sign_init_in(self.pinned(p)?, m.into(), k)
    }
    fn pinned_sign(&self, p: &opencf_abi::Pinned, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        self.sign_in(self.pinned(p)?, d, o)
    }
    fn pinned_verify_init(
        &self,
        p: &opencf_abi::Pinned,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.verify_init_in(self.pinned(p)?, m.into(), k)
    }
    fn pinned_verify(&self, p: &opencf_abi::Pinned, d: &[u8], sig: &[u8]) -> CkResult<()> {
        self.verify_in(self.pinned(p)?, d, sig)
    }
    fn pinned_digest_init(&self, p: &opencf_abi::Pinned, m: &Mechanism) -> CkResult<()> {
        self.digest_init_in(self.pinned(p)?, m.into())
    }
    fn pinned_digest(&self, p: &opencf_abi::Pinned, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        self.digest_in(self.pinned(p)?, d, o)
    }
    fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        SoftToken::encrypt_init(self, s, m, k)
    }
    fn encrypt(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        SoftToken::encrypt(self, s, d, o)
    }
    fn encrypt_update(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        SoftToken::encrypt_update(self, s, d, o)
    }
    fn encrypt_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        SoftToken::encrypt_final(self, s, o)
    }
    fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        SoftToken::decrypt_init(self, s, m, k)
    }
    fn decrypt(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        SoftToken::decrypt(self, s, d, o)
    }
    fn decrypt_update(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        SoftToken::decrypt_update(self, s, d, o)
    }
    fn decrypt_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        SoftToken::decrypt_final(self, s, o)
    }
    fn message_encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.message_init(s, m, k, true)
    }
    fn encrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        p: &mut MessageParams,
        aad: &[u8],
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        self.message(s, p, aad, d, o, true)
    }
    fn message_encrypt_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.message_final(s, true)
    }
    fn message_decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.message_init(s, m, k, false)
    }
    fn decrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        p: &mut MessageParams,
        aad: &[u8],
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        self.message(s, p, aad, d, o, false)
    }
    fn message_decrypt_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.message_final(s, false)
    }
    fn digest_init(&self, s: CK_SESSION_HANDLE, m: &Mechanism) -> CkResult<()> {
        SoftToken::digest_init(self, s, m)
    }
    fn digest(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        SoftToken::digest(self, s, d, o)
    }
    fn digest_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        SoftToken::digest_update(self, s, d)
    }
    fn digest_key(&self, s: CK_SESSION_HANDLE, k: CK_OBJECT_HANDLE) -> CkResult<()> {
        SoftToken::digest_key(self, s, k)
    }
    fn digest_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        SoftToken::digest_final(self, s, o)
    }
    fn sign_init(&self, s: CK_SESSION_HANDLE, m: &Mechanism, k: CK_OBJECT_HANDLE) -> CkResult<()> {
        SoftToken::sign_init(self, s, m, k)
    }
    fn sign(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        SoftToken::sign(self, s, d, o)
    }
    fn sign_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        SoftToken::sign_update(self, s, d)
    }
    fn sign_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        SoftToken::sign_final(self, s, o)
    }
    fn sign_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        SoftToken::sign_recover_init(self, s, m, k)
    }
    fn sign_recover(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        SoftToken::sign_recover(self, s, d, o)
    }
    fn verify_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        SoftToken::verify_init(self, s, m, k)
    }
    fn verify(&self, s: CK_SESSION_HANDLE, d: &[u8], sig: &[u8]) -> CkResult<()> {
        SoftToken::verify(self, s, d, sig)
    }
    fn verify_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        SoftToken::verify_update(self, s, d)
    }
    fn verify_final(&self, s: CK_SESSION_HANDLE, sig: &[u8]) -> CkResult<()> {
        SoftToken::verify_final(self, s, sig)
    }
    fn verify_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        SoftToken::verify_recover_init(self, s, m, k)
    }
    fn verify_recover(&self, s: CK_SESSION_HANDLE, sig: &[u8], o: &mut OutBuf) -> CkResult<()> {
        SoftToken::verify_recover(self, s, sig, o)
    }
    fn verify_signature_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        SoftToken::verify_signature_init(self, s, m.into(), k, sig)
    }
    fn verify_signature(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        SoftToken::verify_signature(self, s, d)
    }
    fn verify_signature_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        SoftToken::verify_signature_update(self, s, d)
    }
    fn verify_signature_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        SoftToken::verify_signature_final(self, s)
    }
    fn digest_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        SoftToken::digest_encrypt_update(self, s, d, o)
    }
    fn decrypt_digest_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        SoftToken::decrypt_digest_update(self, s, d, o)
    }
    fn sign_encrypt_update(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        SoftToken::sign_encrypt_update(self, s, d, o)
    }
    fn decrypt_verify_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        SoftToken::decrypt_verify_update(self, s, d, o)
    }
    fn generate_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        SoftToken::generate_key(self, s, m, t)
    }
    fn generate_key_pair(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        p: &[Attribute],
        q: &[Attribute],
    ) -> CkResult<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        SoftToken::generate_key_pair(self, s, m, p, q)
    }
    fn wrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        w: CK_OBJECT_HANDLE,
        k: CK_OBJECT_HANDLE,
        o: &mut OutBuf,
    ) -> CkResult<()> {
        SoftToken::wrap_key(self, s, m, w, k, o)
    }
    fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        u: CK_OBJECT_HANDLE,
        w: &[u8],
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        SoftToken::unwrap_key(self, s, m, u, w, t)
    }
    fn derive_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        b: CK_OBJECT_HANDLE,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        SoftToken::derive_key(self, s, m, b, t)
    }
    fn encapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
        t: &[Attribute],
        ct: &mut OutBuf,
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        SoftToken::encapsulate_key(self, s, m, k, t, ct)
    }
    fn decapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
        t: &[Attribute],
        ct: &[u8],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        SoftToken::decapsulate_key(self, s, m, k, t, ct)
    }
    fn seed_random(&self, s: CK_SESSION_HANDLE, _seed: &[u8]) -> CkResult<()> {
        SoftToken::seed_random(self, s)
    }
    fn generate_random(&self, s: CK_SESSION_HANDLE, o: &mut [u8]) -> CkResult<()> {
        SoftToken::generate_random(self, s, o)
    }
    fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.session(s).map(|_| ())
    }
    // The inits through this module's own C ABI: the mechanism is parsed after the session's
    // checks (SoftToken::cipher_init), with one lookup of the session.
    fn encrypt_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.cipher_init(&*self.session(s)?, MechRef::Raw(m), k, true)
    }
    fn decrypt_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.cipher_init(&*self.session(s)?, MechRef::Raw(m), k, false)
    }
    fn digest_init_raw(&self, s: CK_SESSION_HANDLE, m: RawMechanism<'_>) -> CkResult<()> {
        self.digest_init_in(&*self.session(s)?, MechRef::Raw(m))
    }
    fn sign_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.sign_init_in(&*self.session(s)?, MechRef::Raw(m), k)
    }
    fn verify_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.verify_init_in(&*self.session(s)?, MechRef::Raw(m), k)
    }
    fn verify_signature_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        SoftToken::verify_signature_init(self, s, MechRef::Raw(m), k, sig)
    }
}
