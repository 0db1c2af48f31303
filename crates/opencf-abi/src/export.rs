//! The PKCS#11 3.2 functions as generic `extern "C"` shells over a [`Backend`].
//!
//! [`crate::pkcs11_module!`] instantiates them for one backend type and exports them under
//! their PKCS#11 names. Each one: catches panics (`CKR_GENERAL_ERROR`), checks that the module
//! is initialized (`CKR_CRYPTOKI_NOT_INITIALIZED`, also in a fork child), converts the
//! caller's pointers into safe values (`CKR_ARGUMENTS_BAD` for NULL required pointers and for
//! lengths above 64 GiB for data, 256 MiB for templates and parameters), calls the backend, and writes the results back following the
//! two-call protocol.
//!
//! These are FFI entry points: the pointers they receive must be valid as the PKCS#11
//! specification requires (NULL is always checked where the specification allows it). They
//! are not meant to be called from Rust except in tests.

#![allow(
    non_snake_case,
    clippy::too_many_arguments,
    clippy::not_unsafe_ptr_arg_deref
)]

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::convert::{
    bytes, bytes_mut, fill_template, in_out, init_args, out_only, put, req, template,
    template_types, write_list, Out,
};
use crate::instance::{self, with_backend};
use crate::params::{mechanism, mechanism_type, MessageIo};
use crate::sys::*;
use crate::{AsyncDone, Backend, CkResult};
use std::sync::Mutex;

/// Runs `f`, turning a panic into `CKR_GENERAL_ERROR` and the result into a `CK_RV`.
pub(crate) fn guard(f: impl FnOnce() -> CkResult<()>) -> CK_RV {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CKR_OK,
        Ok(Err(rv)) => rv,
        Err(_) => CKR_GENERAL_ERROR,
    }
}

/// `guard(with_backend(f))`: the usual body of an exported function.
fn call<B: Backend>(f: impl FnOnce(&B) -> CkResult<()>) -> CK_RV {
    guard(|| with_backend::<B, _>(f))
}

/// A function this layer does not offer: `CKR_FUNCTION_NOT_SUPPORTED` once initialized.
fn not_supported<B: Backend>() -> CK_RV {
    call::<B>(|_| Err(CKR_FUNCTION_NOT_SUPPORTED))
}

// ----- General purpose -----

/// `C_Initialize`.
pub extern "C" fn C_Initialize<B: Backend>(init: *mut c_void) -> CK_RV {
    guard(|| {
        // SAFETY: the caller passes NULL or a CK_C_INITIALIZE_ARGS.
        let args = unsafe { init_args(init as *const CK_C_INITIALIZE_ARGS)? };
        instance::initialize::<B>(&args)
    })
}

/// `C_Finalize`.
pub extern "C" fn C_Finalize<B: Backend>(reserved: *mut c_void) -> CK_RV {
    guard(|| {
        if !reserved.is_null() {
            return Err(CKR_ARGUMENTS_BAD);
        }
        forget_pending(|_| true);
        instance::finalize::<B>()
    })
}

/// `C_GetInfo`.
pub extern "C" fn C_GetInfo<B: Backend>(info: *mut CK_INFO) -> CK_RV {
    call::<B>(|b| {
        let info = req(info)?;
        let v = b.get_info()?;
        // SAFETY: checked non-NULL; the caller provides a CK_INFO.
        unsafe { put(info, v) };
        Ok(())
    })
}

// ----- Slot and token management -----

/// `C_GetSlotList`.
pub extern "C" fn C_GetSlotList<B: Backend>(
    token_present: CK_BBOOL,
    list: *mut CK_SLOT_ID,
    count: *mut CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        let count = req(count)?;
        let slots = b.get_slot_list(token_present != CK_FALSE)?;
        // SAFETY: the caller provides `*count` slots at `list` (or NULL).
        unsafe { write_list(list, count, &slots) }
    })
}

/// `C_GetSlotInfo`.
pub extern "C" fn C_GetSlotInfo<B: Backend>(slot: CK_SLOT_ID, info: *mut CK_SLOT_INFO) -> CK_RV {
    call::<B>(|b| {
        let info = req(info)?;
        let v = b.get_slot_info(slot)?;
        // SAFETY: checked non-NULL.
        unsafe { put(info, v) };
        Ok(())
    })
}

/// `C_GetTokenInfo`.
pub extern "C" fn C_GetTokenInfo<B: Backend>(slot: CK_SLOT_ID, info: *mut CK_TOKEN_INFO) -> CK_RV {
    call::<B>(|b| {
        let info = req(info)?;
        let v = b.get_token_info(slot)?;
        // SAFETY: checked non-NULL.
        unsafe { put(info, v) };
        Ok(())
    })
}

/// `C_GetMechanismList`.
pub extern "C" fn C_GetMechanismList<B: Backend>(
    slot: CK_SLOT_ID,
    list: *mut CK_MECHANISM_TYPE,
    count: *mut CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        let count = req(count)?;
        let mechs = b.get_mechanism_list(slot)?;
        // SAFETY: the caller provides `*count` entries at `list` (or NULL).
        unsafe { write_list(list, count, &mechs) }
    })
}

/// `C_GetMechanismInfo`.
pub extern "C" fn C_GetMechanismInfo<B: Backend>(
    slot: CK_SLOT_ID,
    mech: CK_MECHANISM_TYPE,
    info: *mut CK_MECHANISM_INFO,
) -> CK_RV {
    call::<B>(|b| {
        let info = req(info)?;
        let v = b.get_mechanism_info(slot, mech)?;
        // SAFETY: checked non-NULL.
        unsafe { put(info, v) };
        Ok(())
    })
}

/// `C_InitToken`.
pub extern "C" fn C_InitToken<B: Backend>(
    slot: CK_SLOT_ID,
    pin: *mut CK_UTF8CHAR,
    pin_len: CK_ULONG,
    label: *mut CK_UTF8CHAR,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller provides the PIN and a 32-byte label.
        let (pin, label) = unsafe {
            let pin = bytes(pin, pin_len)?;
            let label = req(label)? as *const [u8; 32];
            (pin, label.read_unaligned())
        };
        b.init_token(slot, pin, &label)
    })
}

/// `C_InitPIN`.
pub extern "C" fn C_InitPIN<B: Backend>(
    session: CK_SESSION_HANDLE,
    pin: *mut CK_UTF8CHAR,
    pin_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller provides the PIN.
        let pin = unsafe { bytes(pin, pin_len)? };
        b.init_pin(session, pin)
    })
}

