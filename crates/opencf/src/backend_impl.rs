//! The [`Backend`] implementation: one line per PKCS#11 function, forwarding to the function
//! group files.

use crate::OpenCf;
use opencf_abi::sys::*;
use opencf_abi::*;

impl Backend for OpenCf {
    fn initialize(args: &InitArgs) -> CkResult<Self> {
        OpenCf::init(args)
    }
    fn finalize(&self) {
        self.fini()
    }
    fn get_info(&self) -> CkResult<CK_INFO> {
        Ok(self.info())
    }
    fn get_slot_list(&self, token_present: bool) -> CkResult<Vec<CK_SLOT_ID>> {
        self.slot_list(token_present)
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
        OpenCf::init_token(self, slot, so_pin, label)
    }
    fn init_pin(&self, s: CK_SESSION_HANDLE, pin: &[u8]) -> CkResult<()> {
        OpenCf::init_pin(self, s, pin)
    }
    fn set_pin(&self, s: CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> CkResult<()> {
        OpenCf::set_pin(self, s, old, new)
    }
    fn wait_for_slot_event(&self, dont_block: bool) -> CkResult<CK_SLOT_ID> {
        Err(if dont_block {
            CKR_NO_EVENT
        } else {
            CKR_FUNCTION_NOT_SUPPORTED
        })
    }
    fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        OpenCf::open_session(self, slot, flags)
    }
    fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        OpenCf::close_session(self, s)
    }
    fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        OpenCf::close_all_sessions(self, slot)
    }
    fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        OpenCf::get_session_info(self, s)
    }
    fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        OpenCf::session_cancel(self, s, flags)
    }
    fn async_complete(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<AsyncDone> {
        OpenCf::async_complete(self, s, function)
    }
    fn async_get_id(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<CK_ULONG> {
        OpenCf::async_get_id(self, s, function)
    }
    fn async_join(&self, s: CK_SESSION_HANDLE, function: &str, id: CK_ULONG) -> CkResult<()> {
        OpenCf::async_join(self, s, function, id)
    }
    fn get_operation_state(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        OpenCf::get_operation_state(self, s, out)
    }
    fn set_operation_state(
        &self,
        s: CK_SESSION_HANDLE,
        state: &[u8],
        e: CK_OBJECT_HANDLE,
        a: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::set_operation_state(self, s, state, e, a)
    }
    fn login(&self, s: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> CkResult<()> {
        OpenCf::login(self, s, user, pin)
    }
    fn login_user(
        &self,
        s: CK_SESSION_HANDLE,
        user: CK_USER_TYPE,
        pin: &[u8],
        name: &[u8],
    ) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.login_user(h, user, pin, name), |m| {
            let (p, h) = self.ks_of(m)?;
            p.login_user(h, user, pin, name)
        })
    }
    fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        OpenCf::logout(self, s)
    }
    fn create_object(&self, s: CK_SESSION_HANDLE, t: &[Attribute]) -> CkResult<CK_OBJECT_HANDLE> {
        OpenCf::create_object(self, s, t)
    }
    fn copy_object(
        &self,
        s: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        OpenCf::copy_object(self, s, o, t)
    }
    fn destroy_object(&self, s: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> CkResult<()> {
        OpenCf::destroy_object(self, s, o)
    }
    fn get_object_size(&self, s: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> CkResult<CK_ULONG> {
        OpenCf::get_object_size(self, s, o)
    }
    fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        OpenCf::get_attribute_value(self, s, o, types)
    }
    fn set_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        t: &[Attribute],
    ) -> CkResult<()> {
        OpenCf::set_attribute_value(self, s, o, t)
    }
    fn find_objects_init(&self, s: CK_SESSION_HANDLE, t: &[Attribute]) -> CkResult<()> {
        OpenCf::find_objects_init(self, s, t)
    }
    fn find_objects(&self, s: CK_SESSION_HANDLE, max: usize) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        OpenCf::find_objects(self, s, max)
    }
    fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        OpenCf::find_objects_final(self, s)
    }
    fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::encrypt_init(self, s, m.into(), k)
    }
    fn encrypt(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        OpenCf::encrypt(self, s, d, o)
    }
    fn encrypt_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::encrypt_init(self, s, m.into(), k)
    }
    fn decrypt_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::decrypt_init(self, s, m.into(), k)
    }
    fn digest_init_raw(&self, s: CK_SESSION_HANDLE, m: RawMechanism<'_>) -> CkResult<()> {
        OpenCf::digest_init(self, s, m.into())
    }
    fn sign_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::sign_init(self, s, m.into(), k)
    }
    fn verify_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::verify_init(self, s, m.into(), k)
    }
    fn encrypt_update(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        OpenCf::encrypt_update(self, s, d, o)
    }
    fn encrypt_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        OpenCf::encrypt_final(self, s, o)
    }
    fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::decrypt_init(self, s, m.into(), k)
    }
    fn decrypt(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        OpenCf::decrypt(self, s, d, o)
    }
    fn decrypt_update(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        OpenCf::decrypt_update(self, s, d, o)
    }
    fn decrypt_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        OpenCf::decrypt_final(self, s, o)
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
    fn encrypt_message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        p: &mut MessageParams,
        aad: &[u8],
    ) -> CkResult<()> {
        self.message_begin(s, p, aad, true)
    }
    fn encrypt_message_next(
        &self,
        s: CK_SESSION_HANDLE,
        p: &mut MessageParams,
        d: &[u8],
        o: &mut OutBuf,
        last: bool,
    ) -> CkResult<()> {
        self.message_next(s, p, d, o, last, true)
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
    fn decrypt_message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        p: &mut MessageParams,
        aad: &[u8],
    ) -> CkResult<()> {
        self.message_begin(s, p, aad, false)
    }
    fn decrypt_message_next(
        &self,
        s: CK_SESSION_HANDLE,
        p: &mut MessageParams,
        d: &[u8],
        o: &mut OutBuf,
        last: bool,
    ) -> CkResult<()> {
        self.message_next(s, p, d, o, last, false)
    }
    fn message_decrypt_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.message_final(s, false)
    }
    fn digest_init(&self, s: CK_SESSION_HANDLE, m: &Mechanism) -> CkResult<()> {
        OpenCf::digest_init(self, s, m.into())
    }
    fn digest(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        OpenCf::digest(self, s, d, o)
    }
    fn digest_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        OpenCf::digest_update(self, s, d)
    }
    fn digest_key(&self, s: CK_SESSION_HANDLE, k: CK_OBJECT_HANDLE) -> CkResult<()> {
        OpenCf::digest_key(self, s, k)
    }
    fn digest_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        OpenCf::digest_final(self, s, o)
    }
    fn digest_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        OpenCf::digest_encrypt_update(self, s, d, o)
    }
    fn decrypt_digest_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        OpenCf::decrypt_digest_update(self, s, d, o)
    }
    fn sign_encrypt_update(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        OpenCf::sign_encrypt_update(self, s, d, o)
    }
    fn decrypt_verify_update(
        &self,
        s: CK_SESSION_HANDLE,
        d: &[u8],
        o: &mut OutBuf,
    ) -> CkResult<()> {
        OpenCf::decrypt_verify_update(self, s, d, o)
    }
    fn sign_init(&self, s: CK_SESSION_HANDLE, m: &Mechanism, k: CK_OBJECT_HANDLE) -> CkResult<()> {
        OpenCf::sign_init(self, s, m.into(), k)
    }
    fn sign(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        OpenCf::sign(self, s, d, o)
    }
    fn sign_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        OpenCf::sign_update(self, s, d)
    }
    fn sign_final(&self, s: CK_SESSION_HANDLE, o: &mut OutBuf) -> CkResult<()> {
        OpenCf::sign_final(self, s, o)
    }
    fn sign_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::sign_recover_init(self, s, m.into(), k)
    }
    fn sign_recover(&self, s: CK_SESSION_HANDLE, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        OpenCf::sign_recover(self, s, d, o)
    }
    fn verify_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::verify_init(self, s, m.into(), k)
    }
    fn verify(&self, s: CK_SESSION_HANDLE, d: &[u8], sig: &[u8]) -> CkResult<()> {
        OpenCf::verify(self, s, d, sig)
    }
    fn verify_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        OpenCf::verify_update(self, s, d)
    }
    fn verify_final(&self, s: CK_SESSION_HANDLE, sig: &[u8]) -> CkResult<()> {
        OpenCf::verify_final(self, s, sig)
    }
    fn verify_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        OpenCf::verify_recover_init(self, s, m.into(), k)
    }
    fn verify_recover(&self, s: CK_SESSION_HANDLE, sig: &[u8], o: &mut OutBuf) -> CkResult<()> {
        OpenCf::verify_recover(self, s, sig, o)
    }
    fn verify_signature_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        OpenCf::verify_signature_init(self, s, m.into(), k, sig)
    }
    fn verify_signature_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        k: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        OpenCf::verify_signature_init(self, s, m.into(), k, sig)
    }
    fn verify_signature(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        OpenCf::verify_signature(self, s, d)
    }
    fn verify_signature_update(&self, s: CK_SESSION_HANDLE, d: &[u8]) -> CkResult<()> {
        OpenCf::verify_signature_update(self, s, d)
    }
    fn verify_signature_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        OpenCf::verify_signature_final(self, s)
    }
    fn generate_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        OpenCf::generate_key(self, s, m, t)
    }
    fn generate_key_pair(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        p: &[Attribute],
        q: &[Attribute],
    ) -> CkResult<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        OpenCf::generate_key_pair(self, s, m, p, q)
    }
    fn wrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        w: CK_OBJECT_HANDLE,
        k: CK_OBJECT_HANDLE,
        o: &mut OutBuf,
    ) -> CkResult<()> {
        OpenCf::wrap_key(self, s, m, w, k, o)
    }
    fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        u: CK_OBJECT_HANDLE,
        w: &[u8],
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        OpenCf::unwrap_key(self, s, m, u, w, t)
    }
    fn derive_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        b: CK_OBJECT_HANDLE,
        t: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        OpenCf::derive_key(self, s, m, b, t)
    }
    fn encapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
        t: &[Attribute],
        ct: &mut OutBuf,
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        OpenCf::encapsulate_key(self, s, m, k, t, ct)
    }
    fn decapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        k: CK_OBJECT_HANDLE,
        t: &[Attribute],
        ct: &[u8],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        OpenCf::decapsulate_key(self, s, m, k, t, ct)
    }
    fn seed_random(&self, s: CK_SESSION_HANDLE, seed: &[u8]) -> CkResult<()> {
        OpenCf::seed_random(self, s, seed)
    }
    fn generate_random(&self, s: CK_SESSION_HANDLE, o: &mut [u8]) -> CkResult<()> {
        OpenCf::generate_random(self, s, o)
    }
    fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        OpenCf::check_session(self, s)
    }
}
