//! The framework's [`Backend`] calls, one line each, forwarded to the function group files
//! (`general.rs`, `slot.rs`, `session.rs`, `object.rs`, `crypt.rs`, `sign.rs`, `keys.rs`,
//! `random.rs`, `asynchronous.rs`).

use crate::Accel;
use opencf_abi::sys::*;
use opencf_abi::{
    AsyncDone, AttrValue, Attribute, Backend, CkResult, InitArgs, MechRef, Mechanism, OutBuf,
    RawMechanism,
};

impl Backend for Accel {
    fn initialize(args: &InitArgs) -> CkResult<Self> {
        Accel::initialize(args)
    }
    fn finalize(&self) {
        Accel::finalize(self)
    }
    fn get_info(&self) -> CkResult<CK_INFO> {
        Accel::get_info(self)
    }
    fn get_slot_list(&self, token_present: bool) -> CkResult<Vec<CK_SLOT_ID>> {
        Accel::get_slot_list(self, token_present)
    }
    fn get_slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO> {
        Accel::get_slot_info(self, slot)
    }
    fn get_token_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
        Accel::get_token_info(self, slot)
    }
    fn get_mechanism_list(&self, slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>> {
        Accel::get_mechanism_list(self, slot)
    }
    fn get_mechanism_info(
        &self,
        slot: CK_SLOT_ID,
        m: CK_MECHANISM_TYPE,
    ) -> CkResult<CK_MECHANISM_INFO> {
        Accel::get_mechanism_info(self, slot, m)
    }
    fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        Accel::open_session(self, slot, flags)
    }
    fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        Accel::close_session(self, s)
    }
    fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        Accel::close_all_sessions(self, slot)
    }
    fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        Accel::get_session_info(self, s)
    }
    fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        Accel::session_cancel(self, s, flags)
    }
    fn offers(&self, op: CK_FLAGS) -> bool {
        // Encryption and decryption (the bulk engine, RSA), signing (RSA, ECDSA); nothing
        // else.
        matches!(op, CKF_ENCRYPT | CKF_DECRYPT | CKF_SIGN)
    }
    fn async_complete(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<AsyncDone> {
        Accel::async_complete(self, s, function)
    }
    fn async_get_id(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<CK_ULONG> {
        Accel::async_get_id(self, s, function)
    }
    fn async_join(&self, s: CK_SESSION_HANDLE, function: &str, id: CK_ULONG) -> CkResult<()> {
        Accel::async_join(self, s, function, id)
    }
    fn login(&self, s: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> CkResult<()> {
        Accel::login(self, s, user, pin)
    }
    fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        Accel::logout(self, s)
    }
    fn create_object(
        &self,
        s: CK_SESSION_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        Accel::create_object(self, s, template)
    }
    fn destroy_object(&self, s: CK_SESSION_HANDLE, obj: CK_OBJECT_HANDLE) -> CkResult<()> {
        Accel::destroy_object(self, s, obj)
    }
    fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        Accel::get_attribute_value(self, s, obj, types)
    }
    fn find_objects_init(&self, s: CK_SESSION_HANDLE, template: &[Attribute]) -> CkResult<()> {
        Accel::find_objects_init(self, s, template)
    }
    fn find_objects(&self, s: CK_SESSION_HANDLE, max: usize) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        Accel::find_objects(self, s, max)
    }
    fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        Accel::find_objects_final(self, s)
    }
    fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Accel::encrypt_init(self, s, MechRef::Parsed(m), key)
    }
    fn encrypt_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Accel::encrypt_init(self, s, MechRef::Raw(m), key)
    }
    fn encrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Accel::encrypt(self, s, data, out)
    }
    fn encrypt_update(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Accel::encrypt_update(self, s, data, out)
    }
    fn encrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        Accel::encrypt_final(self, s, out)
    }
    fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Accel::decrypt_init(self, s, MechRef::Parsed(m), key)
    }
    fn decrypt_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Accel::decrypt_init(self, s, MechRef::Raw(m), key)
    }
    fn decrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Accel::decrypt(self, s, data, out)
    }
    fn decrypt_update(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Accel::decrypt_update(self, s, data, out)
    }
    fn decrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        Accel::decrypt_final(self, s, out)
    }
    fn sign_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Accel::sign_init(self, s, MechRef::Parsed(m), key)
    }
    fn sign_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Accel::sign_init(self, s, MechRef::Raw(m), key)
    }
    fn sign(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Accel::sign(self, s, data, out)
    }
    fn sign_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        Accel::sign_update(self, s, data)
    }
    fn sign_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        Accel::sign_final(self, s, out)
    }
    fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        unwrapping_key: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        Accel::unwrap_key(self, s, m, unwrapping_key, wrapped, template)
    }
    fn seed_random(&self, s: CK_SESSION_HANDLE, seed: &[u8]) -> CkResult<()> {
        Accel::seed_random(self, s, seed)
    }
    fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        Accel::generate_random(self, s, out)
    }
    fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        Accel::check_session(self, s)
    }
}