/// `C_SetPIN`.
pub extern "C" fn C_SetPIN<B: Backend>(
    session: CK_SESSION_HANDLE,
    old: *mut CK_UTF8CHAR,
    old_len: CK_ULONG,
    new: *mut CK_UTF8CHAR,
    new_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller provides both PINs.
        let (old, new) = unsafe { (bytes(old, old_len)?, bytes(new, new_len)?) };
        b.set_pin(session, old, new)
    })
}

// ----- Session management -----

/// `C_OpenSession` (the notification callback is not used).
pub extern "C" fn C_OpenSession<B: Backend>(
    slot: CK_SLOT_ID,
    flags: CK_FLAGS,
    _application: *mut c_void,
    _notify: CK_NOTIFY,
    session: *mut CK_SESSION_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        let session = req(session)?;
        let h = b.open_session(slot, flags)?;
        // A handle used again: its old session's pending outputs are gone with it.
        forget_pending(|o| o.session == h);
        // SAFETY: checked non-NULL.
        unsafe { put(session, h) };
        Ok(())
    })
}

/// `C_CloseSession`.
pub extern "C" fn C_CloseSession<B: Backend>(session: CK_SESSION_HANDLE) -> CK_RV {
    call::<B>(|b| {
        b.close_session(session)?;
        forget_pending(|o| o.session == session);
        Ok(())
    })
}

/// `C_CloseAllSessions`.
pub extern "C" fn C_CloseAllSessions<B: Backend>(slot: CK_SLOT_ID) -> CK_RV {
    call::<B>(|b| {
        b.close_all_sessions(slot)?;
        // The pending outputs of the sessions now closed (this layer does not know which slot
        // a session belongs to: it asks the backend which of them are still open).
        let held: Vec<CK_SESSION_HANDLE> = pending().iter().map(|o| o.session).collect();
        let closed: Vec<CK_SESSION_HANDLE> = held
            .into_iter()
            .filter(|&h| matches!(b.get_session_info(h), Err(CKR_SESSION_HANDLE_INVALID)))
            .collect();
        forget_pending(|o| closed.contains(&o.session));
        Ok(())
    })
}

/// `C_GetSessionInfo`.
pub extern "C" fn C_GetSessionInfo<B: Backend>(
    session: CK_SESSION_HANDLE,
    info: *mut CK_SESSION_INFO,
) -> CK_RV {
    call::<B>(|b| {
        let info = req(info)?;
        let v = b.get_session_info(session)?;
        // SAFETY: checked non-NULL.
        unsafe { put(info, v) };
        Ok(())
    })
}

/// `C_GetOperationState`.
pub extern "C" fn C_GetOperationState<B: Backend>(
    session: CK_SESSION_HANDLE,
    state: *mut CK_BYTE,
    state_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: two-call output buffer from the caller.
    call::<B>(|b| unsafe { out_only(state, state_len, |o| b.get_operation_state(session, o)) })
}

/// `C_SetOperationState`.
pub extern "C" fn C_SetOperationState<B: Backend>(
    session: CK_SESSION_HANDLE,
    state: *mut CK_BYTE,
    state_len: CK_ULONG,
    enc_key: CK_OBJECT_HANDLE,
    auth_key: CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: input buffer from the caller.
        let state = unsafe { bytes(state, state_len)? };
        b.set_operation_state(session, state, enc_key, auth_key)
    })
}

/// `C_Login`.
pub extern "C" fn C_Login<B: Backend>(
    session: CK_SESSION_HANDLE,
    user: CK_USER_TYPE,
    pin: *mut CK_UTF8CHAR,
    pin_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller provides the PIN.
        let pin = unsafe { bytes(pin, pin_len)? };
        b.login(session, user, pin)
    })
}

/// `C_LoginUser` (3.0).
pub extern "C" fn C_LoginUser<B: Backend>(
    session: CK_SESSION_HANDLE,
    user: CK_USER_TYPE,
    pin: *mut CK_UTF8CHAR,
    pin_len: CK_ULONG,
    username: *mut CK_UTF8CHAR,
    username_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller provides the PIN and the user name.
        let (pin, username) = unsafe { (bytes(pin, pin_len)?, bytes(username, username_len)?) };
        b.login_user(session, user, pin, username)
    })
}

/// `C_Logout`.
pub extern "C" fn C_Logout<B: Backend>(session: CK_SESSION_HANDLE) -> CK_RV {
    call::<B>(|b| b.logout(session))
}

/// `C_SessionCancel` (3.0).
pub extern "C" fn C_SessionCancel<B: Backend>(
    session: CK_SESSION_HANDLE,
    flags: CK_FLAGS,
) -> CK_RV {
    call::<B>(|b| b.session_cancel(session, flags))
}

/// `C_GetSessionValidationFlags` (3.2).
pub extern "C" fn C_GetSessionValidationFlags<B: Backend>(
    session: CK_SESSION_HANDLE,
    kind: CK_SESSION_VALIDATION_FLAGS_TYPE,
    flags: *mut CK_FLAGS,
) -> CK_RV {
    call::<B>(|b| {
        let flags = req(flags)?;
        let v = b.get_session_validation_flags(session, kind)?;
        // SAFETY: checked non-NULL.
        unsafe { put(flags, v) };
        Ok(())
    })
}

// ----- Object management -----

/// `C_CreateObject`.
pub extern "C" fn C_CreateObject<B: Backend>(
    session: CK_SESSION_HANDLE,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
    object: *mut CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        let object = req(object)?;
        // SAFETY: the caller's template.
        let tmpl = unsafe { template(tmpl, count)? };
        let h = b.create_object(session, &tmpl)?;
        // SAFETY: checked non-NULL.
        unsafe { put(object, h) };
        Ok(())
    })
}

/// `C_CopyObject`.
pub extern "C" fn C_CopyObject<B: Backend>(
    session: CK_SESSION_HANDLE,
    object: CK_OBJECT_HANDLE,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
    new_object: *mut CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        let new_object = req(new_object)?;
        // SAFETY: the caller's template.
        let tmpl = unsafe { template(tmpl, count)? };
        let h = b.copy_object(session, object, &tmpl)?;
        // SAFETY: checked non-NULL.
        unsafe { put(new_object, h) };
        Ok(())
    })
}

