//! The exported C functions, called as a C application would: through the symbols that
//! `pkcs11_module!` defines and through the function tables.

mod common;

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

use common::*;
use opencf_abi::sys::*;
use opencf_abi::{decode_template, Attribute, MechParam, Mechanism};

opencf_abi::pkcs11_module!(common::Dummy);

/// The module instance is process-global: tests that initialize it run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    C_Finalize(null_mut());
    guard
}

/// Serializes, then initializes; finalizes when dropped.
struct Initialized(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Drop for Initialized {
    fn drop(&mut self) {
        C_Finalize(null_mut());
    }
}

fn initialized() -> Initialized {
    let guard = serial();
    assert_eq!(C_Initialize(null_mut()), CKR_OK);
    Initialized(guard)
}

/// Some non-NULL pointer, for arguments that must be NULL.
fn non_null() -> *mut c_void {
    static BYTE: u8 = 0;
    &BYTE as *const u8 as *mut c_void
}

fn attr(kind: CK_ATTRIBUTE_TYPE, buf: *mut u8, len: usize) -> CK_ATTRIBUTE {
    CK_ATTRIBUTE {
        type_: kind,
        pValue: buf as *mut c_void,
        ulValueLen: len as CK_ULONG,
    }
}

fn last_mech() -> Mechanism {
    opencf_abi::instance::with_backend::<Dummy, _>(|b| Ok(b.last_mech.lock().unwrap().clone()))
        .unwrap()
        .expect("a mechanism was recorded")
}

#[test]
fn not_initialized_comes_first() {
    let _g = serial();
    let mut info = CK_INFO::default();
    assert_eq!(C_GetInfo(&mut info), CKR_CRYPTOKI_NOT_INITIALIZED);
    // Before any argument check.
    assert_eq!(C_GetInfo(null_mut()), CKR_CRYPTOKI_NOT_INITIALIZED);
    assert_eq!(
        C_GetSlotList(CK_FALSE, null_mut(), null_mut()),
        CKR_CRYPTOKI_NOT_INITIALIZED
    );
    assert_eq!(
        C_Encrypt(SESSION, null_mut(), 5, null_mut(), null_mut()),
        CKR_CRYPTOKI_NOT_INITIALIZED
    );
    assert_eq!(
        C_SignMessageBegin(SESSION, null_mut(), 0),
        CKR_CRYPTOKI_NOT_INITIALIZED
    );
    assert_eq!(C_GetFunctionStatus(SESSION), CKR_CRYPTOKI_NOT_INITIALIZED);
    assert_eq!(
        C_AsyncJoin(SESSION, null_mut(), 0, null_mut(), 0),
        CKR_CRYPTOKI_NOT_INITIALIZED
    );
    assert_eq!(C_Finalize(null_mut()), CKR_CRYPTOKI_NOT_INITIALIZED);
    assert!(!opencf_abi::instance::is_initialized::<Dummy>());
}

#[test]
fn initialize_and_finalize() {
    let _g = serial();
    let finalizes = FINALIZES.load(Ordering::SeqCst);
    assert_eq!(C_Initialize(null_mut()), CKR_OK);
    assert_eq!(C_Initialize(null_mut()), CKR_CRYPTOKI_ALREADY_INITIALIZED);
    let mut info = CK_INFO::default();
    assert_eq!(C_GetInfo(&mut info), CKR_OK);
    assert_eq!(info.cryptokiVersion.minor, 2);
    assert_eq!(C_Finalize(non_null()), CKR_ARGUMENTS_BAD);
    assert_eq!(C_Finalize(null_mut()), CKR_OK);
    assert_eq!(FINALIZES.load(Ordering::SeqCst), finalizes + 1);
    assert_eq!(C_GetInfo(&mut info), CKR_CRYPTOKI_NOT_INITIALIZED);

    extern "C" fn create(_: *mut *mut c_void) -> CK_RV {
        CKR_OK
    }
    extern "C" fn other(_: *mut c_void) -> CK_RV {
        CKR_OK
    }
    let mut args = CK_C_INITIALIZE_ARGS {
        CreateMutex: None,
        DestroyMutex: None,
        LockMutex: None,
        UnlockMutex: None,
        flags: 0,
        pReserved: non_null(),
    };
    let p = &mut args as *mut _ as *mut c_void;
    assert_eq!(C_Initialize(p), CKR_ARGUMENTS_BAD);
    args.pReserved = null_mut();
    args.CreateMutex = Some(create);
    assert_eq!(
        C_Initialize(&mut args as *mut _ as *mut c_void),
        CKR_ARGUMENTS_BAD
    );
    args.DestroyMutex = Some(other);
    args.LockMutex = Some(other);
    args.UnlockMutex = Some(other);
    assert_eq!(
        C_Initialize(&mut args as *mut _ as *mut c_void),
        CKR_CANT_LOCK
    );
    args.flags = CKF_OS_LOCKING_OK;
    assert_eq!(C_Initialize(&mut args as *mut _ as *mut c_void), CKR_OK);
    assert_eq!(C_Finalize(null_mut()), CKR_OK);
    let mut plain = CK_C_INITIALIZE_ARGS { flags: 0, ..args };
    plain.CreateMutex = None;
    plain.DestroyMutex = None;
    plain.LockMutex = None;
    plain.UnlockMutex = None;
    assert_eq!(C_Initialize(&mut plain as *mut _ as *mut c_void), CKR_OK);
    assert_eq!(C_Finalize(null_mut()), CKR_OK);

    // A failing or panicking initialize leaves the module uninitialized.
    FAIL_INIT.store(true, Ordering::SeqCst);
    assert_eq!(C_Initialize(null_mut()), CKR_FUNCTION_FAILED);
    assert_eq!(C_GetInfo(&mut info), CKR_CRYPTOKI_NOT_INITIALIZED);
    PANIC_INIT.store(true, Ordering::SeqCst);
    assert_eq!(C_Initialize(null_mut()), CKR_GENERAL_ERROR);
    assert_eq!(C_Initialize(null_mut()), CKR_OK);
    assert_eq!(C_Finalize(null_mut()), CKR_OK);
}

#[test]
fn null_pointers_and_lengths() {
    let _g = initialized();
    let mut n: CK_ULONG = 0;
    let mut h: CK_ULONG = 0;
    let mut buf = [0u8; 64];
    assert_eq!(C_GetInfo(null_mut()), CKR_ARGUMENTS_BAD);
    assert_eq!(
        C_GetSlotList(CK_FALSE, null_mut(), null_mut()),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(C_GetSlotInfo(1, null_mut()), CKR_ARGUMENTS_BAD);
    assert_eq!(
        C_GetMechanismInfo(1, CKM_AES_GCM, null_mut()),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_OpenSession(1, CKF_SERIAL_SESSION, null_mut(), None, null_mut()),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_OpenSession(1, 0, null_mut(), None, &mut h),
        CKR_SESSION_PARALLEL_NOT_SUPPORTED
    );
    assert_eq!(
        C_OpenSession(1, CKF_SERIAL_SESSION, null_mut(), None, &mut h),
        CKR_OK
    );
    assert_eq!(h, SESSION);
    assert_eq!(C_Login(SESSION, CKU_USER, null_mut(), 4), CKR_ARGUMENTS_BAD);
    assert_eq!(
        C_Login(SESSION, CKU_USER, b"1234".as_ptr() as *mut u8, 4),
        CKR_OK
    );
    assert_eq!(C_Login(SESSION, CKU_USER, null_mut(), 0), CKR_PIN_INCORRECT);
    assert_eq!(
        C_InitToken(1, b"so".as_ptr() as *mut u8, 2, null_mut()),
        CKR_ARGUMENTS_BAD
    );
    let label: [u8; 32] = opencf_abi::pad_field("token one");
    assert_eq!(
        C_InitToken(1, b"so".as_ptr() as *mut u8, 2, label.as_ptr() as *mut u8),
        CKR_OK
    );
    assert_eq!(
        C_SetPIN(SESSION, null_mut(), 1, null_mut(), 0),
        CKR_ARGUMENTS_BAD
    );
    // Input NULL with a length, output length pointer NULL.
    assert_eq!(
        C_Encrypt(SESSION, null_mut(), 5, null_mut(), &mut n),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_Encrypt(SESSION, buf.as_mut_ptr(), 5, buf.as_mut_ptr(), null_mut()),
        CKR_ARGUMENTS_BAD
    );
    // Data lengths above 64 GiB are refused before any slice is made.
    assert_eq!(
        C_Encrypt(SESSION, buf.as_mut_ptr(), 1 << 40, null_mut(), &mut n),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_DigestUpdate(SESSION, buf.as_mut_ptr(), CK_ULONG::MAX),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(C_GenerateRandom(SESSION, null_mut(), 4), CKR_ARGUMENTS_BAD);
    assert_eq!(C_GenerateRandom(SESSION, null_mut(), 0), CKR_OK);
    assert_eq!(C_GenerateRandom(SESSION, buf.as_mut_ptr(), 8), CKR_OK);
    assert_eq!(
        &buf[..9],
        &[0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0]
    );
    assert_eq!(
        C_GenerateRandom(7, buf.as_mut_ptr(), 8),
        CKR_SESSION_HANDLE_INVALID
    );
    // Mechanism NULL.
    assert_eq!(C_EncryptInit(SESSION, null_mut(), 1), CKR_ARGUMENTS_BAD);
    // FindObjects needs both pointers; writes at most the maximum.
    let mut objs = [0 as CK_OBJECT_HANDLE; 4];
    assert_eq!(
        C_FindObjects(SESSION, null_mut(), 4, &mut n),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_FindObjects(SESSION, objs.as_mut_ptr(), 4, null_mut()),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(C_FindObjects(SESSION, objs.as_mut_ptr(), 2, &mut n), CKR_OK);
    assert_eq!((n, objs), (2, [1, 2, 0, 0]));
    // GenerateKeyPair needs both handles.
    let mut mech = CK_MECHANISM {
        mechanism: CKM_EC_KEY_PAIR_GEN,
        pParameter: null_mut(),
        ulParameterLen: 0,
    };
    let (mut public, mut private) = (0, 0);
    assert_eq!(
        C_GenerateKeyPair(
            SESSION,
            &mut mech,
            null_mut(),
            0,
            null_mut(),
            0,
            &mut public,
            null_mut()
        ),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_GenerateKeyPair(
            SESSION,
            &mut mech,
            null_mut(),
            0,
            null_mut(),
            0,
            &mut public,
            &mut private
        ),
        CKR_OK
    );
    assert_eq!((public, private), (10, 11));
    // WaitForSlotEvent.
    let mut slot = 0;
    assert_eq!(
        C_WaitForSlotEvent(CKF_DONT_BLOCK, null_mut(), null_mut()),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_WaitForSlotEvent(0, &mut slot, non_null()),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_WaitForSlotEvent(CKF_DONT_BLOCK, &mut slot, null_mut()),
        CKR_NO_EVENT
    );
    assert_eq!(C_WaitForSlotEvent(0, &mut slot, null_mut()), CKR_OK);
    assert_eq!(slot, 1);
}

#[test]
fn templates_in() {
    let _g = initialized();
    let mut h = 0;
    let mut label = *b"key";
    let mut value_true = [CK_TRUE];
    let mut nested = [
        attr(CKA_ENCRYPT, value_true.as_mut_ptr(), 1),
        attr(CKA_LABEL, label.as_mut_ptr(), 3),
    ];
    let mut tmpl = [
        attr(CKA_LABEL, label.as_mut_ptr(), 3),
        attr(CKA_TOKEN, value_true.as_mut_ptr(), 1),
        attr(CKA_ID, null_mut(), 0),
        attr(
            CKA_WRAP_TEMPLATE,
            nested.as_mut_ptr() as *mut u8,
            std::mem::size_of_val(&nested),
        ),
    ];
    assert_eq!(
        C_CreateObject(SESSION, tmpl.as_mut_ptr(), 4, &mut h),
        CKR_OK
    );
    assert_eq!(h, 100);
    let got = opencf_abi::instance::with_backend::<Dummy, _>(|b| {
        Ok(b.last_template.lock().unwrap().clone())
    })
    .unwrap();
    assert_eq!(got[0], Attribute::new(CKA_LABEL, b"key".to_vec()));
    assert_eq!(got[1], Attribute::bool(CKA_TOKEN, true));
    assert_eq!(got[2], Attribute::new(CKA_ID, Vec::new()));
    assert_eq!(
        decode_template(&got[3].value).unwrap(),
        vec![
            Attribute::bool(CKA_ENCRYPT, true),
            Attribute::new(CKA_LABEL, b"key".to_vec())
        ]
    );

    assert_eq!(
        C_CreateObject(SESSION, null_mut(), 1, &mut h),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_CreateObject(SESSION, tmpl.as_mut_ptr(), 1, null_mut()),
        CKR_ARGUMENTS_BAD
    );
    let mut bad = [attr(CKA_LABEL, null_mut(), 3)];
    assert_eq!(
        C_CreateObject(SESSION, bad.as_mut_ptr(), 1, &mut h),
        CKR_ATTRIBUTE_VALUE_INVALID
    );
    let mut bad = [attr(CKA_LABEL, label.as_mut_ptr(), 0)];
    bad[0].ulValueLen = CK_UNAVAILABLE_INFORMATION;
    assert_eq!(
        C_CreateObject(SESSION, bad.as_mut_ptr(), 1, &mut h),
        CKR_ATTRIBUTE_VALUE_INVALID
    );
    let mut bad = [attr(CKA_WRAP_TEMPLATE, nested.as_mut_ptr() as *mut u8, 30)];
    assert_eq!(
        C_CreateObject(SESSION, bad.as_mut_ptr(), 1, &mut h),
        CKR_ATTRIBUTE_VALUE_INVALID
    );
    // An empty template may be NULL.
    assert_eq!(C_CreateObject(SESSION, null_mut(), 0, &mut h), CKR_OK);
}

#[test]
fn two_call_protocol() {
    let _g = initialized();
    let mut data = *b"plaintext";
    let expect = dummy_encrypt(&data);
    let mut n: CK_ULONG = 0;
    // Size query.
    assert_eq!(
        C_Encrypt(SESSION, data.as_mut_ptr(), 9, null_mut(), &mut n),
        CKR_OK
    );
    assert_eq!(n as usize, expect.len());
    // Too small: the needed length comes back.
    let mut out = [0u8; 64];
    n = 4;
    assert_eq!(
        C_Encrypt(SESSION, data.as_mut_ptr(), 9, out.as_mut_ptr(), &mut n),
        CKR_BUFFER_TOO_SMALL
    );
    assert_eq!(n as usize, expect.len());
    assert_eq!(out, [0; 64]);
    // Exact.
    n = expect.len() as CK_ULONG;
    assert_eq!(
        C_Encrypt(SESSION, data.as_mut_ptr(), 9, out.as_mut_ptr(), &mut n),
        CKR_OK
    );
    assert_eq!(&out[..n as usize], &expect[..]);
    // Other errors leave the length alone.
    n = 3;
    assert_eq!(
        C_Encrypt(7, data.as_mut_ptr(), 9, out.as_mut_ptr(), &mut n),
        CKR_SESSION_HANDLE_INVALID
    );
    assert_eq!(n, 3);
    // In place: the input overlaps the output.
    let mut inplace = [0u8; 64];
    inplace[..9].copy_from_slice(b"plaintext");
    n = 64;
    assert_eq!(
        C_Encrypt(
            SESSION,
            inplace.as_mut_ptr(),
            9,
            inplace.as_mut_ptr(),
            &mut n
        ),
        CKR_OK
    );
    assert_eq!(&inplace[..n as usize], &expect[..]);

    // Lists.
    let mut slots = [0 as CK_SLOT_ID; 3];
    assert_eq!(C_GetSlotList(CK_FALSE, null_mut(), &mut n), CKR_OK);
    assert_eq!(n, 3);
    n = 1;
    assert_eq!(
        C_GetSlotList(CK_FALSE, slots.as_mut_ptr(), &mut n),
        CKR_BUFFER_TOO_SMALL
    );
    assert_eq!(n, 3);
    assert_eq!(C_GetSlotList(CK_FALSE, slots.as_mut_ptr(), &mut n), CKR_OK);
    assert_eq!(slots, [1, 2, 3]);
    assert_eq!(C_GetSlotList(CK_TRUE, slots.as_mut_ptr(), &mut n), CKR_OK);
    assert_eq!(n, 1);
    let mut mechs = [0 as CK_MECHANISM_TYPE; 2];
    assert_eq!(C_GetMechanismList(1, null_mut(), &mut n), CKR_OK);
    assert_eq!(n, 2);
    n = 0;
    assert_eq!(
        C_GetMechanismList(1, mechs.as_mut_ptr(), &mut n),
        CKR_BUFFER_TOO_SMALL
    );
    assert_eq!(n, 2);
    assert_eq!(C_GetMechanismList(1, mechs.as_mut_ptr(), &mut n), CKR_OK);
    assert_eq!(mechs, [CKM_AES_GCM, CKM_SHA256]);

    // Encapsulation: the key handle is written only when a key was made.
    let mut mech = CK_MECHANISM {
        mechanism: CKM_ML_KEM,
        pParameter: null_mut(),
        ulParameterLen: 0,
    };
    let mut key: CK_OBJECT_HANDLE = 5;
    assert_eq!(
        C_EncapsulateKey(
            SESSION,
            &mut mech,
            1,
            null_mut(),
            0,
            null_mut(),
            &mut n,
            &mut key
        ),
        CKR_OK
    );
    assert_eq!((n, key), (32, 5));
    n = 31;
    assert_eq!(
        C_EncapsulateKey(
            SESSION,
            &mut mech,
            1,
            null_mut(),
            0,
            out.as_mut_ptr(),
            &mut n,
            &mut key
        ),
        CKR_BUFFER_TOO_SMALL
    );
    assert_eq!((n, key), (32, 5));
    n = 64;
    assert_eq!(
        C_EncapsulateKey(
            SESSION,
            &mut mech,
            1,
            null_mut(),
            0,
            out.as_mut_ptr(),
            &mut n,
            &mut key
        ),
        CKR_OK
    );
    assert_eq!((n, key), (32, 77));
    assert_eq!(
        C_EncapsulateKey(
            SESSION,
            &mut mech,
            1,
            null_mut(),
            0,
            out.as_mut_ptr(),
            &mut n,
            null_mut()
        ),
        CKR_ARGUMENTS_BAD
    );
}

#[test]
fn get_attribute_value() {
    let _g = initialized();
    let mut value = [0u8; 32];
    let mut small = [0u8; 2];
    let mut class = [0u8; 8];
    let mut tmpl = [
        attr(CKA_LABEL, null_mut(), 0),
        attr(CKA_VALUE, value.as_mut_ptr(), 32),
        attr(0x8123_4567, value.as_mut_ptr(), 32),
        attr(CKA_LABEL, small.as_mut_ptr(), 2),
        attr(CKA_CLASS, class.as_mut_ptr(), 8),
    ];
    assert_eq!(
        C_GetAttributeValue(SESSION, 1, tmpl.as_mut_ptr(), 5),
        CKR_ATTRIBUTE_SENSITIVE
    );
    let lens: Vec<CK_ULONG> = tmpl.iter().map(|a| a.ulValueLen).collect();
    assert_eq!(
        lens,
        [
            5,
            CK_UNAVAILABLE_INFORMATION,
            CK_UNAVAILABLE_INFORMATION,
            CK_UNAVAILABLE_INFORMATION,
            8
        ]
    );
    assert_eq!(CK_ULONG::from_ne_bytes(class), CKO_SECRET_KEY);
    assert_eq!(small, [0, 0]);

    // Type invalid wins over too small.
    let mut tmpl = [
        attr(CKA_LABEL, small.as_mut_ptr(), 2),
        attr(0x8123_4567, null_mut(), 0),
    ];
    assert_eq!(
        C_GetAttributeValue(SESSION, 1, tmpl.as_mut_ptr(), 2),
        CKR_ATTRIBUTE_TYPE_INVALID
    );
    let mut tmpl = [attr(CKA_LABEL, small.as_mut_ptr(), 2)];
    assert_eq!(
        C_GetAttributeValue(SESSION, 1, tmpl.as_mut_ptr(), 1),
        CKR_BUFFER_TOO_SMALL
    );
    assert_eq!(tmpl[0].ulValueLen, CK_UNAVAILABLE_INFORMATION);
    let mut exact = [0u8; 5];
    let mut tmpl = [attr(CKA_LABEL, exact.as_mut_ptr(), 5)];
    assert_eq!(
        C_GetAttributeValue(SESSION, 1, tmpl.as_mut_ptr(), 1),
        CKR_OK
    );
    assert_eq!((&exact, tmpl[0].ulValueLen), (b"hello", 5));

    // Bad arguments, and a backend answering the wrong count.
    assert_eq!(
        C_GetAttributeValue(SESSION, 1, null_mut(), 1),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_GetAttributeValue(SESSION, SHORT_OBJECT, tmpl.as_mut_ptr(), 1),
        CKR_GENERAL_ERROR
    );

    // An array attribute: size, then types and lengths, then values.
    let size = std::mem::size_of::<CK_ATTRIBUTE>();
    let mut tmpl = [attr(CKA_WRAP_TEMPLATE, null_mut(), 0)];
    assert_eq!(
        C_GetAttributeValue(SESSION, 1, tmpl.as_mut_ptr(), 1),
        CKR_OK
    );
    assert_eq!(tmpl[0].ulValueLen as usize, 2 * size);
    let mut nested = [attr(0, null_mut(), 0), attr(0, null_mut(), 0)];
    tmpl[0].pValue = nested.as_mut_ptr() as *mut c_void;
    tmpl[0].ulValueLen = size as CK_ULONG; // too small for two entries
    assert_eq!(
        C_GetAttributeValue(SESSION, 1, tmpl.as_mut_ptr(), 1),
        CKR_BUFFER_TOO_SMALL
    );
    tmpl[0].ulValueLen = (2 * size) as CK_ULONG;
    assert_eq!(
        C_GetAttributeValue(SESSION, 1, tmpl.as_mut_ptr(), 1),
        CKR_OK
    );
    assert_eq!((nested[0].type_, nested[0].ulValueLen), (CKA_ENCRYPT, 1));
    assert_eq!((nested[1].type_, nested[1].ulValueLen), (CKA_LABEL, 7));
    let mut flag = [0u8; 1];
    let mut label = [0u8; 7];
    nested[0].pValue = flag.as_mut_ptr() as *mut c_void;
    nested[1].pValue = label.as_mut_ptr() as *mut c_void;
    tmpl[0].pValue = nested.as_mut_ptr() as *mut c_void;
    assert_eq!(
        C_GetAttributeValue(SESSION, 1, tmpl.as_mut_ptr(), 1),
        CKR_OK
    );
    assert_eq!((flag, &label), ([CK_TRUE], b"wrapped"));
    assert_eq!(wrap_template()[1].value, label.to_vec());
}

#[test]
fn panic_is_general_error() {
    let _g = initialized();
    let mut n: CK_ULONG = 0;
    let mut data = *b"x";
    assert_eq!(
        C_Encrypt(PANIC_SESSION, data.as_mut_ptr(), 1, null_mut(), &mut n),
        CKR_GENERAL_ERROR
    );
    assert_eq!(C_CloseSession(PANIC_SESSION), CKR_GENERAL_ERROR);
    // The module keeps working.
    assert_eq!(C_CloseSession(SESSION), CKR_OK);
    assert_eq!(
        C_Encrypt(SESSION, data.as_mut_ptr(), 1, null_mut(), &mut n),
        CKR_OK
    );
}

#[test]
fn unsupported_and_legacy() {
    let _g = initialized();
    assert_eq!(
        C_SignMessage(
            SESSION,
            null_mut(),
            0,
            null_mut(),
            0,
            null_mut(),
            null_mut()
        ),
        CKR_FUNCTION_NOT_SUPPORTED
    );
    assert_eq!(
        C_MessageVerifyInit(SESSION, null_mut(), 0),
        CKR_FUNCTION_NOT_SUPPORTED
    );
    // The asynchronous functions reach a backend without them only with valid arguments.
    let mut id: CK_ULONG = 0;
    let name = c"C_Sign".as_ptr() as *mut CK_UTF8CHAR;
    assert_eq!(
        C_AsyncGetID(SESSION, name, &mut id),
        CKR_FUNCTION_NOT_SUPPORTED
    );
    let mut data = CK_ASYNC_DATA::default();
    assert_eq!(
        C_AsyncComplete(SESSION, name, &mut data),
        CKR_FUNCTION_NOT_SUPPORTED
    );
    assert_eq!(
        C_AsyncComplete(SESSION, name, null_mut()),
        CKR_ARGUMENTS_BAD,
        "a NULL result is refused before the backend is asked (a completion is given once)"
    );
    assert_eq!(
        C_AsyncGetID(SESSION, null_mut(), &mut id),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(C_AsyncGetID(SESSION, name, null_mut()), CKR_ARGUMENTS_BAD);
    let long = [b'C'; 100];
    assert_eq!(
        C_AsyncComplete(SESSION, long.as_ptr() as *mut CK_UTF8CHAR, null_mut()),
        CKR_ARGUMENTS_BAD,
        "a name without NUL in its first 64 bytes"
    );
    assert_eq!(
        C_WrapKeyAuthenticated(
            SESSION,
            null_mut(),
            0,
            0,
            null_mut(),
            0,
            null_mut(),
            null_mut()
        ),
        CKR_FUNCTION_NOT_SUPPORTED
    );
    // Backend methods left to their default.
    assert_eq!(
        C_DigestInit(SESSION, &mut CK_MECHANISM::default()),
        CKR_FUNCTION_NOT_SUPPORTED
    );
    assert_eq!(C_GetFunctionStatus(SESSION), CKR_FUNCTION_NOT_PARALLEL);
    assert_eq!(C_CancelFunction(SESSION), CKR_FUNCTION_NOT_PARALLEL);
    assert_eq!(C_GetFunctionStatus(7), CKR_SESSION_HANDLE_INVALID);
    let mut flags = 0;
    assert_eq!(
        C_GetSessionValidationFlags(SESSION, 0, null_mut()),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_GetSessionValidationFlags(SESSION, 0, &mut flags),
        CKR_FUNCTION_NOT_SUPPORTED
    );
}

#[test]
fn mechanism_parameters_reach_the_backend() {
    let _g = initialized();
    let mut iv = [3u8; 12];
    let mut aad = *b"aad";
    let mut gcm = CK_GCM_PARAMS {
        pIv: iv.as_mut_ptr(),
        ulIvLen: 12,
        ulIvBits: 96,
        pAAD: aad.as_mut_ptr(),
        ulAADLen: 3,
        ulTagBits: 128,
    };
    let mut mech = CK_MECHANISM {
        mechanism: CKM_AES_GCM,
        pParameter: &mut gcm as *mut _ as *mut c_void,
        ulParameterLen: std::mem::size_of::<CK_GCM_PARAMS>() as CK_ULONG,
    };
    assert_eq!(C_EncryptInit(SESSION, &mut mech, 1), CKR_OK);
    assert_eq!(
        last_mech().param,
        MechParam::Gcm {
            iv: vec![3; 12],
            iv_bits: 96,
            aad: b"aad".to_vec(),
            tag_bits: 128
        }
    );
    mech.ulParameterLen -= 1;
    assert_eq!(
        C_EncryptInit(SESSION, &mut mech, 1),
        CKR_MECHANISM_PARAM_INVALID
    );

    let mut pss = CK_RSA_PKCS_PSS_PARAMS {
        hashAlg: CKM_SHA384,
        mgf: CKG_MGF1_SHA384,
        sLen: 48,
    };
    let mut mech = CK_MECHANISM {
        mechanism: CKM_SHA384_RSA_PKCS_PSS,
        pParameter: &mut pss as *mut _ as *mut c_void,
        ulParameterLen: std::mem::size_of::<CK_RSA_PKCS_PSS_PARAMS>() as CK_ULONG,
    };
    assert_eq!(C_SignInit(SESSION, &mut mech, 1), CKR_OK);
    assert_eq!(
        last_mech().param,
        MechParam::RsaPss {
            hash_alg: CKM_SHA384,
            mgf: CKG_MGF1_SHA384,
            salt_len: 48
        }
    );

    let mut oaep = CK_RSA_PKCS_OAEP_PARAMS {
        hashAlg: CKM_SHA256,
        mgf: CKG_MGF1_SHA256,
        source: CKZ_DATA_SPECIFIED,
        pSourceData: null_mut(),
        ulSourceDataLen: 0,
    };
    let mut mech = CK_MECHANISM {
        mechanism: CKM_RSA_PKCS_OAEP,
        pParameter: &mut oaep as *mut _ as *mut c_void,
        ulParameterLen: std::mem::size_of::<CK_RSA_PKCS_OAEP_PARAMS>() as CK_ULONG,
    };
    assert_eq!(C_DecryptInit(SESSION, &mut mech, 1), CKR_OK);
    assert_eq!(
        last_mech().param,
        MechParam::RsaOaep {
            hash_alg: CKM_SHA256,
            mgf: CKG_MGF1_SHA256,
            source: CKZ_DATA_SPECIFIED,
            source_data: vec![]
        }
    );
    oaep.ulSourceDataLen = 4; // NULL data with a length
    mech.pParameter = &mut oaep as *mut _ as *mut c_void;
    assert_eq!(
        C_DecryptInit(SESSION, &mut mech, 1),
        CKR_MECHANISM_PARAM_INVALID
    );
    mech.ulParameterLen = 8;
    assert_eq!(
        C_DecryptInit(SESSION, &mut mech, 1),
        CKR_MECHANISM_PARAM_INVALID
    );
}

#[test]
fn message_encryption_copies_iv_and_tag() {
    let _g = initialized();
    fn gcm(
        iv: &mut [u8; 12],
        tag: &mut [u8; 16],
        generator: CK_GENERATOR_FUNCTION,
    ) -> CK_GCM_MESSAGE_PARAMS {
        CK_GCM_MESSAGE_PARAMS {
            pIv: iv.as_mut_ptr(),
            ulIvLen: 12,
            ulIvFixedBits: 0,
            ivGenerator: generator,
            pTag: tag.as_mut_ptr(),
            ulTagBits: 128,
        }
    }
    let plen = std::mem::size_of::<CK_GCM_MESSAGE_PARAMS>() as CK_ULONG;
    let (mut iv, mut tag) = ([0u8; 12], [0u8; 16]);
    let mut data = *b"message";
    let mut out = [0u8; 16];
    let mut n: CK_ULONG = 0;

    // A size query copies nothing back.
    let mut params = gcm(&mut iv, &mut tag, CKG_GENERATE_RANDOM);
    let p = &mut params as *mut _ as *mut c_void;
    assert_eq!(
        C_EncryptMessage(
            SESSION,
            p,
            plen,
            null_mut(),
            0,
            data.as_mut_ptr(),
            7,
            null_mut(),
            &mut n
        ),
        CKR_OK
    );
    assert_eq!((n, iv, tag), (7, [0; 12], [0; 16]));
    let mut params = gcm(&mut iv, &mut tag, CKG_GENERATE_RANDOM);
    let p = &mut params as *mut _ as *mut c_void;
    n = 16;
    assert_eq!(
        C_EncryptMessage(
            SESSION,
            p,
            plen,
            b"a".as_ptr() as *mut u8,
            1,
            data.as_mut_ptr(),
            7,
            out.as_mut_ptr(),
            &mut n
        ),
        CKR_OK
    );
    assert_eq!(
        C_EncryptMessage(
            SESSION,
            p,
            7,
            null_mut(),
            0,
            data.as_mut_ptr(),
            7,
            null_mut(),
            &mut n
        ),
        CKR_MECHANISM_PARAM_INVALID
    );
    assert_eq!(
        C_EncryptMessage(
            SESSION,
            null_mut(),
            plen,
            null_mut(),
            0,
            data.as_mut_ptr(),
            7,
            null_mut(),
            &mut n
        ),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        (n, &out[..7], iv, tag),
        (7, &b"message"[..], [0x11; 12], [0xAA; 16])
    );

    // Begin copies a generated IV; Next copies the tag at the end of the message only.
    let (mut iv, mut tag) = ([0u8; 12], [0u8; 16]);
    let mut params = gcm(&mut iv, &mut tag, CKG_GENERATE_COUNTER);
    let p = &mut params as *mut _ as *mut c_void;
    assert_eq!(
        C_EncryptMessageBegin(SESSION, p, plen, null_mut(), 0),
        CKR_OK
    );
    n = 16;
    assert_eq!(
        C_EncryptMessageNext(
            SESSION,
            p,
            plen,
            data.as_mut_ptr(),
            7,
            out.as_mut_ptr(),
            &mut n,
            0
        ),
        CKR_OK
    );
    assert_eq!((iv, tag), ([0x22; 12], [0; 16]));
    let mut params = gcm(&mut iv, &mut tag, CKG_GENERATE_COUNTER);
    let p = &mut params as *mut _ as *mut c_void;
    assert_eq!(
        C_EncryptMessageNext(
            SESSION,
            p,
            plen,
            data.as_mut_ptr(),
            7,
            out.as_mut_ptr(),
            &mut n,
            CKF_END_OF_MESSAGE
        ),
        CKR_OK
    );
    assert_eq!(tag, [0xBB; 16]);

    // Decryption reads the tag and writes nothing back.
    let (mut iv, mut tag) = ([0u8; 12], [0xAAu8; 16]);
    let mut params = gcm(&mut iv, &mut tag, CKG_NO_GENERATE);
    let p = &mut params as *mut _ as *mut c_void;
    n = 16;
    assert_eq!(
        C_DecryptMessage(
            SESSION,
            p,
            plen,
            null_mut(),
            0,
            data.as_mut_ptr(),
            7,
            out.as_mut_ptr(),
            &mut n
        ),
        CKR_OK
    );
    tag[3] = 0;
    let mut params = gcm(&mut iv, &mut tag, CKG_NO_GENERATE);
    let p = &mut params as *mut _ as *mut c_void;
    assert_eq!(
        C_DecryptMessage(
            SESSION,
            p,
            plen,
            null_mut(),
            0,
            data.as_mut_ptr(),
            7,
            out.as_mut_ptr(),
            &mut n
        ),
        CKR_ENCRYPTED_DATA_INVALID
    );
    assert_eq!((iv, tag[3]), ([0; 12], 0));
}

#[test]
fn interfaces_and_function_lists() {
    // These work before C_Initialize.
    let _g = serial();
    let mut n: CK_ULONG = 0;
    assert_eq!(
        C_GetInterfaceList(null_mut(), null_mut()),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(C_GetInterfaceList(null_mut(), &mut n), CKR_OK);
    assert_eq!(n, 3);
    let mut list = [CK_INTERFACE {
        pInterfaceName: null_mut(),
        pFunctionList: null_mut(),
        flags: 9,
    }; 3];
    n = 2;
    assert_eq!(
        C_GetInterfaceList(list.as_mut_ptr(), &mut n),
        CKR_BUFFER_TOO_SMALL
    );
    assert_eq!(n, 3);
    assert_eq!(C_GetInterfaceList(list.as_mut_ptr(), &mut n), CKR_OK);
    let versions: Vec<(u8, u8)> = list
        .iter()
        .map(|i| {
            let name = unsafe { std::ffi::CStr::from_ptr(i.pInterfaceName as *const _) };
            assert_eq!(name.to_bytes(), b"PKCS 11");
            assert_eq!(i.flags, 0);
            let v = unsafe { *(i.pFunctionList as *const CK_VERSION) };
            (v.major, v.minor)
        })
        .collect();
    assert_eq!(versions, [(3, 2), (3, 0), (2, 40)]);

    let mut iface: *mut CK_INTERFACE = null_mut();
    assert_eq!(
        C_GetInterface(null_mut(), null_mut(), null_mut(), 0),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_GetInterface(null_mut(), null_mut(), &mut iface, 0),
        CKR_OK
    );
    assert_eq!(unsafe { (*iface).pFunctionList }, list[0].pFunctionList);
    let name = c"PKCS 11".as_ptr() as *mut u8;
    let mut v30 = CK_VERSION { major: 3, minor: 0 };
    assert_eq!(C_GetInterface(name, &mut v30, &mut iface, 0), CKR_OK);
    assert_eq!(unsafe { (*iface).pFunctionList }, list[1].pFunctionList);
    let mut v240 = CK_VERSION {
        major: 2,
        minor: 40,
    };
    assert_eq!(C_GetInterface(null_mut(), &mut v240, &mut iface, 0), CKR_OK);
    assert_eq!(unsafe { (*iface).pFunctionList }, list[2].pFunctionList);
    let mut v31 = CK_VERSION { major: 3, minor: 1 };
    assert_eq!(
        C_GetInterface(null_mut(), &mut v31, &mut iface, 0),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_GetInterface(c"Vendor".as_ptr() as *mut u8, null_mut(), &mut iface, 0),
        CKR_ARGUMENTS_BAD
    );
    assert_eq!(
        C_GetInterface(null_mut(), null_mut(), &mut iface, CKF_INTERFACE_FORK_SAFE),
        CKR_ARGUMENTS_BAD
    );

    let mut fl: *mut CK_FUNCTION_LIST = null_mut();
    assert_eq!(C_GetFunctionList(null_mut()), CKR_ARGUMENTS_BAD);
    assert_eq!(C_GetFunctionList(&mut fl), CKR_OK);
    assert_eq!(fl as *mut c_void, list[2].pFunctionList);
    let f = unsafe { &*fl };
    assert_eq!((f.version.major, f.version.minor), (2, 40));

    // Call through the 3.2 table.
    let t = unsafe { &*(list[0].pFunctionList as *const CK_FUNCTION_LIST_3_2) };
    unsafe {
        let mut info = CK_INFO::default();
        assert_eq!(
            t.C_GetInfo.unwrap()(&mut info),
            CKR_CRYPTOKI_NOT_INITIALIZED
        );
        assert_eq!(t.C_Initialize.unwrap()(null_mut()), CKR_OK);
        assert_eq!(t.C_GetInfo.unwrap()(&mut info), CKR_OK);
        let mut fl2: *mut CK_FUNCTION_LIST = null_mut();
        assert_eq!(t.C_GetFunctionList.unwrap()(&mut fl2), CKR_OK);
        assert_eq!(fl2, fl);
        assert_eq!(t.C_Finalize.unwrap()(null_mut()), CKR_OK);
    }
}

/// Every 3.2 symbol exists with its PKCS#11 type.
#[test]
fn every_symbol_is_exported() {
    let t = CK_FUNCTION_LIST_3_2 {
        version: CK_VERSION { major: 3, minor: 2 },
        C_Initialize: Some(C_Initialize),
        C_Finalize: Some(C_Finalize),
        C_GetInfo: Some(C_GetInfo),
        C_GetFunctionList: Some(C_GetFunctionList),
        C_GetSlotList: Some(C_GetSlotList),
        C_GetSlotInfo: Some(C_GetSlotInfo),
        C_GetTokenInfo: Some(C_GetTokenInfo),
        C_GetMechanismList: Some(C_GetMechanismList),
        C_GetMechanismInfo: Some(C_GetMechanismInfo),
        C_InitToken: Some(C_InitToken),
        C_InitPIN: Some(C_InitPIN),
        C_SetPIN: Some(C_SetPIN),
        C_OpenSession: Some(C_OpenSession),
        C_CloseSession: Some(C_CloseSession),
        C_CloseAllSessions: Some(C_CloseAllSessions),
        C_GetSessionInfo: Some(C_GetSessionInfo),
        C_GetOperationState: Some(C_GetOperationState),
        C_SetOperationState: Some(C_SetOperationState),
        C_Login: Some(C_Login),
        C_Logout: Some(C_Logout),
        C_CreateObject: Some(C_CreateObject),
        C_CopyObject: Some(C_CopyObject),
        C_DestroyObject: Some(C_DestroyObject),
        C_GetObjectSize: Some(C_GetObjectSize),
        C_GetAttributeValue: Some(C_GetAttributeValue),
        C_SetAttributeValue: Some(C_SetAttributeValue),
        C_FindObjectsInit: Some(C_FindObjectsInit),
        C_FindObjects: Some(C_FindObjects),
        C_FindObjectsFinal: Some(C_FindObjectsFinal),
        C_EncryptInit: Some(C_EncryptInit),
        C_Encrypt: Some(C_Encrypt),
        C_EncryptUpdate: Some(C_EncryptUpdate),
        C_EncryptFinal: Some(C_EncryptFinal),
        C_DecryptInit: Some(C_DecryptInit),
        C_Decrypt: Some(C_Decrypt),
        C_DecryptUpdate: Some(C_DecryptUpdate),
        C_DecryptFinal: Some(C_DecryptFinal),
        C_DigestInit: Some(C_DigestInit),
        C_Digest: Some(C_Digest),
        C_DigestUpdate: Some(C_DigestUpdate),
        C_DigestKey: Some(C_DigestKey),
        C_DigestFinal: Some(C_DigestFinal),
        C_SignInit: Some(C_SignInit),
        C_Sign: Some(C_Sign),
        C_SignUpdate: Some(C_SignUpdate),
        C_SignFinal: Some(C_SignFinal),
        C_SignRecoverInit: Some(C_SignRecoverInit),
        C_SignRecover: Some(C_SignRecover),
        C_VerifyInit: Some(C_VerifyInit),
        C_Verify: Some(C_Verify),
        C_VerifyUpdate: Some(C_VerifyUpdate),
        C_VerifyFinal: Some(C_VerifyFinal),
        C_VerifyRecoverInit: Some(C_VerifyRecoverInit),
        C_VerifyRecover: Some(C_VerifyRecover),
        C_DigestEncryptUpdate: Some(C_DigestEncryptUpdate),
        C_DecryptDigestUpdate: Some(C_DecryptDigestUpdate),
        C_SignEncryptUpdate: Some(C_SignEncryptUpdate),
        C_DecryptVerifyUpdate: Some(C_DecryptVerifyUpdate),
        C_GenerateKey: Some(C_GenerateKey),
        C_GenerateKeyPair: Some(C_GenerateKeyPair),
        C_WrapKey: Some(C_WrapKey),
        C_UnwrapKey: Some(C_UnwrapKey),
        C_DeriveKey: Some(C_DeriveKey),
        C_SeedRandom: Some(C_SeedRandom),
        C_GenerateRandom: Some(C_GenerateRandom),
        C_GetFunctionStatus: Some(C_GetFunctionStatus),
        C_CancelFunction: Some(C_CancelFunction),
        C_WaitForSlotEvent: Some(C_WaitForSlotEvent),
        C_GetInterfaceList: Some(C_GetInterfaceList),
        C_GetInterface: Some(C_GetInterface),
        C_LoginUser: Some(C_LoginUser),
        C_SessionCancel: Some(C_SessionCancel),
        C_MessageEncryptInit: Some(C_MessageEncryptInit),
        C_EncryptMessage: Some(C_EncryptMessage),
        C_EncryptMessageBegin: Some(C_EncryptMessageBegin),
        C_EncryptMessageNext: Some(C_EncryptMessageNext),
        C_MessageEncryptFinal: Some(C_MessageEncryptFinal),
        C_MessageDecryptInit: Some(C_MessageDecryptInit),
        C_DecryptMessage: Some(C_DecryptMessage),
        C_DecryptMessageBegin: Some(C_DecryptMessageBegin),
        C_DecryptMessageNext: Some(C_DecryptMessageNext),
        C_MessageDecryptFinal: Some(C_MessageDecryptFinal),
        C_MessageSignInit: Some(C_MessageSignInit),
        C_SignMessage: Some(C_SignMessage),
        C_SignMessageBegin: Some(C_SignMessageBegin),
        C_SignMessageNext: Some(C_SignMessageNext),
        C_MessageSignFinal: Some(C_MessageSignFinal),
        C_MessageVerifyInit: Some(C_MessageVerifyInit),
        C_VerifyMessage: Some(C_VerifyMessage),
        C_VerifyMessageBegin: Some(C_VerifyMessageBegin),
        C_VerifyMessageNext: Some(C_VerifyMessageNext),
        C_MessageVerifyFinal: Some(C_MessageVerifyFinal),
        C_EncapsulateKey: Some(C_EncapsulateKey),
        C_DecapsulateKey: Some(C_DecapsulateKey),
        C_VerifySignatureInit: Some(C_VerifySignatureInit),
        C_VerifySignature: Some(C_VerifySignature),
        C_VerifySignatureUpdate: Some(C_VerifySignatureUpdate),
        C_VerifySignatureFinal: Some(C_VerifySignatureFinal),
        C_GetSessionValidationFlags: Some(C_GetSessionValidationFlags),
        C_AsyncComplete: Some(C_AsyncComplete),
        C_AsyncGetID: Some(C_AsyncGetID),
        C_AsyncJoin: Some(C_AsyncJoin),
        C_WrapKeyAuthenticated: Some(C_WrapKeyAuthenticated),
        C_UnwrapKeyAuthenticated: Some(C_UnwrapKeyAuthenticated),
    };
    assert_eq!(std::mem::size_of_val(&t), 8 + 104 * 8);
}

#[test]
fn threads_see_reinitialization() {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let _g = serial();
    let built = BUILT.load(Ordering::SeqCst);
    let drops = DROPS.load(Ordering::SeqCst);
    assert_eq!(C_Initialize(null_mut()), CKR_OK);
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (stop, ok) = (stop.clone(), ok.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 16];
                while !stop.load(Ordering::Relaxed) {
                    match C_GenerateRandom(SESSION, buf.as_mut_ptr(), 16) {
                        CKR_OK => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        CKR_CRYPTOKI_NOT_INITIALIZED => {}
                        rv => panic!("unexpected {rv:#x}"),
                    }
                }
            })
        })
        .collect();
    // After each re-initialization, wait until some thread has used the new instance.
    let wait_for_use = || {
        let before = ok.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(10);
        while ok.load(Ordering::Relaxed) == before {
            assert!(
                Instant::now() < deadline,
                "no thread reached the new instance"
            );
            std::thread::yield_now();
        }
    };
    wait_for_use();
    for _ in 0..50 {
        assert_eq!(C_Finalize(null_mut()), CKR_OK);
        assert_eq!(C_Initialize(null_mut()), CKR_OK);
        wait_for_use();
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(C_Finalize(null_mut()), CKR_OK);
    // Every instance was dropped once the threads (and their caches) were gone.
    assert_eq!(BUILT.load(Ordering::SeqCst) - built, 51);
    assert_eq!(DROPS.load(Ordering::SeqCst) - drops, 51);
}

#[test]
fn fork_child_must_initialize_again() {
    let _g = initialized();
    let mut info = CK_INFO::default();
    assert_eq!(C_GetInfo(&mut info), CKR_OK);
    let drops = DROPS.load(Ordering::SeqCst);
    let finalizes = FINALIZES.load(Ordering::SeqCst);
    // SAFETY: the child only runs this crate's code and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut info = CK_INFO::default();
        let code = if C_GetInfo(&mut info) != CKR_CRYPTOKI_NOT_INITIALIZED {
            1
        } else if C_Finalize(null_mut()) != CKR_CRYPTOKI_NOT_INITIALIZED {
            2
        } else if C_Initialize(null_mut()) != CKR_OK {
            3
        } else if DROPS.load(Ordering::SeqCst) != drops
            || FINALIZES.load(Ordering::SeqCst) != finalizes
        {
            4 // the parent's instance must be forgotten, neither finalized nor dropped
        } else if C_GetInfo(&mut info) != CKR_OK {
            5
        } else if C_Finalize(null_mut()) != CKR_OK || DROPS.load(Ordering::SeqCst) != drops + 1 {
            6
        } else {
            0
        };
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status));
    assert_eq!(libc::WEXITSTATUS(status), 0, "child check failed");
    // The parent is unaffected.
    assert_eq!(C_GetInfo(&mut info), CKR_OK);
}
