//! The safe interface every OpenCF module implements.
//!
//! The ABI layer validates the caller's pointers, copies inputs into safe types, calls one of
//! these methods, and writes the results back following the PKCS#11 rules. A method that a
//! module does not override answers `CKR_FUNCTION_NOT_SUPPORTED`.
//!
//! Methods are grouped as the PKCS#11 specification groups the functions.

use crate::sys::*;
use crate::types::*;
use crate::RawMechanism;

const NS: CK_RV = CKR_FUNCTION_NOT_SUPPORTED;

/// A PKCS#11 module implementation (software token, metaslot, accelerator provider).
///
/// One value exists between `C_Initialize` and `C_Finalize`; it is shared by all threads, so
/// every method takes `&self` and the implementation does its own fine-grained locking.
#[allow(unused_variables)]
pub trait Backend: Send + Sync + 'static {
    // ----- General purpose -----

    /// `C_Initialize`: builds the module's state.
    fn initialize(args: &InitArgs) -> CkResult<Self>
    where
        Self: Sized;
    /// `C_Finalize`: called once before the value is dropped. Release resources (files,
    /// connections, worker threads) here: the value itself may be dropped a little later, on
    /// another thread, when the last thread that cached it makes its next call or exits.
    /// Never called in a fork child for the parent's value, which is leaked there.
    fn finalize(&self) {}
    /// `C_GetInfo`.
    fn get_info(&self) -> CkResult<CK_INFO>;

    // ----- Slot and token management -----

    /// `C_GetSlotList`.
    fn get_slot_list(&self, token_present: bool) -> CkResult<Vec<CK_SLOT_ID>>;
    /// `C_GetSlotInfo`.
    fn get_slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO>;
    /// `C_GetTokenInfo`.
    fn get_token_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO>;
    /// `C_GetMechanismList`.
    fn get_mechanism_list(&self, slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>>;
    /// `C_GetMechanismInfo`.
    fn get_mechanism_info(
        &self,
        slot: CK_SLOT_ID,
        mech: CK_MECHANISM_TYPE,
    ) -> CkResult<CK_MECHANISM_INFO>;
    /// `C_InitToken` (label is the 32-byte blank-padded field).
    fn init_token(&self, slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_InitPIN`.
    fn init_pin(&self, s: CK_SESSION_HANDLE, pin: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_SetPIN`.
    fn set_pin(&self, s: CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_WaitForSlotEvent`; `dont_block` reflects `CKF_DONT_BLOCK`.
    fn wait_for_slot_event(&self, dont_block: bool) -> CkResult<CK_SLOT_ID> {
        Err(NS)
    }

    // ----- Session management -----

    /// `C_OpenSession` (the notification callback is not used).
    fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE>;
    /// `C_CloseSession`.
    fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()>;
    /// `C_CloseAllSessions`.
    fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()>;
    /// `C_GetSessionInfo`.
    fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO>;
    /// `C_SessionCancel` (3.0).
    fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        Err(NS)
    }
    /// Whether the backend has the operation `op` (`CKF_ENCRYPT`, `CKF_DIGEST`,
    /// `CKF_MESSAGE_ENCRYPT`, …) at all. For one it has not, the ABI layer answers
    /// `CKR_FUNCTION_NOT_SUPPORTED` to every call of its init, whatever the arguments (also a
    /// NULL mechanism, which would otherwise end an operation that cannot exist, with
    /// `CKR_OK`).
    fn offers(&self, op: CK_FLAGS) -> bool {
        true
    }
    /// `C_AsyncComplete` (3.2) of the function named `function` (`"C_Sign"`, …) that
    /// answered `CKR_PENDING` in an asynchronous session (`CKF_ASYNC_SESSION`):
    /// [`AsyncDone::Pending`] while it runs, else its output or its error. Nothing pending
    /// under that name: `CKR_OPERATION_NOT_INITIALIZED`. The layer above keeps the caller's
    /// output buffer of the original call and writes the output there.
    fn async_complete(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<AsyncDone> {
        Err(NS)
    }
    /// `C_AsyncGetID` (3.2): an identifier that outlives `C_Finalize` for the pending
    /// `function`; a module that does not keep operations across `C_Finalize` answers
    /// `CKR_STATE_UNSAVEABLE`.
    fn async_get_id(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<CK_ULONG> {
        Err(NS)
    }
    /// `C_AsyncJoin` (3.2) of an operation kept across `C_Finalize` under `id`.
    fn async_join(&self, s: CK_SESSION_HANDLE, function: &str, id: CK_ULONG) -> CkResult<()> {
        Err(NS)
    }
    /// `C_GetOperationState`.
    fn get_operation_state(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_SetOperationState`.
    fn set_operation_state(
        &self,
        s: CK_SESSION_HANDLE,
        state: &[u8],
        enc_key: CK_OBJECT_HANDLE,
        auth_key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_Login`.
    fn login(&self, s: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> CkResult<()>;
    /// `C_LoginUser` (3.0).
    fn login_user(
        &self,
        s: CK_SESSION_HANDLE,
        user: CK_USER_TYPE,
        pin: &[u8],
        username: &[u8],
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_Logout`.
    fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()>;
    /// `C_GetSessionValidationFlags` (3.2).
    fn get_session_validation_flags(
        &self,
        s: CK_SESSION_HANDLE,
        kind: CK_SESSION_VALIDATION_FLAGS_TYPE,
    ) -> CkResult<CK_FLAGS> {
        Err(NS)
    }

    // ----- Object management -----

    /// `C_CreateObject`.
    fn create_object(
        &self,
        s: CK_SESSION_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        Err(NS)
    }
    /// `C_CopyObject`.
    fn copy_object(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        Err(NS)
    }
    /// `C_DestroyObject`.
    fn destroy_object(&self, s: CK_SESSION_HANDLE, obj: CK_OBJECT_HANDLE) -> CkResult<()> {
        Err(NS)
    }
    /// `C_GetObjectSize`.
    fn get_object_size(&self, s: CK_SESSION_HANDLE, obj: CK_OBJECT_HANDLE) -> CkResult<CK_ULONG> {
        Err(NS)
    }
    /// `C_GetAttributeValue`: one answer per requested type, in order.
    fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        Err(NS)
    }
    /// `C_SetAttributeValue`.
    fn set_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_FindObjectsInit`.
    fn find_objects_init(&self, s: CK_SESSION_HANDLE, template: &[Attribute]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_FindObjects`: at most `max` handles.
    fn find_objects(&self, s: CK_SESSION_HANDLE, max: usize) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        Err(NS)
    }
    /// `C_FindObjectsFinal`.
    fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        Err(NS)
    }

    // ----- Encryption -----

    /// `C_EncryptInit`.
    fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_EncryptInit` with the caller's mechanism unparsed: by default the session is checked
    /// ([`Backend::check_session`]), then the mechanism parsed here and passed to
    /// [`Backend::encrypt_init`], so that a closed session is reported before a malformed
    /// parameter. A framework overrides it to pass the structure on as it came; a token may
    /// override it to parse after its other checks (the software token does).
    fn encrypt_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        mech: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.check_session(s)?;
        self.encrypt_init(s, &mech.parse()?, key)
    }
    /// `C_Encrypt`.
    fn encrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_EncryptUpdate`.
    fn encrypt_update(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_EncryptFinal`.
    fn encrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }

    // ----- Decryption -----

    /// `C_DecryptInit`.
    fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DecryptInit` with the caller's mechanism unparsed: by default parsed here and passed to
    /// [`Backend::decrypt_init`]. A framework overrides it to pass the structure on as it came.
    fn decrypt_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        mech: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.check_session(s)?;
        self.decrypt_init(s, &mech.parse()?, key)
    }
    /// `C_Decrypt`.
    fn decrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DecryptUpdate`.
    fn decrypt_update(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DecryptFinal`.
    fn decrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }

    // ----- Message-based encryption (3.0) -----

    /// `C_MessageEncryptInit`.
    fn message_encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_EncryptMessage`.
    fn encrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_EncryptMessageBegin`.
    fn encrypt_message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_EncryptMessageNext`; `last` reflects `CKF_END_OF_MESSAGE`.
    fn encrypt_message_next(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        data: &[u8],
        out: &mut OutBuf,
        last: bool,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_MessageEncryptFinal`.
    fn message_encrypt_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        Err(NS)
    }
    /// `C_MessageDecryptInit`.
    fn message_decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DecryptMessage`.
    fn decrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DecryptMessageBegin`.
    fn decrypt_message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DecryptMessageNext`.
    fn decrypt_message_next(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        data: &[u8],
        out: &mut OutBuf,
        last: bool,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_MessageDecryptFinal`.
    fn message_decrypt_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        Err(NS)
    }

    // ----- Message digesting -----

    /// `C_DigestInit`.
    fn digest_init(&self, s: CK_SESSION_HANDLE, mech: &Mechanism) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DigestInit` with the caller's mechanism unparsed (see [`Backend::encrypt_init_raw`]).
    fn digest_init_raw(&self, s: CK_SESSION_HANDLE, mech: RawMechanism<'_>) -> CkResult<()> {
        self.check_session(s)?;
        self.digest_init(s, &mech.parse()?)
    }
    /// `C_Digest`.
    fn digest(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DigestUpdate`.
    fn digest_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DigestKey`.
    fn digest_key(&self, s: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DigestFinal`.
    fn digest_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }

    // ----- Signing and MACing -----

    /// `C_SignInit`.
    fn sign_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_SignInit` with the caller's mechanism unparsed: by default parsed here and passed to
    /// [`Backend::sign_init`]. A framework overrides it to pass the structure on as it came.
    fn sign_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        mech: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.check_session(s)?;
        self.sign_init(s, &mech.parse()?, key)
    }
    /// `C_Sign`.
    fn sign(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_SignUpdate`.
    fn sign_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_SignFinal`.
    fn sign_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_SignRecoverInit`.
    fn sign_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_SignRecover`.
    fn sign_recover(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }

    // ----- Verifying signatures and MACs -----

    /// `C_VerifyInit`.
    fn verify_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifyInit` with the caller's mechanism unparsed: by default parsed here and passed to
    /// [`Backend::verify_init`]. A framework overrides it to pass the structure on as it came.
    fn verify_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        mech: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.check_session(s)?;
        self.verify_init(s, &mech.parse()?, key)
    }
    /// `C_Verify`.
    fn verify(&self, s: CK_SESSION_HANDLE, data: &[u8], sig: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifyUpdate`.
    fn verify_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifyFinal`.
    fn verify_final(&self, s: CK_SESSION_HANDLE, sig: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifyRecoverInit`.
    fn verify_recover_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifyRecover`.
    fn verify_recover(&self, s: CK_SESSION_HANDLE, sig: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifySignatureInit` (3.2): the signature is given up front.
    fn verify_signature_init(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifySignatureInit` with the caller's mechanism unparsed: by default parsed here and
    /// passed to [`Backend::verify_signature_init`], as [`Backend::verify_init_raw`] does.
    fn verify_signature_init_raw(
        &self,
        s: CK_SESSION_HANDLE,
        mech: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        self.check_session(s)?;
        self.verify_signature_init(s, &mech.parse()?, key, sig)
    }
    /// `C_VerifySignature` (3.2).
    fn verify_signature(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifySignatureUpdate` (3.2).
    fn verify_signature_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifySignatureFinal` (3.2).
    fn verify_signature_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        Err(NS)
    }

    // ----- Dual-function cryptographic operations -----

    /// `C_DigestEncryptUpdate`.
    fn digest_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DecryptDigestUpdate`.
    fn decrypt_digest_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_SignEncryptUpdate`.
    fn sign_encrypt_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DecryptVerifyUpdate`.
    fn decrypt_verify_update(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        Err(NS)
    }

    // ----- Key management -----

    /// `C_GenerateKey`.
    fn generate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        Err(NS)
    }
    /// `C_GenerateKeyPair`: (public, private).
    fn generate_key_pair(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        public_template: &[Attribute],
        private_template: &[Attribute],
    ) -> CkResult<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        Err(NS)
    }
    /// `C_WrapKey`.
    fn wrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        wrapping_key: CK_OBJECT_HANDLE,
        key: CK_OBJECT_HANDLE,
        out: &mut OutBuf,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_UnwrapKey`.
    fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        unwrapping_key: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        Err(NS)
    }
    /// `C_DeriveKey`.
    fn derive_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        base_key: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        Err(NS)
    }
    /// `C_EncapsulateKey` (3.2): returns the new key's handle once the ciphertext was written,
    /// `None` for a size query.
    fn encapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        public_key: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ciphertext: &mut OutBuf,
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        Err(NS)
    }
    /// `C_DecapsulateKey` (3.2).
    fn decapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        private_key: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ciphertext: &[u8],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        Err(NS)
    }

    // ----- Random number generation -----

    /// `C_SeedRandom`.
    fn seed_random(&self, s: CK_SESSION_HANDLE, seed: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_GenerateRandom`.
    fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        Err(NS)
    }

    // ----- Pinned sessions (a framework that links the module in) -----

    /// The session behind `s`, lent to a caller that links this module in and keeps the
    /// session for as long as it holds it: the framework's metaslot pins its keystore session,
    /// so that its hot calls (the `pinned_*` methods) skip this module's handle lookup. A
    /// pinned session closed meanwhile (`C_CloseSession`, `C_CloseAllSessions`, `C_Finalize`)
    /// answers `CKR_SESSION_HANDLE_INVALID`, as its handle would. `None`: the module does not
    /// lend sessions (every other method keeps working by handle).
    fn pin_session(&self, s: CK_SESSION_HANDLE) -> Option<Pinned> {
        None
    }
    /// `C_EncryptInit` on a pinned session.
    fn pinned_encrypt_init(
        &self,
        p: &Pinned,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_Encrypt` on a pinned session.
    fn pinned_encrypt(&self, p: &Pinned, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DecryptInit` on a pinned session.
    fn pinned_decrypt_init(
        &self,
        p: &Pinned,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_Decrypt` on a pinned session.
    fn pinned_decrypt(&self, p: &Pinned, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_SignInit` on a pinned session.
    fn pinned_sign_init(
        &self,
        p: &Pinned,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_Sign` on a pinned session.
    fn pinned_sign(&self, p: &Pinned, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }
    /// `C_VerifyInit` on a pinned session.
    fn pinned_verify_init(
        &self,
        p: &Pinned,
        mech: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        Err(NS)
    }
    /// `C_Verify` on a pinned session.
    fn pinned_verify(&self, p: &Pinned, data: &[u8], sig: &[u8]) -> CkResult<()> {
        Err(NS)
    }
    /// `C_DigestInit` on a pinned session.
    fn pinned_digest_init(&self, p: &Pinned, mech: &Mechanism) -> CkResult<()> {
        Err(NS)
    }
    /// `C_Digest` on a pinned session.
    fn pinned_digest(&self, p: &Pinned, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        Err(NS)
    }

    // ----- Parallel function management (legacy) -----

    /// Checks a session handle: for `C_GetFunctionStatus`/`C_CancelFunction`, which then answer
    /// `CKR_FUNCTION_NOT_PARALLEL`, and for the default `*_init_raw` functions.
    fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()>;
    /// `C_GetFunctionStatus`: `CKR_FUNCTION_NOT_PARALLEL` for a valid session.
    fn get_function_status(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.check_session(s)?;
        Err(CKR_FUNCTION_NOT_PARALLEL)
    }
    /// `C_CancelFunction`: `CKR_FUNCTION_NOT_PARALLEL` for a valid session.
    fn cancel_function(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.check_session(s)?;
        Err(CKR_FUNCTION_NOT_PARALLEL)
    }
}

/// A session lent by [`Backend::pin_session`]: the module's own session object, which only
/// that module looks inside.
pub type Pinned = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// A [`Backend`] is called through `dyn Backend` by a framework that links it in
/// ([`crate::provider::Provider::linked`]).
const _: Option<&dyn Backend> = None;