/// `C_DestroyObject`.
pub extern "C" fn C_DestroyObject<B: Backend>(
    session: CK_SESSION_HANDLE,
    object: CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| b.destroy_object(session, object))
}

/// `C_GetObjectSize`.
pub extern "C" fn C_GetObjectSize<B: Backend>(
    session: CK_SESSION_HANDLE,
    object: CK_OBJECT_HANDLE,
    size: *mut CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        let size = req(size)?;
        let v = b.get_object_size(session, object)?;
        // SAFETY: checked non-NULL.
        unsafe { put(size, v) };
        Ok(())
    })
}

/// `C_GetAttributeValue`.
pub extern "C" fn C_GetAttributeValue<B: Backend>(
    session: CK_SESSION_HANDLE,
    object: CK_OBJECT_HANDLE,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller's template.
        let types = unsafe { template_types(tmpl, count)? };
        let answers = b.get_attribute_value(session, object, &types)?;
        if answers.len() != types.len() {
            return Err(CKR_GENERAL_ERROR);
        }
        // SAFETY: the caller's template, with buffers of the lengths it states.
        unsafe { fill_template(tmpl, &answers) }
    })
}

/// `C_SetAttributeValue`.
pub extern "C" fn C_SetAttributeValue<B: Backend>(
    session: CK_SESSION_HANDLE,
    object: CK_OBJECT_HANDLE,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller's template.
        let tmpl = unsafe { template(tmpl, count)? };
        b.set_attribute_value(session, object, &tmpl)
    })
}

/// `C_FindObjectsInit`.
pub extern "C" fn C_FindObjectsInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller's template.
        let tmpl = unsafe { template(tmpl, count)? };
        b.find_objects_init(session, &tmpl)
    })
}

/// `C_FindObjects`.
pub extern "C" fn C_FindObjects<B: Backend>(
    session: CK_SESSION_HANDLE,
    objects: *mut CK_OBJECT_HANDLE,
    max: CK_ULONG,
    count: *mut CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        let objects = req(objects)?;
        let count = req(count)?;
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        let found = b.find_objects(session, max)?;
        if found.len() > max {
            return Err(CKR_GENERAL_ERROR);
        }
        // SAFETY: the caller provides `max` handles at `objects`.
        unsafe {
            for (i, h) in found.iter().enumerate() {
                put(objects.add(i), *h);
            }
            put(count, found.len() as CK_ULONG);
        }
        Ok(())
    })
}

/// `C_FindObjectsFinal`.
pub extern "C" fn C_FindObjectsFinal<B: Backend>(session: CK_SESSION_HANDLE) -> CK_RV {
    call::<B>(|b| b.find_objects_final(session))
}

// ----- Encryption and decryption -----

/// Ends the operation named by `flag` when the ABI layer refused the call's arguments: PKCS#11
/// ends the operation of a single-part, update or final call on every error but
/// `CKR_BUFFER_TOO_SMALL` (and `C_Verify`, `C_VerifyFinal` on every error), and the backend
/// never saw this call.
fn ended_on_error<B: Backend, T>(
    b: &B,
    session: CK_SESSION_HANDLE,
    flag: CK_FLAGS,
    r: CkResult<T>,
) -> CkResult<T> {
    if matches!(r, Err(CKR_ARGUMENTS_BAD)) {
        let _ = b.session_cancel(session, flag);
    }
    r
}

/// PKCS#11 3.0: an `*Init` call with a NULL mechanism ends the active operation named by
/// `flag`. A backend without `C_SessionCancel` keeps the 2.40 answer, `CKR_ARGUMENTS_BAD`.
fn cancel_operation<B: Backend>(b: &B, session: CK_SESSION_HANDLE, flag: CK_FLAGS) -> CkResult<()> {
    match b.session_cancel(session, flag) {
        Err(CKR_FUNCTION_NOT_SUPPORTED) => Err(CKR_ARGUMENTS_BAD),
        r => r,
    }
}

/// `C_MessageEncryptInit`/`C_MessageDecryptInit`: each message brings its own parameters, so
/// a parameter given here (some consumers pass the first message's) is ignored.
fn message_init_with<B: Backend>(
    session: CK_SESSION_HANDLE,
    cancel: CK_FLAGS,
    mech: *mut CK_MECHANISM,
    f: impl FnOnce(&B, &crate::Mechanism) -> CkResult<()>,
) -> CK_RV {
    call::<B>(|b| {
        if !b.offers(cancel) {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        if mech.is_null() {
            return cancel_operation(b, session, cancel);
        }
        // SAFETY: the caller's mechanism.
        let m = unsafe { mechanism_type(mech)? };
        f(b, &crate::Mechanism::new(m))
    })
}

/// Reads the mechanism and calls an `*Init` method; a NULL mechanism ends the operation named
/// by `cancel` (PKCS#11 3.0).
fn init_with<B: Backend>(
    session: CK_SESSION_HANDLE,
    cancel: CK_FLAGS,
    mech: *mut CK_MECHANISM,
    f: impl FnOnce(&B, crate::RawMechanism<'_>) -> CkResult<()>,
) -> CK_RV {
    call::<B>(|b| {
        if !b.offers(cancel) {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        if mech.is_null() {
            return cancel_operation(b, session, cancel);
        }
        // SAFETY: the caller's mechanism, valid for this call; the value cannot outlive it.
        let mech = unsafe { crate::RawMechanism::new(mech)? };
        f(b, mech)
    })
}

/// `C_EncryptInit`.
pub extern "C" fn C_EncryptInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    key: CK_OBJECT_HANDLE,
) -> CK_RV {
    init_with::<B>(session, CKF_ENCRYPT, mech, |b, m| {
        b.encrypt_init_raw(session, m, key)
    })
}

/// `C_Encrypt`.
pub extern "C" fn C_Encrypt<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_ENCRYPT, unsafe {
            in_out(data, data_len, out, out_len, |d, o| {
                b.encrypt(session, d, o)
            })
        })
    })
}

/// `C_EncryptUpdate`.
pub extern "C" fn C_EncryptUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_ENCRYPT, unsafe {
            in_out(data, data_len, out, out_len, |d, o| {
                b.encrypt_update(session, d, o)
            })
        })
    })
}

/// `C_EncryptFinal`.
pub extern "C" fn C_EncryptFinal<B: Backend>(
    session: CK_SESSION_HANDLE,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: two-call output buffer from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_ENCRYPT, unsafe {
            out_only(out, out_len, |o| b.encrypt_final(session, o))
        })
    })
}

/// `C_DecryptInit`.
pub extern "C" fn C_DecryptInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    key: CK_OBJECT_HANDLE,
) -> CK_RV {
    init_with::<B>(session, CKF_DECRYPT, mech, |b, m| {
        b.decrypt_init_raw(session, m, key)
    })
}

/// `C_Decrypt`.
pub extern "C" fn C_Decrypt<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| {
        let r = ended_on_error(b, session, CKF_DECRYPT, unsafe {
            in_out(data, data_len, out, out_len, |d, o| {
                b.decrypt(session, d, o)
            })
        });
        // SAFETY: the caller's output buffer and length, as `in_out` read them.
        unsafe { keep_pending(r, session, "C_Decrypt", out, out_len) }
    })
}

/// `C_DecryptUpdate`.
pub extern "C" fn C_DecryptUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_DECRYPT, unsafe {
            in_out(data, data_len, out, out_len, |d, o| {
                b.decrypt_update(session, d, o)
            })
        })
    })
}

/// `C_DecryptFinal`.
pub extern "C" fn C_DecryptFinal<B: Backend>(
    session: CK_SESSION_HANDLE,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: two-call output buffer from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_DECRYPT, unsafe {
            out_only(out, out_len, |o| b.decrypt_final(session, o))
        })
    })
}

// ----- Message-based encryption and decryption (3.0) -----

/// `C_MessageEncryptInit`.
pub extern "C" fn C_MessageEncryptInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    key: CK_OBJECT_HANDLE,
) -> CK_RV {
    message_init_with::<B>(session, CKF_MESSAGE_ENCRYPT, mech, |b, m| {
        b.message_encrypt_init(session, m, key)
    })
}

/// `C_EncryptMessage`: on success the generated IV and the tag are copied back.
pub extern "C" fn C_EncryptMessage<B: Backend>(
    session: CK_SESSION_HANDLE,
    param: *mut c_void,
    param_len: CK_ULONG,
    aad: *mut CK_BYTE,
    aad_len: CK_ULONG,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: message parameters, input and two-call output buffers from the caller.
        unsafe {
            let mut io = MessageIo::read(param, param_len, true)?;
            let out = Out::new(out, out_len)?;
            let aad = out.input(aad, aad_len)?;
            let data = out.input(data, data_len)?;
            let query = out.is_query();
            out.run(|o| b.encrypt_message(session, &mut io.params, &aad, &data, o))?;
            if !query {
                io.write_back(true, true);
            }
            Ok(())
        }
    })
}

/// `C_EncryptMessageBegin`: on success a generated IV is copied back.
pub extern "C" fn C_EncryptMessageBegin<B: Backend>(
    session: CK_SESSION_HANDLE,
    param: *mut c_void,
    param_len: CK_ULONG,
    aad: *mut CK_BYTE,
    aad_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: message parameters and input buffer from the caller.
        unsafe {
            let mut io = MessageIo::read(param, param_len, true)?;
            let aad = bytes(aad, aad_len)?;
            b.encrypt_message_begin(session, &mut io.params, aad)?;
            io.write_back(true, false);
            Ok(())
        }
    })
}

/// `C_EncryptMessageNext`: with `CKF_END_OF_MESSAGE`, the tag is copied back on success.
pub extern "C" fn C_EncryptMessageNext<B: Backend>(
    session: CK_SESSION_HANDLE,
    param: *mut c_void,
    param_len: CK_ULONG,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
    flags: CK_FLAGS,
) -> CK_RV {
    call::<B>(|b| {
        let last = flags & CKF_END_OF_MESSAGE != 0;
        // SAFETY: message parameters, input and two-call output buffers from the caller.
        unsafe {
            let mut io = MessageIo::read(param, param_len, true)?;
            let out = Out::new(out, out_len)?;
            let data = out.input(data, data_len)?;
            let query = out.is_query();
            out.run(|o| b.encrypt_message_next(session, &mut io.params, &data, o, last))?;
            if last && !query {
                io.write_back(false, true);
            }
            Ok(())
        }
    })
}

/// `C_MessageEncryptFinal`.
pub extern "C" fn C_MessageEncryptFinal<B: Backend>(session: CK_SESSION_HANDLE) -> CK_RV {
    call::<B>(|b| b.message_encrypt_final(session))
}

/// `C_MessageDecryptInit`.
pub extern "C" fn C_MessageDecryptInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    key: CK_OBJECT_HANDLE,
) -> CK_RV {
    message_init_with::<B>(session, CKF_MESSAGE_DECRYPT, mech, |b, m| {
        b.message_decrypt_init(session, m, key)
    })
}

/// `C_DecryptMessage` (the tag is input).
pub extern "C" fn C_DecryptMessage<B: Backend>(
    session: CK_SESSION_HANDLE,
    param: *mut c_void,
    param_len: CK_ULONG,
    aad: *mut CK_BYTE,
    aad_len: CK_ULONG,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: message parameters, input and two-call output buffers from the caller.
        unsafe {
            let mut io = MessageIo::read(param, param_len, false)?;
            let out = Out::new(out, out_len)?;
            let aad = out.input(aad, aad_len)?;
            let data = out.input(data, data_len)?;
            out.run(|o| b.decrypt_message(session, &mut io.params, &aad, &data, o))
        }
    })
}

/// `C_DecryptMessageBegin`.
pub extern "C" fn C_DecryptMessageBegin<B: Backend>(
    session: CK_SESSION_HANDLE,
    param: *mut c_void,
    param_len: CK_ULONG,
    aad: *mut CK_BYTE,
    aad_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: message parameters and input buffer from the caller.
        unsafe {
            let mut io = MessageIo::read(param, param_len, false)?;
            let aad = bytes(aad, aad_len)?;
            b.decrypt_message_begin(session, &mut io.params, aad)
        }
    })
}

/// `C_DecryptMessageNext`.
pub extern "C" fn C_DecryptMessageNext<B: Backend>(
    session: CK_SESSION_HANDLE,
    param: *mut c_void,
    param_len: CK_ULONG,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
    flags: CK_FLAGS,
) -> CK_RV {
    call::<B>(|b| {
        let last = flags & CKF_END_OF_MESSAGE != 0;
        // SAFETY: message parameters, input and two-call output buffers from the caller.
        unsafe {
            let mut io = MessageIo::read(param, param_len, false)?;
            let out = Out::new(out, out_len)?;
            let data = out.input(data, data_len)?;
            out.run(|o| b.decrypt_message_next(session, &mut io.params, &data, o, last))
        }
    })
}

/// `C_MessageDecryptFinal`.
pub extern "C" fn C_MessageDecryptFinal<B: Backend>(session: CK_SESSION_HANDLE) -> CK_RV {
    call::<B>(|b| b.message_decrypt_final(session))
}

// ----- Message digesting -----

/// `C_DigestInit`.
pub extern "C" fn C_DigestInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
) -> CK_RV {
    init_with::<B>(session, CKF_DIGEST, mech, |b, m| {
        b.digest_init_raw(session, m)
    })
}

/// `C_Digest`.
pub extern "C" fn C_Digest<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_DIGEST, unsafe {
            in_out(data, data_len, out, out_len, |d, o| b.digest(session, d, o))
        })
    })
}

/// `C_DigestUpdate`.
pub extern "C" fn C_DigestUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: input buffer from the caller.
        let data = ended_on_error(b, session, CKF_DIGEST, unsafe { bytes(data, data_len) })?;
        b.digest_update(session, data)
    })
}

/// `C_DigestKey`.
pub extern "C" fn C_DigestKey<B: Backend>(
    session: CK_SESSION_HANDLE,
    key: CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| b.digest_key(session, key))
}

/// `C_DigestFinal`.
pub extern "C" fn C_DigestFinal<B: Backend>(
    session: CK_SESSION_HANDLE,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: two-call output buffer from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_DIGEST, unsafe {
            out_only(out, out_len, |o| b.digest_final(session, o))
        })
    })
}

// ----- Signing and MACing -----

/// `C_SignInit`.
pub extern "C" fn C_SignInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    key: CK_OBJECT_HANDLE,
) -> CK_RV {
    init_with::<B>(session, CKF_SIGN, mech, |b, m| {
        b.sign_init_raw(session, m, key)
    })
}

/// `C_Sign`.
pub extern "C" fn C_Sign<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    sig: *mut CK_BYTE,
    sig_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| {
        let r = ended_on_error(b, session, CKF_SIGN, unsafe {
            in_out(data, data_len, sig, sig_len, |d, o| b.sign(session, d, o))
        });
        // SAFETY: the caller's output buffer and length, as `in_out` read them.
        unsafe { keep_pending(r, session, "C_Sign", sig, sig_len) }
    })
}

/// `C_SignUpdate`.
pub extern "C" fn C_SignUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: input buffer from the caller.
        let data = ended_on_error(b, session, CKF_SIGN, unsafe { bytes(data, data_len) })?;
        b.sign_update(session, data)
    })
}

/// `C_SignFinal`.
pub extern "C" fn C_SignFinal<B: Backend>(
    session: CK_SESSION_HANDLE,
    sig: *mut CK_BYTE,
    sig_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: two-call output buffer from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_SIGN, unsafe {
            out_only(sig, sig_len, |o| b.sign_final(session, o))
        })
    })
}

/// `C_SignRecoverInit`.
pub extern "C" fn C_SignRecoverInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    key: CK_OBJECT_HANDLE,
) -> CK_RV {
    init_with::<B>(session, CKF_SIGN_RECOVER, mech, |b, m| {
        b.sign_recover_init(session, &m.parse()?, key)
    })
}

/// `C_SignRecover`.
pub extern "C" fn C_SignRecover<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    sig: *mut CK_BYTE,
    sig_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_SIGN_RECOVER, unsafe {
            in_out(data, data_len, sig, sig_len, |d, o| {
                b.sign_recover(session, d, o)
            })
        })
    })
}

// ----- Verifying signatures and MACs -----

/// `C_VerifyInit`.
pub extern "C" fn C_VerifyInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    key: CK_OBJECT_HANDLE,
) -> CK_RV {
    init_with::<B>(session, CKF_VERIFY, mech, |b, m| {
        b.verify_init_raw(session, m, key)
    })
}

/// `C_Verify`.
pub extern "C" fn C_Verify<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    sig: *mut CK_BYTE,
    sig_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: input buffers from the caller.
        let (data, sig) = ended_on_error(b, session, CKF_VERIFY, unsafe {
            bytes(data, data_len).and_then(|d| Ok((d, bytes(sig, sig_len)?)))
        })?;
        b.verify(session, data, sig)
    })
}

/// `C_VerifyUpdate`.
pub extern "C" fn C_VerifyUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: input buffer from the caller.
        let data = ended_on_error(b, session, CKF_VERIFY, unsafe { bytes(data, data_len) })?;
        b.verify_update(session, data)
    })
}

/// `C_VerifyFinal`.
pub extern "C" fn C_VerifyFinal<B: Backend>(
    session: CK_SESSION_HANDLE,
    sig: *mut CK_BYTE,
    sig_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: input buffer from the caller.
        let sig = ended_on_error(b, session, CKF_VERIFY, unsafe { bytes(sig, sig_len) })?;
        b.verify_final(session, sig)
    })
}

/// `C_VerifyRecoverInit`.
pub extern "C" fn C_VerifyRecoverInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    key: CK_OBJECT_HANDLE,
) -> CK_RV {
    init_with::<B>(session, CKF_VERIFY_RECOVER, mech, |b, m| {
        b.verify_recover_init(session, &m.parse()?, key)
    })
}

/// `C_VerifyRecover`.
pub extern "C" fn C_VerifyRecover<B: Backend>(
    session: CK_SESSION_HANDLE,
    sig: *mut CK_BYTE,
    sig_len: CK_ULONG,
    data: *mut CK_BYTE,
    data_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| {
        ended_on_error(b, session, CKF_VERIFY_RECOVER, unsafe {
            in_out(sig, sig_len, data, data_len, |s, o| {
                b.verify_recover(session, s, o)
            })
        })
    })
}

/// `C_VerifySignatureInit` (3.2).
pub extern "C" fn C_VerifySignatureInit<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    key: CK_OBJECT_HANDLE,
    sig: *mut CK_BYTE,
    sig_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        if !b.offers(CKF_VERIFY) {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        // SAFETY: the caller's mechanism, valid for this call (the value cannot outlive it),
        // and signature.
        let (mech, sig) = unsafe { (crate::RawMechanism::new(mech)?, bytes(sig, sig_len)?) };
        b.verify_signature_init_raw(session, mech, key, sig)
    })
}

/// `C_VerifySignature` (3.2).
pub extern "C" fn C_VerifySignature<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: input buffer from the caller.
        let data = ended_on_error(b, session, CKF_VERIFY, unsafe { bytes(data, data_len) })?;
        b.verify_signature(session, data)
    })
}

/// `C_VerifySignatureUpdate` (3.2).
pub extern "C" fn C_VerifySignatureUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: input buffer from the caller.
        let data = ended_on_error(b, session, CKF_VERIFY, unsafe { bytes(data, data_len) })?;
        b.verify_signature_update(session, data)
    })
}

/// `C_VerifySignatureFinal` (3.2).
pub extern "C" fn C_VerifySignatureFinal<B: Backend>(session: CK_SESSION_HANDLE) -> CK_RV {
    call::<B>(|b| b.verify_signature_final(session))
}

// ----- Message-based signing and verifying (3.0): not offered -----

/// `C_MessageSignInit`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_MessageSignInit<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _mech: *mut CK_MECHANISM,
    _key: CK_OBJECT_HANDLE,
) -> CK_RV {
    not_supported::<B>()
}

/// `C_SignMessage`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_SignMessage<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _param: *mut c_void,
    _param_len: CK_ULONG,
    _data: *mut CK_BYTE,
    _data_len: CK_ULONG,
    _sig: *mut CK_BYTE,
    _sig_len: *mut CK_ULONG,
) -> CK_RV {
    not_supported::<B>()
}

/// `C_SignMessageBegin`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_SignMessageBegin<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _param: *mut c_void,
    _param_len: CK_ULONG,
) -> CK_RV {
    not_supported::<B>()
}

/// `C_SignMessageNext`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_SignMessageNext<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _param: *mut c_void,
    _param_len: CK_ULONG,
    _data: *mut CK_BYTE,
    _data_len: CK_ULONG,
    _sig: *mut CK_BYTE,
    _sig_len: *mut CK_ULONG,
) -> CK_RV {
    not_supported::<B>()
}

/// `C_MessageSignFinal`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_MessageSignFinal<B: Backend>(_session: CK_SESSION_HANDLE) -> CK_RV {
    not_supported::<B>()
}

/// `C_MessageVerifyInit`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_MessageVerifyInit<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _mech: *mut CK_MECHANISM,
    _key: CK_OBJECT_HANDLE,
) -> CK_RV {
    not_supported::<B>()
}

/// `C_VerifyMessage`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_VerifyMessage<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _param: *mut c_void,
    _param_len: CK_ULONG,
    _data: *mut CK_BYTE,
    _data_len: CK_ULONG,
    _sig: *mut CK_BYTE,
    _sig_len: CK_ULONG,
) -> CK_RV {
    not_supported::<B>()
}

/// `C_VerifyMessageBegin`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_VerifyMessageBegin<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _param: *mut c_void,
    _param_len: CK_ULONG,
) -> CK_RV {
    not_supported::<B>()
}

/// `C_VerifyMessageNext`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_VerifyMessageNext<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _param: *mut c_void,
    _param_len: CK_ULONG,
    _data: *mut CK_BYTE,
    _data_len: CK_ULONG,
    _sig: *mut CK_BYTE,
    _sig_len: CK_ULONG,
) -> CK_RV {
    not_supported::<B>()
}

/// `C_MessageVerifyFinal`: `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_MessageVerifyFinal<B: Backend>(_session: CK_SESSION_HANDLE) -> CK_RV {
    not_supported::<B>()
}

// ----- Dual-function cryptographic operations -----

/// `C_DigestEncryptUpdate`.
pub extern "C" fn C_DigestEncryptUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| unsafe {
        in_out(data, data_len, out, out_len, |d, o| {
            b.digest_encrypt_update(session, d, o)
        })
    })
}

/// `C_DecryptDigestUpdate`.
pub extern "C" fn C_DecryptDigestUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| unsafe {
        in_out(data, data_len, out, out_len, |d, o| {
            b.decrypt_digest_update(session, d, o)
        })
    })
}

/// `C_SignEncryptUpdate`.
pub extern "C" fn C_SignEncryptUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| unsafe {
        in_out(data, data_len, out, out_len, |d, o| {
            b.sign_encrypt_update(session, d, o)
        })
    })
}

/// `C_DecryptVerifyUpdate`.
pub extern "C" fn C_DecryptVerifyUpdate<B: Backend>(
    session: CK_SESSION_HANDLE,
    data: *mut CK_BYTE,
    data_len: CK_ULONG,
    out: *mut CK_BYTE,
    out_len: *mut CK_ULONG,
) -> CK_RV {
    // SAFETY: input and two-call output buffers from the caller.
    call::<B>(|b| unsafe {
        in_out(data, data_len, out, out_len, |d, o| {
            b.decrypt_verify_update(session, d, o)
        })
    })
}

// ----- Key management -----

/// `C_GenerateKey`.
pub extern "C" fn C_GenerateKey<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
    key: *mut CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        let key = req(key)?;
        // SAFETY: the caller's mechanism and template.
        let (mech, tmpl) = unsafe { (mechanism(mech)?, template(tmpl, count)?) };
        let h = b.generate_key(session, &mech, &tmpl)?;
        // SAFETY: checked non-NULL.
        unsafe { put(key, h) };
        Ok(())
    })
}

/// `C_GenerateKeyPair`.
pub extern "C" fn C_GenerateKeyPair<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    public_tmpl: *mut CK_ATTRIBUTE,
    public_count: CK_ULONG,
    private_tmpl: *mut CK_ATTRIBUTE,
    private_count: CK_ULONG,
    public_key: *mut CK_OBJECT_HANDLE,
    private_key: *mut CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        let public_key = req(public_key)?;
        let private_key = req(private_key)?;
        // SAFETY: the caller's mechanism and templates.
        let (mech, public_tmpl, private_tmpl) = unsafe {
            (
                mechanism(mech)?,
                template(public_tmpl, public_count)?,
                template(private_tmpl, private_count)?,
            )
        };
        let (public, private) = b.generate_key_pair(session, &mech, &public_tmpl, &private_tmpl)?;
        // SAFETY: checked non-NULL.
        unsafe {
            put(public_key, public);
            put(private_key, private);
        }
        Ok(())
    })
}

/// `C_WrapKey`.
pub extern "C" fn C_WrapKey<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    wrapping_key: CK_OBJECT_HANDLE,
    key: CK_OBJECT_HANDLE,
    wrapped: *mut CK_BYTE,
    wrapped_len: *mut CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller's mechanism and two-call output buffer.
        unsafe {
            let mech = mechanism(mech)?;
            out_only(wrapped, wrapped_len, |o| {
                b.wrap_key(session, &mech, wrapping_key, key, o)
            })
        }
    })
}

/// `C_UnwrapKey`.
pub extern "C" fn C_UnwrapKey<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    unwrapping_key: CK_OBJECT_HANDLE,
    wrapped: *mut CK_BYTE,
    wrapped_len: CK_ULONG,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
    key: *mut CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        let key = req(key)?;
        // SAFETY: the caller's mechanism, input buffer and template.
        let (mech, wrapped, tmpl) = unsafe {
            (
                mechanism(mech)?,
                bytes(wrapped, wrapped_len)?,
                template(tmpl, count)?,
            )
        };
        let h = b.unwrap_key(session, &mech, unwrapping_key, wrapped, &tmpl)?;
        // SAFETY: checked non-NULL.
        unsafe { put(key, h) };
        Ok(())
    })
}

/// `C_DeriveKey`.
pub extern "C" fn C_DeriveKey<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    base_key: CK_OBJECT_HANDLE,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
    key: *mut CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        let key = req(key)?;
        // SAFETY: the caller's mechanism and template.
        let (mech, tmpl) = unsafe { (mechanism(mech)?, template(tmpl, count)?) };
        let h = b.derive_key(session, &mech, base_key, &tmpl)?;
        // SAFETY: checked non-NULL.
        unsafe { put(key, h) };
        Ok(())
    })
}

/// `C_EncapsulateKey` (3.2): the ciphertext follows the two-call protocol; `*key` is written
/// only once a key was made.
pub extern "C" fn C_EncapsulateKey<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    public_key: CK_OBJECT_HANDLE,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
    ciphertext: *mut CK_BYTE,
    ciphertext_len: *mut CK_ULONG,
    key: *mut CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        let key = req(key)?;
        // SAFETY: the caller's mechanism, template and two-call output buffer.
        unsafe {
            let mech = mechanism(mech)?;
            let tmpl = template(tmpl, count)?;
            let made = Out::new(ciphertext, ciphertext_len)?
                .run(|o| b.encapsulate_key(session, &mech, public_key, &tmpl, o))?;
            if let Some(h) = made {
                put(key, h);
            }
        }
        Ok(())
    })
}

/// `C_DecapsulateKey` (3.2).
pub extern "C" fn C_DecapsulateKey<B: Backend>(
    session: CK_SESSION_HANDLE,
    mech: *mut CK_MECHANISM,
    private_key: CK_OBJECT_HANDLE,
    tmpl: *mut CK_ATTRIBUTE,
    count: CK_ULONG,
    ciphertext: *mut CK_BYTE,
    ciphertext_len: CK_ULONG,
    key: *mut CK_OBJECT_HANDLE,
) -> CK_RV {
    call::<B>(|b| {
        let key = req(key)?;
        // SAFETY: the caller's mechanism, template and input buffer.
        let (mech, tmpl, ciphertext) = unsafe {
            (
                mechanism(mech)?,
                template(tmpl, count)?,
                bytes(ciphertext, ciphertext_len)?,
            )
        };
        let h = b.decapsulate_key(session, &mech, private_key, &tmpl, ciphertext)?;
        // SAFETY: checked non-NULL.
        unsafe { put(key, h) };
        Ok(())
    })
}

/// `C_WrapKeyAuthenticated` (3.2): `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_WrapKeyAuthenticated<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _mech: *mut CK_MECHANISM,
    _wrapping_key: CK_OBJECT_HANDLE,
    _key: CK_OBJECT_HANDLE,
    _aad: *mut CK_BYTE,
    _aad_len: CK_ULONG,
    _wrapped: *mut CK_BYTE,
    _wrapped_len: *mut CK_ULONG,
) -> CK_RV {
    not_supported::<B>()
}

/// `C_UnwrapKeyAuthenticated` (3.2): `CKR_FUNCTION_NOT_SUPPORTED`.
pub extern "C" fn C_UnwrapKeyAuthenticated<B: Backend>(
    _session: CK_SESSION_HANDLE,
    _mech: *mut CK_MECHANISM,
    _unwrapping_key: CK_OBJECT_HANDLE,
    _wrapped: *mut CK_BYTE,
    _wrapped_len: CK_ULONG,
    _tmpl: *mut CK_ATTRIBUTE,
    _count: CK_ULONG,
    _aad: *mut CK_BYTE,
    _aad_len: CK_ULONG,
    _key: *mut CK_OBJECT_HANDLE,
) -> CK_RV {
    not_supported::<B>()
}

// ----- Random number generation -----

/// `C_SeedRandom`.
pub extern "C" fn C_SeedRandom<B: Backend>(
    session: CK_SESSION_HANDLE,
    seed: *mut CK_BYTE,
    seed_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: input buffer from the caller.
        let seed = unsafe { bytes(seed, seed_len)? };
        b.seed_random(session, seed)
    })
}

/// `C_GenerateRandom`: the backend writes straight into the caller's buffer.
pub extern "C" fn C_GenerateRandom<B: Backend>(
    session: CK_SESSION_HANDLE,
    out: *mut CK_BYTE,
    out_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: output buffer from the caller.
        let out = unsafe { bytes_mut(out, out_len)? };
        b.generate_random(session, out)
    })
}

// ----- Parallel function management (legacy) -----

/// `C_GetFunctionStatus`: `CKR_FUNCTION_NOT_PARALLEL` for a valid session.
pub extern "C" fn C_GetFunctionStatus<B: Backend>(session: CK_SESSION_HANDLE) -> CK_RV {
    call::<B>(|b| b.get_function_status(session))
}

/// `C_CancelFunction`: `CKR_FUNCTION_NOT_PARALLEL` for a valid session.
pub extern "C" fn C_CancelFunction<B: Backend>(session: CK_SESSION_HANDLE) -> CK_RV {
    call::<B>(|b| b.cancel_function(session))
}

/// `C_WaitForSlotEvent`.
pub extern "C" fn C_WaitForSlotEvent<B: Backend>(
    flags: CK_FLAGS,
    slot: *mut CK_SLOT_ID,
    reserved: *mut c_void,
) -> CK_RV {
    call::<B>(|b| {
        let slot = req(slot)?;
        if !reserved.is_null() {
            return Err(CKR_ARGUMENTS_BAD);
        }
        let s = b.wait_for_slot_event(flags & CKF_DONT_BLOCK != 0)?;
        // SAFETY: checked non-NULL.
        unsafe { put(slot, s) };
        Ok(())
    })
}

// ----- Asynchronous functions (3.2) -----
//
// In a session opened with `CKF_ASYNC_SESSION`, `C_Sign` and `C_Decrypt` may answer
// `CKR_PENDING` once their input is taken and their output length checked. This layer keeps
// the caller's output buffer of that call; `C_AsyncComplete` asks the backend, writes the
// output there when the operation is done, and reports the buffer in `CK_ASYNC_DATA`.

/// The caller's output buffer of a call that answered `CKR_PENDING`.
struct PendingOut {
    session: CK_SESSION_HANDLE,
    function: &'static str,
    /// The buffer's address and capacity (the address as an integer: the table is shared
    /// between threads; only `C_AsyncComplete` writes through it, as the caller expects).
    p: usize,
    cap: usize,
}

/// Pending outputs of this module, at most one per session and function.
static PENDING: Mutex<Vec<PendingOut>> = Mutex::new(Vec::new());

fn pending() -> std::sync::MutexGuard<'static, Vec<PendingOut>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops the pending outputs that `gone` names (their session is closed, or the module
/// finalized).
fn forget_pending(gone: impl Fn(&PendingOut) -> bool) {
    pending().retain(|o| !gone(o));
}

/// After a two-call output function: on `CKR_PENDING`, records the caller's buffer for
/// `C_AsyncComplete`. A size query never pends (the backend answers it at once).
///
/// # Safety
/// `pul` as `in_out` read it: NULL or valid for reading.
unsafe fn keep_pending(
    r: CkResult<()>,
    session: CK_SESSION_HANDLE,
    function: &'static str,
    p: *mut u8,
    pul: *mut CK_ULONG,
) -> CkResult<()> {
    if r != Err(CKR_PENDING) {
        return r;
    }
    if p.is_null() || pul.is_null() {
        return Err(CKR_GENERAL_ERROR);
    }
    // SAFETY: per the function's contract.
    let cap = unsafe { pul.read_unaligned() } as usize;
    let mut t = pending();
    t.retain(|o| !(o.session == session && o.function == function));
    t.push(PendingOut {
        session,
        function,
        p: p as usize,
        cap,
    });
    r
}

/// The longest function name read from a caller.
const MAX_FUNCTION_NAME: usize = 64;

/// A function name from the caller: NUL-terminated UTF-8 of at most [`MAX_FUNCTION_NAME`]
/// bytes, else `CKR_ARGUMENTS_BAD`.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string.
unsafe fn function_name(p: *const CK_UTF8CHAR) -> CkResult<String> {
    if p.is_null() {
        return Err(CKR_ARGUMENTS_BAD);
    }
    let mut name = Vec::new();
    for i in 0..=MAX_FUNCTION_NAME {
        // SAFETY: per the function's contract, bytes up to the NUL are readable.
        let c = unsafe { p.add(i).read() };
        if c == 0 {
            return String::from_utf8(name).map_err(|_| CKR_ARGUMENTS_BAD);
        }
        name.push(c);
    }
    Err(CKR_ARGUMENTS_BAD)
}

/// `C_AsyncComplete`.
pub extern "C" fn C_AsyncComplete<B: Backend>(
    session: CK_SESSION_HANDLE,
    function_name_p: *mut CK_UTF8CHAR,
    result: *mut CK_ASYNC_DATA,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller's NUL-terminated name.
        let name = unsafe { function_name(function_name_p)? };
        // Checked before the backend is asked: a completion is delivered once, and a NULL
        // result would lose it.
        if result.is_null() {
            return Err(CKR_ARGUMENTS_BAD);
        }
        let done = b.async_complete(session, &name);
        if done == Ok(AsyncDone::Pending) {
            return Err(CKR_PENDING);
        }
        let out = {
            let mut t = pending();
            let i = t
                .iter()
                .position(|o| o.session == session && o.function == name);
            i.map(|i| t.swap_remove(i))
        };
        let report = |out: &PendingOut, len: usize| {
            // SAFETY: the caller's structure (checked non-NULL).
            unsafe {
                std::ptr::addr_of_mut!((*result).pValue).write_unaligned(out.p as *mut u8);
                std::ptr::addr_of_mut!((*result).ulValue).write_unaligned(len as CK_ULONG);
            }
        };
        let (done, out) = match (done, out) {
            (Ok(d), Some(out)) => (d, out),
            (Ok(_), None) => return Err(CKR_GENERAL_ERROR),
            // The operation ended with an error: the caller gets its buffer back to free it.
            (Err(e), out) => {
                if let Some(out) = &out {
                    report(out, 0);
                }
                return Err(e);
            }
        };
        let len = match done {
            AsyncDone::Output(bytes) if bytes.len() <= out.cap => {
                // SAFETY: the caller's buffer of the original call, which it keeps until the
                // operation completes, `out.cap` bytes long.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.p as *mut u8, bytes.len())
                };
                bytes.len()
            }
            AsyncDone::Output(_) => return Err(CKR_GENERAL_ERROR),
            AsyncDone::Written(n) if n <= out.cap => n,
            _ => return Err(CKR_GENERAL_ERROR),
        };
        report(&out, len);
        Ok(())
    })
}

/// `C_AsyncGetID`.
pub extern "C" fn C_AsyncGetID<B: Backend>(
    session: CK_SESSION_HANDLE,
    function_name_p: *mut CK_UTF8CHAR,
    id: *mut CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller's NUL-terminated name.
        let name = unsafe { function_name(function_name_p)? };
        let id = req(id)?;
        let v = b.async_get_id(session, &name)?;
        // SAFETY: checked non-NULL.
        unsafe { put(id, v) };
        Ok(())
    })
}

/// `C_AsyncJoin`.
pub extern "C" fn C_AsyncJoin<B: Backend>(
    session: CK_SESSION_HANDLE,
    function_name_p: *mut CK_UTF8CHAR,
    id: CK_ULONG,
    _data: *mut CK_BYTE,
    _data_len: CK_ULONG,
) -> CK_RV {
    call::<B>(|b| {
        // SAFETY: the caller's NUL-terminated name.
        let name = unsafe { function_name(function_name_p)? };
        b.async_join(session, &name, id)
    })
}
