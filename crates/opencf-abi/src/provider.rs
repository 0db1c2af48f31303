//! The consumer side of the ABI: a loaded PKCS#11 module ("provider") called through safe
//! methods.
//!
//! [`Provider::load`] opens a module with `dlopen` and reads its function table through
//! `C_GetInterface` ("PKCS 11" 3.2, then 3.0) or, for 2.x modules, `C_GetFunctionList`. Its
//! methods carry the names and argument types of the [`crate::Backend`] methods, so a
//! framework can forward a call it received to a provider one to one:
//!
//! * mechanisms ([`Mechanism`]) and templates ([`Attribute`] slices) are laid out as C
//!   structures pointing into the caller's values (`params_out.rs`), without copying;
//! * output buffers ([`OutBuf`]) are handed to the module as they are, so a size query stays a
//!   size query and a short buffer gets `CKR_BUFFER_TOO_SMALL`; in every case the module's
//!   length is recorded in the [`OutBuf`] ([`OutBuf::len`]), as a backend would have reported
//!   it;
//! * a function the module's table lacks (a 3.0 function of a 2.40 module, a 3.2 function of
//!   a 3.0 module, or a NULL entry) answers `CKR_FUNCTION_NOT_SUPPORTED`.
//!
//! The call path allocates nothing for single-part operations: a GCM parameter points at the
//! [`Mechanism`]'s own IV and AAD, a template of up to eight attributes is laid out on the
//! stack, and output goes straight into the caller's buffer.
//!
//! The library stays loaded for the provider's whole life; dropping the provider closes it
//! (after `C_Finalize` when this provider's [`Provider::initialize`] did the initialization
//! and [`Provider::finalize`] was not called).

use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::mem::size_of;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::convert::MAX_LEN;
use crate::params_out::{CMechanism, CMessageParams, CTemplate};
use crate::sys::*;
use crate::tables::{GetFunctionListFn, GetInterfaceFn};
use crate::types::*;
use crate::MechRef;

const NS: CK_RV = CKR_FUNCTION_NOT_SUPPORTED;

/// Largest number of handles one [`Provider::find_objects`] call asks for (PKCS#11 lets a
/// module return fewer than asked; callers loop until none come back).
const FIND_BATCH_MAX: usize = 1 << 16;

/// Why a module could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No file at the path.
    NotFound(PathBuf),
    /// `dlopen` refused the file; `message` is its `dlerror` text.
    Dlopen {
        /// The module's path.
        path: PathBuf,
        /// What `dlerror` said.
        message: String,
    },
    /// A shared library without `C_GetFunctionList` or `C_GetInterface`.
    NotPkcs11(PathBuf),
    /// The module's entry point failed or gave an unusable function table.
    BadFunctionList {
        /// The module's path.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound(p) => write!(f, "{}: no such file", p.display()),
            LoadError::Dlopen { path, message } => {
                write!(f, "{}: cannot be loaded: {message}", path.display())
            }
            LoadError::NotPkcs11(p) => write!(
                f,
                "{} is not a PKCS#11 module (no C_GetFunctionList)",
                p.display()
            ),
            LoadError::BadFunctionList { path, reason } => {
                write!(f, "{}: bad PKCS#11 function list: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// `CKR_OK` → `Ok`, anything else → `Err`.
#[inline]
fn check(rv: CK_RV) -> CkResult<()> {
    if rv == CKR_OK {
        Ok(())
    } else {
        Err(defined(rv))
    }
}

/// A module's error as the framework hands it on: a code that PKCS#11 does not define (and
/// that is not in the vendor-defined range) is the module's fault, reported as
/// `CKR_GENERAL_ERROR`, so that an application never gets a value no specification names.
#[cold]
fn defined(rv: CK_RV) -> CK_RV {
    if rv >= CKR_VENDOR_DEFINED || crate::rv_names::RV_NAMES.iter().any(|&(_, v)| v == rv) {
        rv
    } else {
        CKR_GENERAL_ERROR
    }
}

/// A length as `CK_ULONG`.
#[inline]
fn ul(n: usize) -> CK_ULONG {
    n as CK_ULONG
}

/// An input byte string as the `*mut CK_BYTE` the C prototypes use; modules only read it.
#[inline]
fn input(b: &[u8]) -> *mut CK_BYTE {
    b.as_ptr() as *mut CK_BYTE
}

/// The module's function from the copied table, or `CKR_FUNCTION_NOT_SUPPORTED`.
macro_rules! func {
    ($self:ident . $name:ident) => {
        match $self.fl.$name {
            Some(f) => f,
            None => return Err(NS),
        }
    };
}

/// For a linked backend ([`Provider::linked`]): returns what the backend's method answers.
macro_rules! linked {
    ($self:ident, |$b:ident| $e:expr) => {
        if let Some($b) = &$self.linked {
            return $e;
        }
    };
}

/// Runs a two-call output function with the caller's [`OutBuf`]: the buffer (or NULL for a
/// size query) goes to the module, and the length it reports is recorded in `out` on
/// `CKR_OK` and on `CKR_BUFFER_TOO_SMALL`, as [`OutBuf::reserve`] would have.
#[inline]
fn out_call(
    out: &mut OutBuf,
    f: impl FnOnce(*mut CK_BYTE, *mut CK_ULONG) -> CK_RV,
) -> CkResult<()> {
    let (p, cap) = out.as_raw();
    let mut len = ul(cap);
    match f(p, &mut len) {
        CKR_OK if !p.is_null() && len > ul(cap) => Err(CKR_GENERAL_ERROR),
        CKR_OK => {
            out.set_len(len as usize);
            Ok(())
        }
        // Too small for a length that fits the room given: the module contradicts itself, and
        // an application growing its buffer to the length reported would ask forever.
        CKR_BUFFER_TOO_SMALL if !p.is_null() && len <= ul(cap) => Err(CKR_GENERAL_ERROR),
        CKR_BUFFER_TOO_SMALL => {
            out.set_len(len as usize);
            Err(CKR_BUFFER_TOO_SMALL)
        }
        rv => Err(defined(rv)),
    }
}

/// A function name as a NUL-terminated string for the `C_Async*` functions.
fn async_name(function: &str) -> CkResult<CString> {
    CString::new(function).map_err(|_| CKR_ARGUMENTS_BAD)
}

/// A module's `C_Sign`/`C_Decrypt`.
type InOutFn = unsafe extern "C" fn(
    CK_SESSION_HANDLE,
    *mut CK_BYTE,
    CK_ULONG,
    *mut CK_BYTE,
    *mut CK_ULONG,
) -> CK_RV;

/// Runs `f` (named `function`) into a heap buffer of `len` bytes: its output at once, or the
/// buffer kept in an [`AsyncOut`] when it answers `CKR_PENDING`.
fn call_async(
    function: &'static str,
    f: InOutFn,
    s: CK_SESSION_HANDLE,
    data: &[u8],
    len: usize,
) -> CkResult<Result<Vec<u8>, AsyncOut>> {
    let mut out = AsyncOut {
        buf: vec![0u8; len].into_boxed_slice(),
        session: s,
        function,
        done: false,
    };
    let mut n = ul(len);
    // SAFETY: a function of the loaded module; an input buffer, and a heap buffer of `len`
    // bytes that stays allocated while the call is pending (`AsyncOut`).
    match unsafe { f(s, input(data), ul(data.len()), out.buf.as_mut_ptr(), &mut n) } {
        CKR_OK if n as usize <= len => {
            out.done = true;
            Ok(Ok(out.buf[..n as usize].to_vec()))
        }
        CKR_PENDING => Ok(Err(out)),
        rv => {
            out.done = true;
            Err(if rv == CKR_OK { CKR_GENERAL_ERROR } else { rv })
        }
    }
}

/// The output buffer of a call that answered `CKR_PENDING` ([`Provider::sign_async`]): the
/// module writes into it when the operation completes, so it stays allocated until
/// [`Provider::async_complete_out`] reports, and is leaked if dropped before.
pub struct AsyncOut {
    buf: Box<[u8]>,
    session: CK_SESSION_HANDLE,
    function: &'static str,
    done: bool,
}

impl Drop for AsyncOut {
    fn drop(&mut self) {
        if !self.done {
            // The module may still write here: never free it.
            std::mem::forget(std::mem::take(&mut self.buf));
        }
    }
}

/// A list read with the two-call protocol (`C_GetSlotList`, `C_GetMechanismList`), asked
/// again when it grew between the two calls.
fn read_list<T: Copy + Default>(f: impl Fn(*mut T, *mut CK_ULONG) -> CK_RV) -> CkResult<Vec<T>> {
    for _ in 0..8 {
        let mut n: CK_ULONG = 0;
        check(f(null_mut(), &mut n))?;
        if n == 0 {
            return Ok(Vec::new());
        }
        if n > MAX_LEN {
            return Err(CKR_GENERAL_ERROR);
        }
        let mut v = vec![T::default(); n as usize];
        let mut got = n;
        match f(v.as_mut_ptr(), &mut got) {
            CKR_OK if got <= n => {
                v.truncate(got as usize);
                return Ok(v);
            }
            CKR_OK => return Err(CKR_GENERAL_ERROR),
            CKR_BUFFER_TOO_SMALL => continue,
            rv => return Err(defined(rv)),
        }
    }
    Err(CKR_GENERAL_ERROR)
}

/// An open library handle, closed when dropped.
struct Library(NonNull<c_void>);

impl Library {
    /// The address of `name`, NULL when the library does not define it.
    fn symbol(&self, name: &CStr) -> *mut c_void {
        // SAFETY: a live handle from dlopen and a NUL-terminated name.
        unsafe { libc::dlsym(self.0.as_ptr(), name.as_ptr()) }
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful dlopen and is closed once. Nothing that
        // points into the library is used after this: `Provider` drops it last.
        unsafe { libc::dlclose(self.0.as_ptr()) };
    }
}

/// The text of the last `dlerror`.
fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call
    // on this thread; it is copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Copies the named fields from one function table to another.
macro_rules! copy_fields {
    ($dst:ident, $src:ident, [$($f:ident),* $(,)?]) => {
        $( $dst.$f = $src.$f; )*
    };
}

/// The functions of the 2.40 table (besides `version`).
#[rustfmt::skip]
macro_rules! fields_2_40 {
    ($m:ident, $dst:ident, $src:ident) => {
        $m!($dst, $src, [
            C_Initialize, C_Finalize, C_GetInfo, C_GetFunctionList, C_GetSlotList,
            C_GetSlotInfo, C_GetTokenInfo, C_GetMechanismList, C_GetMechanismInfo, C_InitToken,
            C_InitPIN, C_SetPIN, C_OpenSession, C_CloseSession, C_CloseAllSessions,
            C_GetSessionInfo, C_GetOperationState, C_SetOperationState, C_Login, C_Logout,
            C_CreateObject, C_CopyObject, C_DestroyObject, C_GetObjectSize, C_GetAttributeValue,
            C_SetAttributeValue, C_FindObjectsInit, C_FindObjects, C_FindObjectsFinal,
            C_EncryptInit, C_Encrypt, C_EncryptUpdate, C_EncryptFinal, C_DecryptInit, C_Decrypt,
            C_DecryptUpdate, C_DecryptFinal, C_DigestInit, C_Digest, C_DigestUpdate, C_DigestKey,
            C_DigestFinal, C_SignInit, C_Sign, C_SignUpdate, C_SignFinal, C_SignRecoverInit,
            C_SignRecover, C_VerifyInit, C_Verify, C_VerifyUpdate, C_VerifyFinal,
            C_VerifyRecoverInit, C_VerifyRecover, C_DigestEncryptUpdate, C_DecryptDigestUpdate,
            C_SignEncryptUpdate, C_DecryptVerifyUpdate, C_GenerateKey, C_GenerateKeyPair,
            C_WrapKey, C_UnwrapKey, C_DeriveKey, C_SeedRandom, C_GenerateRandom,
            C_GetFunctionStatus, C_CancelFunction, C_WaitForSlotEvent,
        ])
    };
}

/// The functions 3.0 added to the table.
#[rustfmt::skip]
macro_rules! fields_3_0 {
    ($m:ident, $dst:ident, $src:ident) => {
        $m!($dst, $src, [
            C_GetInterfaceList, C_GetInterface, C_LoginUser, C_SessionCancel,
            C_MessageEncryptInit, C_EncryptMessage, C_EncryptMessageBegin, C_EncryptMessageNext,
            C_MessageEncryptFinal, C_MessageDecryptInit, C_DecryptMessage, C_DecryptMessageBegin,
            C_DecryptMessageNext, C_MessageDecryptFinal, C_MessageSignInit, C_SignMessage,
            C_SignMessageBegin, C_SignMessageNext, C_MessageSignFinal, C_MessageVerifyInit,
            C_VerifyMessage, C_VerifyMessageBegin, C_VerifyMessageNext, C_MessageVerifyFinal,
        ])
    };
}

/// Reads a module's function table into a 3.2-shaped copy (functions a smaller table lacks
/// are `None`), with the layout of the version it states, but no larger than the layout of
/// version `most`: the version of the interface asked for, or 2.40 for `C_GetFunctionList`,
/// whose table is a `CK_FUNCTION_LIST` whatever its version field says. A table read with a
/// smaller layout than it states reports that layout's version.
///
/// # Safety
/// `p` must point to a function table at least as large as the smaller of the layouts of
/// the version its first field states and of `most`, with valid function pointers (or NULL
/// entries).
unsafe fn read_table(
    p: *const c_void,
    path: &Path,
    most: CK_VERSION,
) -> Result<CK_FUNCTION_LIST_3_2, LoadError> {
    let bad = |reason: String| LoadError::BadFunctionList {
        path: path.to_path_buf(),
        reason,
    };
    // SAFETY: per the function's contract; every table begins with its version.
    let stated = unsafe { (p as *const CK_VERSION).read_unaligned() };
    if !(2..=3).contains(&stated.major) {
        let (major, minor) = (stated.major, stated.minor);
        return Err(bad(format!("unsupported version {major}.{minor}")));
    }
    let version = std::cmp::min_by_key(stated, most, |v| (v.major, v.minor));
    let mut fl = CK_FUNCTION_LIST_3_2::default();
    // SAFETY (the reads below): per the function's contract, the table is at least as large
    // as the layout read.
    match (version.major, version.minor) {
        (2, _) => {
            let src = unsafe { (p as *const CK_FUNCTION_LIST).read_unaligned() };
            fields_2_40!(copy_fields, fl, src);
        }
        (3, 0 | 1) => {
            let src = unsafe { (p as *const CK_FUNCTION_LIST_3_0).read_unaligned() };
            fields_2_40!(copy_fields, fl, src);
            fields_3_0!(copy_fields, fl, src);
        }
        (3, _) => fl = unsafe { (p as *const CK_FUNCTION_LIST_3_2).read_unaligned() },
        (major, minor) => return Err(bad(format!("unsupported version {major}.{minor}"))),
    }
    fl.version = version;
    for (name, present) in [
        ("C_Initialize", fl.C_Initialize.is_some()),
        ("C_Finalize", fl.C_Finalize.is_some()),
        ("C_GetSlotList", fl.C_GetSlotList.is_some()),
        ("C_OpenSession", fl.C_OpenSession.is_some()),
    ] {
        if !present {
            return Err(bad(format!("the table has no {name}")));
        }
    }
    Ok(fl)
}

/// A handle a module returned for an object it made: `CK_INVALID_HANDLE` (0) with `CKR_OK`
/// is the module's fault, reported as `CKR_GENERAL_ERROR` rather than handed on as if it named
/// an object (the metaslot would keep it as a key's clone).
fn made(h: CK_OBJECT_HANDLE) -> CkResult<CK_OBJECT_HANDLE> {
    if h == CK_INVALID_HANDLE {
        Err(CKR_GENERAL_ERROR)
    } else {
        Ok(h)
    }
}

/// The version of the `CK_FUNCTION_LIST` layout.
const VERSION_2_40: CK_VERSION = CK_VERSION {
    major: 2,
    minor: 40,
};

/// The interface name of the standard function tables.
const INTERFACE_NAME: &CStr = c"PKCS 11";

/// A loaded PKCS#11 module, called through safe methods (see the module documentation).
///
/// All methods take `&self`: a module initialized with `CKF_OS_LOCKING_OK` may be called
/// from any number of threads at once.
pub struct Provider {
    /// The module's functions, copied from its table at load time (all `None` for a linked
    /// backend).
    fl: CK_FUNCTION_LIST_3_2,
    /// A backend linked into the calling library ([`Provider::linked`]): every method calls
    /// it directly, without the C ABI.
    linked: Option<Box<dyn crate::Backend>>,
    /// Whether this value's `initialize` initialized the module (and `finalize` has not run).
    initialized_here: AtomicBool,
    path: PathBuf,
    /// Dropped last: the function pointers above point into the library (`None` for a linked
    /// backend).
    _lib: Option<Library>,
}

// SAFETY: the table holds function pointers into a library kept loaded by `_lib`; PKCS#11
// modules are called from any thread once initialized with CKF_OS_LOCKING_OK (which
// `initialize` asks for), and the handle itself is only used by `Drop`.
unsafe impl Send for Provider {}
// SAFETY: as above; no method mutates the value except through the atomic flag.
unsafe impl Sync for Provider {}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.version();
        f.debug_struct("Provider")
            .field("path", &self.path)
            .field("version", &format_args!("{}.{}", v.major, v.minor))
            .finish()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        if self.initialized_here.swap(false, Ordering::AcqRel) {
            if let Some(b) = &self.linked {
                b.finalize();
            } else if let Some(f) = self.fl.C_Finalize {
                // SAFETY: a function of the loaded module; NULL is the required argument.
                unsafe { f(null_mut()) };
            }
        }
        // `_lib` is dropped (dlclose) after this.
    }
}

impl Provider {
    /// Loads the module at `path` (`dlopen` with `RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`: a
    /// module's code stays mapped after `dlclose`, because threads that called into it may
    /// still run its thread-local destructors when they exit) and reads its
    /// function table: `C_GetInterface("PKCS 11")` for version 3.2, then 3.0, and
    /// `C_GetFunctionList` (2.40) when the module has no 3.x interface. A path without `/`
    /// is searched for as `dlopen` searches. The module is not initialized: call
    /// [`Provider::initialize`].
    pub fn load(path: &Path) -> Result<Provider, LoadError> {
        let bytes = path.as_os_str().as_bytes();
        if bytes.contains(&b'/') && !path.exists() {
            return Err(LoadError::NotFound(path.to_path_buf()));
        }
        let cpath = CString::new(bytes).map_err(|_| LoadError::Dlopen {
            path: path.to_path_buf(),
            message: "the path contains a NUL byte".into(),
        })?;
        // SAFETY: a NUL-terminated path. Loading runs the library's initializers, which is
        // what loading a PKCS#11 module means.
        let handle = unsafe {
            libc::dlopen(
                cpath.as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NODELETE,
            )
        };
        let Some(handle) = NonNull::new(handle) else {
            return Err(LoadError::Dlopen {
                path: path.to_path_buf(),
                message: dlerror_text(),
            });
        };
        let lib = Library(handle);
        let fl = Self::function_table(&lib, path)?;
        Ok(Provider {
            fl,
            linked: None,
            initialized_here: AtomicBool::new(false),
            path: path.to_path_buf(),
            _lib: Some(lib),
        })
    }

    /// A provider whose backend is linked into the calling library and already initialized
    /// (its [`crate::Backend::initialize`] has run): the methods call it directly, without the
    /// C ABI, and [`Provider::finalize`] (or dropping the provider) finalizes it. `path` is the
    /// module file it stands for, reported by [`Provider::path`]. It offers everything of
    /// PKCS#11 3.2 that the backend implements, like the module built from it.
    pub fn linked(path: &Path, backend: Box<dyn crate::Backend>) -> Provider {
        Provider {
            // No function: every method calls the backend.
            fl: CK_FUNCTION_LIST_3_2 {
                version: CK_VERSION { major: 3, minor: 2 },
                ..Default::default()
            },
            linked: Some(backend),
            initialized_here: AtomicBool::new(true),
            path: path.to_path_buf(),
            _lib: None,
        }
    }

    /// Finds the module's best function table (see [`Provider::load`]).
    fn function_table(lib: &Library, path: &Path) -> Result<CK_FUNCTION_LIST_3_2, LoadError> {
        let bad = |reason: String| LoadError::BadFunctionList {
            path: path.to_path_buf(),
            reason,
        };
        let get_interface = lib.symbol(c"C_GetInterface");
        let get_function_list = lib.symbol(c"C_GetFunctionList");
        if !get_interface.is_null() {
            // SAFETY: the module's C_GetInterface has this PKCS#11 3.x prototype.
            let get_interface: GetInterfaceFn = unsafe { std::mem::transmute(get_interface) };
            for minor in [2, 0] {
                let mut version = CK_VERSION { major: 3, minor };
                let mut iface: *mut CK_INTERFACE = null_mut();
                // SAFETY: a NUL-terminated name the module only reads, a version and an out
                // pointer that live across the call.
                let rv = unsafe {
                    get_interface(
                        INTERFACE_NAME.as_ptr() as *mut CK_UTF8CHAR,
                        &mut version,
                        &mut iface,
                        0,
                    )
                };
                if rv != CKR_OK || iface.is_null() {
                    continue;
                }
                // SAFETY: the module returned a valid interface.
                let list = unsafe { iface.read_unaligned() }.pFunctionList;
                if !list.is_null() {
                    // SAFETY: the interface's table of the version asked for, static in the
                    // module.
                    return unsafe { read_table(list, path, CK_VERSION { major: 3, minor }) };
                }
            }
        }
        if get_function_list.is_null() {
            return Err(if get_interface.is_null() {
                LoadError::NotPkcs11(path.to_path_buf())
            } else {
                bad(
                    "C_GetInterface offers no \"PKCS 11\" 3.x interface and there is no \
                     C_GetFunctionList"
                        .into(),
                )
            });
        }
        // SAFETY: the module's C_GetFunctionList has this PKCS#11 prototype.
        let get_function_list: GetFunctionListFn =
            unsafe { std::mem::transmute(get_function_list) };
        let mut list: *mut CK_FUNCTION_LIST = null_mut();
        // SAFETY: one out pointer.
        let rv = unsafe { get_function_list(&mut list) };
        if rv != CKR_OK {
            return Err(bad(format!("C_GetFunctionList returned {rv:#x}")));
        }
        if list.is_null() {
            return Err(bad("C_GetFunctionList returned a NULL table".into()));
        }
        // SAFETY: the module's table, a `CK_FUNCTION_LIST`, static in the module.
        unsafe { read_table(list as *const c_void, path, VERSION_2_40) }
    }

    /// The path the module was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version of the function table in use (3.2, 3.0 or 2.x).
    pub fn version(&self) -> CK_VERSION {
        self.fl.version
    }

    /// Whether the module offers a PKCS#11 3.x interface (`C_SessionCancel`, message-based
    /// encryption, `C_LoginUser`, …).
    pub fn has_v3(&self) -> bool {
        self.fl.version.major >= 3
    }

    // ----- General purpose -----

    /// `C_Initialize` with `CKF_OS_LOCKING_OK` (the module may use the operating system's
    /// locks and threads). A module that is already initialized in this process
    /// (`CKR_CRYPTOKI_ALREADY_INITIALIZED`) is fine.
    pub fn initialize(&self) -> CkResult<()> {
        self.initialize_with(CKF_OS_LOCKING_OK)
    }

    /// [`Provider::initialize`] as the framework does it: with the vendor flag
    /// [`crate::CKF_OPENCF_FRAMEWORK`], retried without it if the module answers
    /// `CKR_ARGUMENTS_BAD` (a module that checks for unknown flags).
    /// `no_os_threads`: the application forbade the library to create threads
    /// (`CKF_LIBRARY_CANT_CREATE_OS_THREADS`), which the module is told too.
    pub fn initialize_for_framework(&self, no_os_threads: bool) -> CkResult<()> {
        let base = CKF_OS_LOCKING_OK
            | if no_os_threads {
                CKF_LIBRARY_CANT_CREATE_OS_THREADS
            } else {
                0
            };
        match self.initialize_with(base | crate::CKF_OPENCF_FRAMEWORK) {
            Err(CKR_ARGUMENTS_BAD) => self.initialize_with(base),
            r => r,
        }
    }

    fn initialize_with(&self, flags: CK_FLAGS) -> CkResult<()> {
        // A linked backend is initialized when the provider is made.
        linked!(self, |_b| Ok(()));
        let f = func!(self.C_Initialize);
        let mut args = CK_C_INITIALIZE_ARGS {
            CreateMutex: None,
            DestroyMutex: None,
            LockMutex: None,
            UnlockMutex: None,
            flags,
            pReserved: null_mut(),
        };
        // SAFETY: a function of the loaded module with a valid argument structure.
        match unsafe { f((&mut args as *mut CK_C_INITIALIZE_ARGS).cast()) } {
            CKR_OK => {
                self.initialized_here.store(true, Ordering::Release);
                Ok(())
            }
            CKR_CRYPTOKI_ALREADY_INITIALIZED => Ok(()),
            rv => Err(rv),
        }
    }

    /// `C_Finalize`.
    pub fn finalize(&self) -> CkResult<()> {
        linked!(self, |b| {
            if self.initialized_here.swap(false, Ordering::AcqRel) {
                b.finalize();
            }
            Ok(())
        });
        let f = func!(self.C_Finalize);
        // SAFETY: a function of the loaded module; NULL is the required argument.
        let r = check(unsafe { f(null_mut()) });
        self.initialized_here.store(false, Ordering::Release);
        r
    }

    /// `C_GetInfo`.
    pub fn get_info(&self) -> CkResult<CK_INFO> {
        linked!(self, |b| b.get_info());
        let f = func!(self.C_GetInfo);
        let mut info = CK_INFO::default();
        // SAFETY: a function of the loaded module; an out structure.
        check(unsafe { f(&mut info) })?;
        Ok(info)
    }

    // ----- Slot and token management -----

    /// `C_GetSlotList`.
    pub fn get_slot_list(&self, token_present: bool) -> CkResult<Vec<CK_SLOT_ID>> {
        linked!(self, |b| b.get_slot_list(token_present));
        let f = func!(self.C_GetSlotList);
        let present = if token_present { CK_TRUE } else { CK_FALSE };
        // SAFETY: a function of the loaded module; `read_list` passes NULL or an array of
        // the stated length, and a count.
        read_list(|p, n| unsafe { f(present, p, n) })
    }

    /// `C_GetSlotInfo`.
    pub fn get_slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO> {
        linked!(self, |b| b.get_slot_info(slot));
        let f = func!(self.C_GetSlotInfo);
        let mut info = CK_SLOT_INFO {
            slotDescription: [b' '; 64],
            manufacturerID: [b' '; 32],
            flags: 0,
            hardwareVersion: CK_VERSION::default(),
            firmwareVersion: CK_VERSION::default(),
        };
        // SAFETY: a function of the loaded module; an out structure.
        check(unsafe { f(slot, &mut info) })?;
        Ok(info)
    }

    /// `C_GetTokenInfo`.
    pub fn get_token_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
        linked!(self, |b| b.get_token_info(slot));
        let f = func!(self.C_GetTokenInfo);
        let mut info = CK_TOKEN_INFO::default();
        // SAFETY: a function of the loaded module; an out structure.
        check(unsafe { f(slot, &mut info) })?;
        Ok(info)
    }

    /// `C_GetMechanismList`.
    pub fn get_mechanism_list(&self, slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>> {
        linked!(self, |b| b.get_mechanism_list(slot));
        let f = func!(self.C_GetMechanismList);
        // SAFETY: as in `get_slot_list`.
        read_list(|p, n| unsafe { f(slot, p, n) })
    }

    /// `C_GetMechanismInfo`.
    pub fn get_mechanism_info(
        &self,
        slot: CK_SLOT_ID,
        mech: CK_MECHANISM_TYPE,
    ) -> CkResult<CK_MECHANISM_INFO> {
        linked!(self, |b| b.get_mechanism_info(slot, mech));
        let f = func!(self.C_GetMechanismInfo);
        let mut info = CK_MECHANISM_INFO::default();
        // SAFETY: a function of the loaded module; an out structure.
        check(unsafe { f(slot, mech, &mut info) })?;
        Ok(info)
    }

    /// `C_InitToken` (label is the 32-byte blank-padded field).
    pub fn init_token(&self, slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> CkResult<()> {
        linked!(self, |b| b.init_token(slot, so_pin, label));
        let f = func!(self.C_InitToken);
        let mut label = *label;
        // SAFETY: a function of the loaded module; input buffers of the stated lengths.
        check(unsafe { f(slot, input(so_pin), ul(so_pin.len()), label.as_mut_ptr()) })
    }

    /// `C_InitPIN`.
    pub fn init_pin(&self, s: CK_SESSION_HANDLE, pin: &[u8]) -> CkResult<()> {
        linked!(self, |b| b.init_pin(s, pin));
        let f = func!(self.C_InitPIN);
        // SAFETY: a function of the loaded module; an input buffer.
        check(unsafe { f(s, input(pin), ul(pin.len())) })
    }

    /// `C_SetPIN`.
    pub fn set_pin(&self, s: CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> CkResult<()> {
        linked!(self, |b| b.set_pin(s, old, new));
        let f = func!(self.C_SetPIN);
        // SAFETY: a function of the loaded module; input buffers.
        check(unsafe { f(s, input(old), ul(old.len()), input(new), ul(new.len())) })
    }

    /// `C_WaitForSlotEvent`; `dont_block` sets `CKF_DONT_BLOCK`.
    pub fn wait_for_slot_event(&self, dont_block: bool) -> CkResult<CK_SLOT_ID> {
        linked!(self, |b| b.wait_for_slot_event(dont_block));
        let f = func!(self.C_WaitForSlotEvent);
        let flags = if dont_block { CKF_DONT_BLOCK } else { 0 };
        let mut slot: CK_SLOT_ID = 0;
        // SAFETY: a function of the loaded module; an out value and the reserved NULL.
        check(unsafe { f(flags, &mut slot, null_mut()) })?;
        Ok(slot)
    }

    // ----- Session management -----

    /// `C_OpenSession` without a notification callback (`flags` must include
    /// `CKF_SERIAL_SESSION`).
    pub fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        linked!(self, |b| b.open_session(slot, flags));
        let f = func!(self.C_OpenSession);
        let mut h: CK_SESSION_HANDLE = 0;
        // SAFETY: a function of the loaded module; no callback, an out handle.
        check(unsafe { f(slot, flags, null_mut(), None, &mut h) })?;
        Ok(h)
    }

    /// `C_CloseSession`.
    pub fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        linked!(self, |b| b.close_session(s));
        let f = func!(self.C_CloseSession);
        // SAFETY: a function of the loaded module.
        check(unsafe { f(s) })
    }

    /// `C_CloseAllSessions`.
    pub fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        linked!(self, |b| b.close_all_sessions(slot));
        let f = func!(self.C_CloseAllSessions);
        // SAFETY: a function of the loaded module.
        check(unsafe { f(slot) })
    }

    /// `C_GetSessionInfo`.
    pub fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        linked!(self, |b| b.get_session_info(s));
        let f = func!(self.C_GetSessionInfo);
        let mut info = CK_SESSION_INFO::default();
        // SAFETY: a function of the loaded module; an out structure.
        check(unsafe { f(s, &mut info) })?;
        Ok(info)
    }

    /// `C_SessionCancel` (3.0; `CKR_FUNCTION_NOT_SUPPORTED` from a 2.40 module).
    pub fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        linked!(self, |b| b.session_cancel(s, flags));
        let f = func!(self.C_SessionCancel);
        // SAFETY: a function of the loaded module.
        check(unsafe { f(s, flags) })
    }

    /// `C_AsyncComplete` (3.2) of `function`, whose call answered `CKR_PENDING` with the
    /// buffer of a caller further up (a call passed through): `None` while it runs, else the
    /// length the module wrote into that buffer.
    pub fn async_complete(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<Option<usize>> {
        linked!(self, |b| match b.async_complete(s, function)? {
            AsyncDone::Pending => Ok(None),
            AsyncDone::Written(n) => Ok(Some(n)),
            // A linked backend cannot write into a buffer it never saw.
            AsyncDone::Output(_) => Err(CKR_GENERAL_ERROR),
        });
        Ok(self.async_data(s, function)?.map(|d| d.ulValue as usize))
    }

    /// The module's `C_AsyncComplete` of `function`: `None` for `CKR_PENDING`, else what it
    /// reported, or its error.
    fn async_data(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<Option<CK_ASYNC_DATA>> {
        let f = func!(self.C_AsyncComplete);
        let name = async_name(function)?;
        let mut data = CK_ASYNC_DATA::default();
        // SAFETY: a function of the loaded module; a NUL-terminated name and an out
        // structure.
        match unsafe { f(s, name.as_ptr() as *mut CK_UTF8CHAR, &mut data) } {
            CKR_PENDING => Ok(None),
            CKR_OK => Ok(Some(data)),
            rv => Err(defined(rv)),
        }
    }

    /// `C_Sign` in an asynchronous session (`CKF_ASYNC_SESSION`) into a buffer of `len`
    /// bytes that this call allocates: the signature at once, or an [`AsyncOut`] that holds
    /// the buffer while the module works on it ([`Provider::async_complete_out`]).
    pub fn sign_async(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        len: usize,
    ) -> CkResult<Result<Vec<u8>, AsyncOut>> {
        let f = func!(self.C_Sign);
        call_async("C_Sign", f, s, data, len)
    }

    /// `C_Decrypt` in an asynchronous session, as [`Provider::sign_async`].
    pub fn decrypt_async(
        &self,
        s: CK_SESSION_HANDLE,
        data: &[u8],
        len: usize,
    ) -> CkResult<Result<Vec<u8>, AsyncOut>> {
        let f = func!(self.C_Decrypt);
        call_async("C_Decrypt", f, s, data, len)
    }

    /// `C_AsyncComplete` of a call that answered `CKR_PENDING` with the buffer of `out`:
    /// `None` while it runs, else the output (or the operation's error).
    pub fn async_complete_out(&self, out: &mut AsyncOut) -> CkResult<Option<Vec<u8>>> {
        if out.done {
            return Err(CKR_OPERATION_NOT_INITIALIZED);
        }
        // The module writes into `out.buf`, which is still allocated.
        match self.async_data(out.session, out.function) {
            Ok(None) => Ok(None),
            Ok(Some(data)) => {
                out.done = true;
                let n = data.ulValue as usize;
                if data.pValue != out.buf.as_mut_ptr() || n > out.buf.len() {
                    return Err(CKR_GENERAL_ERROR);
                }
                Ok(Some(out.buf[..n].to_vec()))
            }
            Err(rv) => {
                // The operation ended with an error and the module let go of the buffer;
                // `CKR_FUNCTION_NOT_SUPPORTED` may also mean that the call never reached a
                // module function: then the buffer stays held (leaked, never freed early).
                out.done = rv != CKR_FUNCTION_NOT_SUPPORTED;
                Err(rv)
            }
        }
    }

    /// `C_AsyncGetID` (3.2).
    pub fn async_get_id(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<CK_ULONG> {
        linked!(self, |b| b.async_get_id(s, function));
        let f = func!(self.C_AsyncGetID);
        let name = async_name(function)?;
        let mut id: CK_ULONG = 0;
        // SAFETY: a function of the loaded module; a NUL-terminated name and an out value.
        check(unsafe { f(s, name.as_ptr() as *mut CK_UTF8CHAR, &mut id) })?;
        Ok(id)
    }

    /// `C_AsyncJoin` (3.2), for a function without output.
    pub fn async_join(&self, s: CK_SESSION_HANDLE, function: &str, id: CK_ULONG) -> CkResult<()> {
        linked!(self, |b| b.async_join(s, function, id));
        let f = func!(self.C_AsyncJoin);
        let name = async_name(function)?;
        // SAFETY: a function of the loaded module; a NUL-terminated name, no output buffer.
        check(unsafe { f(s, name.as_ptr() as *mut CK_UTF8CHAR, id, null_mut(), 0) })
    }

    /// `C_GetOperationState`.
    pub fn get_operation_state(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        linked!(self, |b| b.get_operation_state(s, out));
        let f = func!(self.C_GetOperationState);
        // SAFETY: a function of the loaded module; the caller's buffer and its capacity.
        out_call(out, |p, n| unsafe { f(s, p, n) })
    }

    /// `C_SetOperationState`.
    pub fn set_operation_state(
        &self,
        s: CK_SESSION_HANDLE,
        state: &[u8],
        enc_key: CK_OBJECT_HANDLE,
        auth_key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        linked!(self, |b| b.set_operation_state(s, state, enc_key, auth_key));
        let f = func!(self.C_SetOperationState);
        // SAFETY: a function of the loaded module; an input buffer.
        check(unsafe { f(s, input(state), ul(state.len()), enc_key, auth_key) })
    }

    /// `C_Login`.
    pub fn login(&self, s: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> CkResult<()> {
        linked!(self, |b| b.login(s, user, pin));
        let f = func!(self.C_Login);
        // SAFETY: a function of the loaded module; an input buffer.
        check(unsafe { f(s, user, input(pin), ul(pin.len())) })
    }

    /// `C_LoginUser` (3.0).
    pub fn login_user(
        &self,
        s: CK_SESSION_HANDLE,
        user: CK_USER_TYPE,
        pin: &[u8],
        username: &[u8],
    ) -> CkResult<()> {
        linked!(self, |b| b.login_user(s, user, pin, username));
        let f = func!(self.C_LoginUser);
        // SAFETY: a function of the loaded module; input buffers.
        check(unsafe {
            f(
                s,
                user,
                input(pin),
                ul(pin.len()),
                input(username),
                ul(username.len()),
            )
        })
    }

    /// `C_Logout`.
    pub fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        linked!(self, |b| b.logout(s));
        let f = func!(self.C_Logout);
        // SAFETY: a function of the loaded module.
        check(unsafe { f(s) })
    }

    /// `C_GetSessionValidationFlags` (3.2).
    pub fn get_session_validation_flags(
        &self,
        s: CK_SESSION_HANDLE,
        kind: CK_SESSION_VALIDATION_FLAGS_TYPE,
    ) -> CkResult<CK_FLAGS> {
        linked!(self, |b| b.get_session_validation_flags(s, kind));
        let f = func!(self.C_GetSessionValidationFlags);
        let mut flags: CK_FLAGS = 0;
        // SAFETY: a function of the loaded module; an out value.
        check(unsafe { f(s, kind, &mut flags) })?;
        Ok(flags)
    }

    // ----- Object management -----

    /// `C_CreateObject`.
    pub fn create_object(
        &self,
        s: CK_SESSION_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        linked!(self, |b| b.create_object(s, template));
        let f = func!(self.C_CreateObject);
        let mut t = CTemplate::new(template)?;
        let mut h: CK_OBJECT_HANDLE = 0;
        // SAFETY: a function of the loaded module; a template that lives across the call.
        check(unsafe { f(s, t.as_mut_ptr(), t.count(), &mut h) })?;
        made(h)
    }

    /// `C_CopyObject`.
    pub fn copy_object(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        linked!(self, |b| b.copy_object(s, obj, template));
        let f = func!(self.C_CopyObject);
        let mut t = CTemplate::new(template)?;
        let mut h: CK_OBJECT_HANDLE = 0;
        // SAFETY: as in `create_object`.
        check(unsafe { f(s, obj, t.as_mut_ptr(), t.count(), &mut h) })?;
        made(h)
    }

    /// `C_DestroyObject`.
    pub fn destroy_object(&self, s: CK_SESSION_HANDLE, obj: CK_OBJECT_HANDLE) -> CkResult<()> {
        linked!(self, |b| b.destroy_object(s, obj));
        let f = func!(self.C_DestroyObject);
        // SAFETY: a function of the loaded module.
        check(unsafe { f(s, obj) })
    }

    /// `C_GetObjectSize`.
    pub fn get_object_size(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
    ) -> CkResult<CK_ULONG> {
        linked!(self, |b| b.get_object_size(s, obj));
        let f = func!(self.C_GetObjectSize);
        let mut size: CK_ULONG = 0;
        // SAFETY: a function of the loaded module; an out value.
        check(unsafe { f(s, obj, &mut size) })?;
        Ok(size)
    }

    /// `C_GetAttributeValue`: one answer per requested type, in order. Values are read with
    /// the two-call protocol (lengths, then values; asked again if a value grew meanwhile);
    /// an attribute the module reports as sensitive is [`AttrValue::Sensitive`], one the
    /// object lacks is [`AttrValue::Invalid`]. Nested templates (`CKA_WRAP_TEMPLATE`, …)
    /// come back encoded with [`encode_template`].
    pub fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        linked!(self, |b| b.get_attribute_value(s, obj, types));
        let f = func!(self.C_GetAttributeValue);
        // SAFETY: a function of the loaded module; `get` is only given arrays whose value
        // pointers are NULL or buffers of the stated lengths, all living across the call.
        let get = |t: &mut [CK_ATTRIBUTE]| unsafe { f(s, obj, t.as_mut_ptr(), ul(t.len())) };
        if !types.is_empty() && !types.iter().any(|t| is_template_attribute(*t)) {
            if let Some(values) = Self::attributes_at_once(&get, types)? {
                return Ok(values);
            }
        }
        types
            .iter()
            .map(|&t| Self::one_attribute(&get, t))
            .collect()
    }

    /// All attributes in two calls (lengths, values), when every one of them is available;
    /// `None` sends the caller to [`Provider::one_attribute`] for each.
    fn attributes_at_once(
        get: &impl Fn(&mut [CK_ATTRIBUTE]) -> CK_RV,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Option<Vec<AttrValue>>> {
        let mut tmpl: Vec<CK_ATTRIBUTE> = types
            .iter()
            .map(|&t| CK_ATTRIBUTE {
                type_: t,
                pValue: null_mut(),
                ulValueLen: 0,
            })
            .collect();
        match get(&mut tmpl) {
            CKR_OK => {}
            CKR_ATTRIBUTE_SENSITIVE | CKR_ATTRIBUTE_TYPE_INVALID | CKR_BUFFER_TOO_SMALL => {
                return Ok(None)
            }
            rv => return Err(defined(rv)),
        }
        if tmpl.iter().any(|a| a.ulValueLen > MAX_LEN) {
            return Ok(None);
        }
        let mut bufs: Vec<Vec<u8>> = tmpl
            .iter()
            .map(|a| vec![0u8; a.ulValueLen as usize])
            .collect();
        for (a, b) in tmpl.iter_mut().zip(bufs.iter_mut()) {
            a.pValue = b.as_mut_ptr().cast();
        }
        if get(&mut tmpl) != CKR_OK {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(bufs.len());
        for (a, mut b) in tmpl.iter().zip(bufs) {
            if a.ulValueLen as usize > b.len() {
                return Ok(None);
            }
            b.truncate(a.ulValueLen as usize);
            out.push(AttrValue::Value(b));
        }
        Ok(Some(out))
    }

    /// One attribute with the two-call protocol.
    fn one_attribute(
        get: &impl Fn(&mut [CK_ATTRIBUTE]) -> CK_RV,
        kind: CK_ATTRIBUTE_TYPE,
    ) -> CkResult<AttrValue> {
        for _ in 0..4 {
            let mut a = [CK_ATTRIBUTE {
                type_: kind,
                pValue: null_mut(),
                ulValueLen: 0,
            }];
            match get(&mut a) {
                CKR_OK => {}
                CKR_ATTRIBUTE_SENSITIVE => return Ok(AttrValue::Sensitive),
                CKR_ATTRIBUTE_TYPE_INVALID => return Ok(AttrValue::Invalid),
                rv => return Err(defined(rv)),
            }
            let len = a[0].ulValueLen;
            if len == CK_UNAVAILABLE_INFORMATION {
                return Ok(AttrValue::Invalid);
            }
            if len > MAX_LEN {
                return Err(CKR_GENERAL_ERROR);
            }
            let answer = if is_template_attribute(kind) {
                Self::nested_template(get, kind, len as usize)?
            } else {
                let mut buf = vec![0u8; len as usize];
                a[0].pValue = buf.as_mut_ptr().cast();
                match get(&mut a) {
                    CKR_OK if a[0].ulValueLen <= len => {
                        buf.truncate(a[0].ulValueLen as usize);
                        Some(AttrValue::Value(buf))
                    }
                    CKR_OK | CKR_BUFFER_TOO_SMALL => None,
                    CKR_ATTRIBUTE_SENSITIVE => Some(AttrValue::Sensitive),
                    CKR_ATTRIBUTE_TYPE_INVALID => Some(AttrValue::Invalid),
                    rv => return Err(defined(rv)),
                }
            };
            if let Some(v) = answer {
                return Ok(v);
            }
            // The value changed size between the two calls: ask again.
        }
        Err(CKR_GENERAL_ERROR)
    }

    /// A nested template of `len` bytes (a `CK_ATTRIBUTE` array): its entries' types and
    /// lengths, then their values. `None`: something grew meanwhile, ask again.
    fn nested_template(
        get: &impl Fn(&mut [CK_ATTRIBUTE]) -> CK_RV,
        kind: CK_ATTRIBUTE_TYPE,
        len: usize,
    ) -> CkResult<Option<AttrValue>> {
        let size = size_of::<CK_ATTRIBUTE>();
        if !len.is_multiple_of(size) {
            return Err(CKR_GENERAL_ERROR);
        }
        let n = len / size;
        if n == 0 {
            return Ok(Some(AttrValue::Value(Vec::new())));
        }
        let empty = CK_ATTRIBUTE {
            type_: 0,
            pValue: null_mut(),
            ulValueLen: 0,
        };
        let mut entries = vec![empty; n];
        let mut outer = [CK_ATTRIBUTE {
            type_: kind,
            pValue: entries.as_mut_ptr().cast(),
            ulValueLen: ul(len),
        }];
        // First: the entries' types and lengths.
        match get(&mut outer) {
            CKR_OK => {}
            CKR_BUFFER_TOO_SMALL => return Ok(None),
            CKR_ATTRIBUTE_SENSITIVE => return Ok(Some(AttrValue::Sensitive)),
            CKR_ATTRIBUTE_TYPE_INVALID => return Ok(Some(AttrValue::Invalid)),
            rv => return Err(defined(rv)),
        }
        if entries.iter().any(|e| e.ulValueLen > MAX_LEN) {
            return Err(CKR_GENERAL_ERROR);
        }
        let mut bufs: Vec<Vec<u8>> = entries
            .iter()
            .map(|e| vec![0u8; e.ulValueLen as usize])
            .collect();
        for (e, b) in entries.iter_mut().zip(bufs.iter_mut()) {
            e.pValue = b.as_mut_ptr().cast();
        }
        outer[0].pValue = entries.as_mut_ptr().cast();
        outer[0].ulValueLen = ul(len);
        // Then: the values.
        match get(&mut outer) {
            CKR_OK => {}
            CKR_BUFFER_TOO_SMALL => return Ok(None),
            CKR_ATTRIBUTE_SENSITIVE => return Ok(Some(AttrValue::Sensitive)),
            CKR_ATTRIBUTE_TYPE_INVALID => return Ok(Some(AttrValue::Invalid)),
            rv => return Err(defined(rv)),
        }
        let mut attrs = Vec::with_capacity(n);
        for (e, mut b) in entries.iter().zip(bufs) {
            if e.ulValueLen as usize > b.len() {
                return Ok(None);
            }
            b.truncate(e.ulValueLen as usize);
            attrs.push(Attribute {
                kind: e.type_,
                value: b,
            });
        }
        Ok(Some(AttrValue::Value(encode_template(&attrs))))
    }

    /// `C_SetAttributeValue`.
    pub fn set_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<()> {
        linked!(self, |b| b.set_attribute_value(s, obj, template));
        let f = func!(self.C_SetAttributeValue);
        let mut t = CTemplate::new(template)?;
        // SAFETY: as in `create_object`.
        check(unsafe { f(s, obj, t.as_mut_ptr(), t.count()) })
    }

    /// `C_FindObjectsInit`.
    #[inline]
    pub fn find_objects_init(&self, s: CK_SESSION_HANDLE, template: &[Attribute]) -> CkResult<()> {
        linked!(self, |b| b.find_objects_init(s, template));
        let f = func!(self.C_FindObjectsInit);
        let mut t = CTemplate::new(template)?;
        // SAFETY: as in `create_object`.
        check(unsafe { f(s, t.as_mut_ptr(), t.count()) })
    }

    /// `C_FindObjects`: at most `max` handles (at most 65,536 per call; PKCS#11 lets a
    /// module return fewer than asked, so callers loop until none come back).
    pub fn find_objects(
        &self,
        s: CK_SESSION_HANDLE,
        max: usize,
    ) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        let mut v = vec![0; max.min(FIND_BATCH_MAX)];
        let n = self.find_objects_into(s, &mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// `C_FindObjects` into the caller's array; returns how many handles were written.
    #[inline]
    pub fn find_objects_into(
        &self,
        s: CK_SESSION_HANDLE,
        found: &mut [CK_OBJECT_HANDLE],
    ) -> CkResult<usize> {
        linked!(self, |b| {
            let v = b.find_objects(s, found.len())?;
            let n = v.len().min(found.len());
            found[..n].copy_from_slice(&v[..n]);
            Ok(n)
        });
        let f = func!(self.C_FindObjects);
        let mut count: CK_ULONG = 0;
        // SAFETY: a function of the loaded module; an array of the stated length and an
        // out count.
        check(unsafe { f(s, found.as_mut_ptr(), ul(found.len()), &mut count) })?;
        if count as usize > found.len() {
            return Err(CKR_GENERAL_ERROR);
        }
        Ok(count as usize)
    }

    /// `C_FindObjectsFinal`.
    #[inline]
    pub fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        linked!(self, |b| b.find_objects_final(s));
        let f = func!(self.C_FindObjectsFinal);
        // SAFETY: a function of the loaded module.
        check(unsafe { f(s) })
    }
}

/// Calls on a session lent by a linked backend ([`Provider::pin_session`]). A pin comes only
/// from a linked backend, so these are never called on a loaded module (they answer
/// `CKR_GENERAL_ERROR` there).
impl Provider {
    /// The session behind `s`, when the backend is linked in and lends it
    /// ([`crate::Backend::pin_session`]); `None` for a loaded module.
    pub fn pin_session(&self, s: CK_SESSION_HANDLE) -> Option<crate::Pinned> {
        self.linked.as_ref()?.pin_session(s)
    }
    fn pinned_backend(&self) -> CkResult<&dyn crate::Backend> {
        self.linked.as_deref().ok_or(CKR_GENERAL_ERROR)
    }
    /// `C_DigestInit` on a pinned session.
    #[inline]
    pub fn pinned_digest_init(&self, p: &crate::Pinned, mech: MechRef<'_>) -> CkResult<()> {
        let b = self.pinned_backend()?;
        mech.with_parsed(|m| b.pinned_digest_init(p, m))
    }
    /// `C_Verify` on a pinned session.
    #[inline]
    pub fn pinned_verify(&self, p: &crate::Pinned, d: &[u8], sig: &[u8]) -> CkResult<()> {
        self.pinned_backend()?.pinned_verify(p, d, sig)
    }
}

/// `*Init(pinned session, mechanism, key)` and `(pinned session, data, out)` methods.
macro_rules! pinned_fns {
    (init: $($(#[$d1:meta])* $init:ident),*; in_out: $($(#[$d2:meta])* $io:ident),*) => {
        impl Provider {
            $(
                $(#[$d1])*
                #[inline]
                pub fn $init(
                    &self,
                    p: &crate::Pinned,
                    mech: MechRef<'_>,
                    key: CK_OBJECT_HANDLE,
                ) -> CkResult<()> {
                    let b = self.pinned_backend()?;
                    mech.with_parsed(|m| b.$init(p, m, key))
                }
            )*
            $(
                $(#[$d2])*
                #[inline]
                pub fn $io(&self, p: &crate::Pinned, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
                    self.pinned_backend()?.$io(p, d, o)
                }
            )*
        }
    };
}

pinned_fns! {
    init:
        /// `C_EncryptInit` on a pinned session.
        pinned_encrypt_init,
        /// `C_DecryptInit` on a pinned session.
        pinned_decrypt_init,
        /// `C_SignInit` on a pinned session.
        pinned_sign_init,
        /// `C_VerifyInit` on a pinned session.
        pinned_verify_init;
    in_out:
        /// `C_Encrypt` on a pinned session.
        pinned_encrypt,
        /// `C_Decrypt` on a pinned session.
        pinned_decrypt,
        /// `C_Sign` on a pinned session.
        pinned_sign,
        /// `C_Digest` on a pinned session.
        pinned_digest
}

/// Runs `f` with `mech` as a `CK_MECHANISM` pointer valid for the call: the caller's own
/// structure, passed on as it came, or a parsed mechanism laid out again.
fn with_mechanism<R>(mech: MechRef<'_>, f: impl FnOnce(*mut CK_MECHANISM) -> R) -> R {
    match mech {
        // The caller's mechanism, valid for the call that received it, which is still running.
        MechRef::Raw(r) => f(r.as_ptr()),
        MechRef::Parsed(mech) => {
            // A layout that lives across the call.
            let mut m = CMechanism::new(mech);
            f(m.as_mut_ptr())
        }
    }
}

/// `*Init(session, mechanism, key)` methods.
macro_rules! init_fns {
    ($($(#[$doc:meta])* $name:ident $(/ $raw:ident)? => $c:ident;)*) => {
        impl Provider {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $name<'m>(
                    &self,
                    s: CK_SESSION_HANDLE,
                    mech: impl Into<MechRef<'m>>,
                    key: CK_OBJECT_HANDLE,
                ) -> CkResult<()> {
                    let mech = mech.into();
                    linked!(self, |b| {
                        // The backend's `*_raw` method where it has one (it parses the
                        // structure itself), else the parsed mechanism.
                        $(if let MechRef::Raw(r) = mech {
                            return b.$raw(s, r, key);
                        })?
                        mech.with_parsed(|m| b.$name(s, m, key))
                    });
                    let f = func!(self.$c);
                    // SAFETY: a function of the loaded module; a mechanism valid for the call.
                    with_mechanism(mech, |m| check(unsafe { f(s, m, key) }))
                }
            )*
        }
    };
}

init_fns! {
    /// `C_EncryptInit`.
    encrypt_init / encrypt_init_raw => C_EncryptInit;
    /// `C_DecryptInit`.
    decrypt_init / decrypt_init_raw => C_DecryptInit;
    /// `C_SignInit`.
    sign_init / sign_init_raw => C_SignInit;
    /// `C_SignRecoverInit`.
    sign_recover_init => C_SignRecoverInit;
    /// `C_VerifyInit`.
    verify_init / verify_init_raw => C_VerifyInit;
    /// `C_VerifyRecoverInit`.
    verify_recover_init => C_VerifyRecoverInit;
    /// `C_MessageEncryptInit` (3.0).
    message_encrypt_init => C_MessageEncryptInit;
    /// `C_MessageDecryptInit` (3.0).
    message_decrypt_init => C_MessageDecryptInit;
}

/// `(session, data, out)` methods with the two-call output protocol.
macro_rules! in_out_fns {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {
        impl Provider {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $name(
                    &self,
                    s: CK_SESSION_HANDLE,
                    data: &[u8],
                    out: &mut OutBuf,
                ) -> CkResult<()> {
                    linked!(self, |b| b.$name(s, data, out));
                    let f = func!(self.$c);
                    // SAFETY: a function of the loaded module; an input buffer, and the
                    // caller's output buffer (or NULL) with its capacity.
                    out_call(out, |p, n| unsafe { f(s, input(data), ul(data.len()), p, n) })
                }
            )*
        }
    };
}

in_out_fns! {
    /// `C_Encrypt`.
    encrypt => C_Encrypt;
    /// `C_EncryptUpdate`.
    encrypt_update => C_EncryptUpdate;
    /// `C_Decrypt`.
    decrypt => C_Decrypt;
    /// `C_DecryptUpdate`.
    decrypt_update => C_DecryptUpdate;
    /// `C_Digest`.
    digest => C_Digest;
    /// `C_Sign`.
    sign => C_Sign;
    /// `C_SignRecover`.
    sign_recover => C_SignRecover;
    /// `C_VerifyRecover` (`data` is the signature).
    verify_recover => C_VerifyRecover;
    /// `C_DigestEncryptUpdate`.
    digest_encrypt_update => C_DigestEncryptUpdate;
    /// `C_DecryptDigestUpdate`.
    decrypt_digest_update => C_DecryptDigestUpdate;
    /// `C_SignEncryptUpdate`.
    sign_encrypt_update => C_SignEncryptUpdate;
    /// `C_DecryptVerifyUpdate`.
    decrypt_verify_update => C_DecryptVerifyUpdate;
}

/// `(session, out)` methods with the two-call output protocol.
macro_rules! out_fns {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {
        impl Provider {
            $(
                $(#[$doc])*
                pub fn $name(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
                    linked!(self, |b| b.$name(s, out));
                    let f = func!(self.$c);
                    // SAFETY: a function of the loaded module; the caller's output buffer
                    // (or NULL) with its capacity.
                    out_call(out, |p, n| unsafe { f(s, p, n) })
                }
            )*
        }
    };
}

out_fns! {
    /// `C_EncryptFinal`.
    encrypt_final => C_EncryptFinal;
    /// `C_DecryptFinal`.
    decrypt_final => C_DecryptFinal;
    /// `C_DigestFinal`.
    digest_final => C_DigestFinal;
    /// `C_SignFinal`.
    sign_final => C_SignFinal;
}

/// `(session, data)` methods.
macro_rules! in_fns {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {
        impl Provider {
            $(
                $(#[$doc])*
                pub fn $name(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
                    linked!(self, |b| b.$name(s, data));
                    let f = func!(self.$c);
                    // SAFETY: a function of the loaded module; an input buffer.
                    check(unsafe { f(s, input(data), ul(data.len())) })
                }
            )*
        }
    };
}

in_fns! {
    /// `C_DigestUpdate`.
    digest_update => C_DigestUpdate;
    /// `C_SignUpdate`.
    sign_update => C_SignUpdate;
    /// `C_VerifyUpdate`.
    verify_update => C_VerifyUpdate;
    /// `C_VerifyFinal` (`data` is the signature).
    verify_final => C_VerifyFinal;
    /// `C_VerifySignature` (3.2).
    verify_signature => C_VerifySignature;
    /// `C_VerifySignatureUpdate` (3.2).
    verify_signature_update => C_VerifySignatureUpdate;
    /// `C_SeedRandom` (`data` is the seed).
    seed_random => C_SeedRandom;
}

/// `(session)` methods.
macro_rules! session_fns {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {
        impl Provider {
            $(
                $(#[$doc])*
                pub fn $name(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
                    linked!(self, |b| b.$name(s));
                    let f = func!(self.$c);
                    // SAFETY: a function of the loaded module.
                    check(unsafe { f(s) })
                }
            )*
        }
    };
}

session_fns! {
    /// `C_MessageEncryptFinal` (3.0).
    message_encrypt_final => C_MessageEncryptFinal;
    /// `C_MessageDecryptFinal` (3.0).
    message_decrypt_final => C_MessageDecryptFinal;
    /// `C_VerifySignatureFinal` (3.2).
    verify_signature_final => C_VerifySignatureFinal;
    /// `C_GetFunctionStatus` (legacy: modules answer `CKR_FUNCTION_NOT_PARALLEL`).
    get_function_status => C_GetFunctionStatus;
    /// `C_CancelFunction` (legacy: modules answer `CKR_FUNCTION_NOT_PARALLEL`).
    cancel_function => C_CancelFunction;
}

impl Provider {
    // ----- Message digesting -----

    /// `C_DigestInit`.
    pub fn digest_init<'m>(
        &self,
        s: CK_SESSION_HANDLE,
        mech: impl Into<MechRef<'m>>,
    ) -> CkResult<()> {
        let mech = mech.into();
        linked!(self, |b| match mech {
            MechRef::Raw(r) => b.digest_init_raw(s, r),
            MechRef::Parsed(m) => b.digest_init(s, m),
        });
        let f = func!(self.C_DigestInit);
        // SAFETY: a function of the loaded module; a mechanism valid for the call.
        with_mechanism(mech, |m| check(unsafe { f(s, m) }))
    }

    /// `C_DigestKey`.
    pub fn digest_key(&self, s: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) -> CkResult<()> {
        linked!(self, |b| b.digest_key(s, key));
        let f = func!(self.C_DigestKey);
        // SAFETY: a function of the loaded module.
        check(unsafe { f(s, key) })
    }

    // ----- Verifying signatures and MACs -----

    /// `C_Verify`.
    pub fn verify(&self, s: CK_SESSION_HANDLE, data: &[u8], sig: &[u8]) -> CkResult<()> {
        linked!(self, |b| b.verify(s, data, sig));
        let f = func!(self.C_Verify);
        // SAFETY: a function of the loaded module; input buffers.
        check(unsafe { f(s, input(data), ul(data.len()), input(sig), ul(sig.len())) })
    }

    /// `C_VerifySignatureInit` (3.2): the signature is given up front.
    pub fn verify_signature_init<'m>(
        &self,
        s: CK_SESSION_HANDLE,
        mech: impl Into<MechRef<'m>>,
        key: CK_OBJECT_HANDLE,
        sig: &[u8],
    ) -> CkResult<()> {
        let mech = mech.into();
        linked!(self, |b| mech
            .with_parsed(|m| b.verify_signature_init(s, m, key, sig)));
        let f = func!(self.C_VerifySignatureInit);
        with_mechanism(mech, |m| {
            // SAFETY: a function of the loaded module; a mechanism valid for the call and an
            // input buffer.
            check(unsafe { f(s, m, key, input(sig), ul(sig.len())) })
        })
    }

    // ----- Message-based encryption (3.0) -----

    /// `C_EncryptMessage`: the module writes a generated IV and the tag straight into
    /// `params` (whose tag is sized to the tag length first).
    pub fn encrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        linked!(self, |b| b.encrypt_message(s, params, aad, data, out));
        let f = func!(self.C_EncryptMessage);
        let mut c = CMessageParams::new(params);
        let (pp, pl) = c.as_raw();
        // SAFETY: a function of the loaded module; the parameter structure and its buffers
        // live across the call, as do the inputs and the caller's output buffer.
        out_call(out, |p, n| unsafe {
            f(
                s,
                pp,
                pl,
                input(aad),
                ul(aad.len()),
                input(data),
                ul(data.len()),
                p,
                n,
            )
        })
    }

    /// `C_EncryptMessageBegin`: a generated IV is written into `params`.
    pub fn encrypt_message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
    ) -> CkResult<()> {
        linked!(self, |b| b.encrypt_message_begin(s, params, aad));
        let f = func!(self.C_EncryptMessageBegin);
        let mut c = CMessageParams::new(params);
        let (pp, pl) = c.as_raw();
        // SAFETY: as in `encrypt_message`.
        check(unsafe { f(s, pp, pl, input(aad), ul(aad.len())) })
    }

    /// `C_EncryptMessageNext`; `last` sets `CKF_END_OF_MESSAGE` (the tag is then written
    /// into `params`).
    pub fn encrypt_message_next(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        data: &[u8],
        out: &mut OutBuf,
        last: bool,
    ) -> CkResult<()> {
        linked!(self, |b| b.encrypt_message_next(s, params, data, out, last));
        let f = func!(self.C_EncryptMessageNext);
        let flags = if last { CKF_END_OF_MESSAGE } else { 0 };
        let mut c = CMessageParams::new(params);
        let (pp, pl) = c.as_raw();
        // SAFETY: as in `encrypt_message`.
        out_call(out, |p, n| unsafe {
            f(s, pp, pl, input(data), ul(data.len()), p, n, flags)
        })
    }

    /// `C_DecryptMessage` (the tag in `params` is input).
    pub fn decrypt_message(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        linked!(self, |b| b.decrypt_message(s, params, aad, data, out));
        let f = func!(self.C_DecryptMessage);
        let mut c = CMessageParams::new(params);
        let (pp, pl) = c.as_raw();
        // SAFETY: as in `encrypt_message`.
        out_call(out, |p, n| unsafe {
            f(
                s,
                pp,
                pl,
                input(aad),
                ul(aad.len()),
                input(data),
                ul(data.len()),
                p,
                n,
            )
        })
    }

    /// `C_DecryptMessageBegin`.
    pub fn decrypt_message_begin(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        aad: &[u8],
    ) -> CkResult<()> {
        linked!(self, |b| b.decrypt_message_begin(s, params, aad));
        let f = func!(self.C_DecryptMessageBegin);
        let mut c = CMessageParams::new(params);
        let (pp, pl) = c.as_raw();
        // SAFETY: as in `encrypt_message`.
        check(unsafe { f(s, pp, pl, input(aad), ul(aad.len())) })
    }

    /// `C_DecryptMessageNext`; `last` sets `CKF_END_OF_MESSAGE`.
    pub fn decrypt_message_next(
        &self,
        s: CK_SESSION_HANDLE,
        params: &mut MessageParams,
        data: &[u8],
        out: &mut OutBuf,
        last: bool,
    ) -> CkResult<()> {
        linked!(self, |b| b.decrypt_message_next(s, params, data, out, last));
        let f = func!(self.C_DecryptMessageNext);
        let flags = if last { CKF_END_OF_MESSAGE } else { 0 };
        let mut c = CMessageParams::new(params);
        let (pp, pl) = c.as_raw();
        // SAFETY: as in `encrypt_message`.
        out_call(out, |p, n| unsafe {
            f(s, pp, pl, input(data), ul(data.len()), p, n, flags)
        })
    }

    // ----- Key management -----

    /// `C_GenerateKey`.
    pub fn generate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        linked!(self, |b| b.generate_key(s, mech, template));
        let f = func!(self.C_GenerateKey);
        let mut m = CMechanism::new(mech);
        let mut t = CTemplate::new(template)?;
        let mut h: CK_OBJECT_HANDLE = 0;
        // SAFETY: a function of the loaded module; a mechanism and a template that live
        // across the call, an out handle.
        check(unsafe { f(s, m.as_mut_ptr(), t.as_mut_ptr(), t.count(), &mut h) })?;
        made(h)
    }

    /// `C_GenerateKeyPair`: (public, private).
    pub fn generate_key_pair(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        public_template: &[Attribute],
        private_template: &[Attribute],
    ) -> CkResult<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        linked!(self, |b| b.generate_key_pair(
            s,
            mech,
            public_template,
            private_template
        ));
        let f = func!(self.C_GenerateKeyPair);
        let mut m = CMechanism::new(mech);
        let mut public = CTemplate::new(public_template)?;
        let mut private = CTemplate::new(private_template)?;
        let (mut hpub, mut hpriv): (CK_OBJECT_HANDLE, CK_OBJECT_HANDLE) = (0, 0);
        // SAFETY: as in `generate_key`.
        check(unsafe {
            f(
                s,
                m.as_mut_ptr(),
                public.as_mut_ptr(),
                public.count(),
                private.as_mut_ptr(),
                private.count(),
                &mut hpub,
                &mut hpriv,
            )
        })?;
        Ok((made(hpub)?, made(hpriv)?))
    }

    /// `C_WrapKey`.
    pub fn wrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        wrapping_key: CK_OBJECT_HANDLE,
        key: CK_OBJECT_HANDLE,
        out: &mut OutBuf,
    ) -> CkResult<()> {
        linked!(self, |b| b.wrap_key(s, mech, wrapping_key, key, out));
        let f = func!(self.C_WrapKey);
        let mut m = CMechanism::new(mech);
        let mp = m.as_mut_ptr();
        // SAFETY: a function of the loaded module; a mechanism that lives across the call
        // and the caller's output buffer (or NULL) with its capacity.
        out_call(out, |p, n| unsafe { f(s, mp, wrapping_key, key, p, n) })
    }

    /// `C_UnwrapKey`.
    pub fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        unwrapping_key: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        linked!(self, |b| b.unwrap_key(
            s,
            mech,
            unwrapping_key,
            wrapped,
            template
        ));
        let f = func!(self.C_UnwrapKey);
        let mut m = CMechanism::new(mech);
        let mut t = CTemplate::new(template)?;
        let mut h: CK_OBJECT_HANDLE = 0;
        // SAFETY: as in `generate_key`, plus an input buffer.
        check(unsafe {
            f(
                s,
                m.as_mut_ptr(),
                unwrapping_key,
                input(wrapped),
                ul(wrapped.len()),
                t.as_mut_ptr(),
                t.count(),
                &mut h,
            )
        })?;
        made(h)
    }

    /// `C_DeriveKey`.
    pub fn derive_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        base_key: CK_OBJECT_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        linked!(self, |b| b.derive_key(s, mech, base_key, template));
        let f = func!(self.C_DeriveKey);
        let mut m = CMechanism::new(mech);
        let mut t = CTemplate::new(template)?;
        let mut h: CK_OBJECT_HANDLE = 0;
        // SAFETY: as in `generate_key`.
        check(unsafe {
            f(
                s,
                m.as_mut_ptr(),
                base_key,
                t.as_mut_ptr(),
                t.count(),
                &mut h,
            )
        })?;
        made(h)
    }

    /// `C_EncapsulateKey` (3.2): the ciphertext follows the two-call protocol; the new key's
    /// handle once the ciphertext was written, `None` for a size query.
    pub fn encapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        public_key: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ciphertext: &mut OutBuf,
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        linked!(self, |b| b
            .encapsulate_key(s, mech, public_key, template, ciphertext));
        let f = func!(self.C_EncapsulateKey);
        let mut m = CMechanism::new(mech);
        let mut t = CTemplate::new(template)?;
        let (mp, tp, tn) = (m.as_mut_ptr(), t.as_mut_ptr(), t.count());
        let query = ciphertext.is_query();
        let mut h: CK_OBJECT_HANDLE = 0;
        // SAFETY: as in `generate_key`, plus the caller's output buffer (or NULL) with its
        // capacity.
        out_call(ciphertext, |p, n| unsafe {
            f(s, mp, public_key, tp, tn, p, n, &mut h)
        })?;
        if query {
            Ok(None)
        } else {
            made(h).map(Some)
        }
    }

    /// `C_DecapsulateKey` (3.2).
    pub fn decapsulate_key(
        &self,
        s: CK_SESSION_HANDLE,
        mech: &Mechanism,
        private_key: CK_OBJECT_HANDLE,
        template: &[Attribute],
        ciphertext: &[u8],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        linked!(self, |b| b.decapsulate_key(
            s,
            mech,
            private_key,
            template,
            ciphertext
        ));
        let f = func!(self.C_DecapsulateKey);
        let mut m = CMechanism::new(mech);
        let mut t = CTemplate::new(template)?;
        let mut h: CK_OBJECT_HANDLE = 0;
        // SAFETY: as in `generate_key`, plus an input buffer.
        check(unsafe {
            f(
                s,
                m.as_mut_ptr(),
                private_key,
                t.as_mut_ptr(),
                t.count(),
                input(ciphertext),
                ul(ciphertext.len()),
                &mut h,
            )
        })?;
        made(h)
    }

    // ----- Random number generation -----

    /// `C_GenerateRandom`: fills `out`.
    pub fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        linked!(self, |b| b.generate_random(s, out));
        let f = func!(self.C_GenerateRandom);
        // SAFETY: a function of the loaded module; a writable buffer of the stated length.
        check(unsafe { f(s, out.as_mut_ptr(), ul(out.len())) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn ok_reserved(_: *mut c_void) -> CK_RV {
        CKR_OK
    }
    extern "C" fn no_slots(_: CK_BBOOL, _: *mut CK_SLOT_ID, n: *mut CK_ULONG) -> CK_RV {
        // SAFETY: the test passes a valid count.
        unsafe { n.write(0) };
        CKR_OK
    }
    extern "C" fn open(
        _: CK_SLOT_ID,
        _: CK_FLAGS,
        _: *mut c_void,
        _: CK_NOTIFY,
        _: *mut CK_SESSION_HANDLE,
    ) -> CK_RV {
        CKR_SLOT_ID_INVALID
    }
    extern "C" fn cancel(_: CK_SESSION_HANDLE, _: CK_FLAGS) -> CK_RV {
        CKR_OK
    }

    fn read<T>(t: &T) -> Result<CK_FUNCTION_LIST_3_2, LoadError> {
        // SAFETY: `t` is a table of the version it states (the entries not set are NULL).
        unsafe {
            read_table(
                (t as *const T).cast(),
                Path::new("/m.so"),
                CK_VERSION { major: 3, minor: 2 },
            )
        }
    }

    /// A 3.0 table with the basics and `C_SessionCancel`, stating `version`.
    fn table_3_0(version: CK_VERSION) -> CK_FUNCTION_LIST_3_0 {
        CK_FUNCTION_LIST_3_0 {
            version,
            C_Initialize: Some(ok_reserved),
            C_Finalize: Some(ok_reserved),
            C_GetSlotList: Some(no_slots),
            C_OpenSession: Some(open),
            C_SessionCancel: Some(cancel),
            ..Default::default()
        }
    }

    #[test]
    fn a_function_list_is_read_as_a_2_40_table_whatever_version_it_states() {
        // A module without C_GetInterface whose C_GetFunctionList answers a CK_FUNCTION_LIST
        // stamped 3.0: the 3.x entries past its end are not read (they were, and the
        // framework called whatever lay there).
        let stamped = Box::new(CK_FUNCTION_LIST {
            version: CK_VERSION { major: 3, minor: 0 },
            C_Initialize: Some(ok_reserved),
            C_Finalize: Some(ok_reserved),
            C_GetSlotList: Some(no_slots),
            C_OpenSession: Some(open),
            ..Default::default()
        });
        // SAFETY: a CK_FUNCTION_LIST, as the 2.40 layout asked for reads.
        let fl = unsafe {
            read_table(
                (&*stamped as *const CK_FUNCTION_LIST).cast(),
                Path::new("/m.so"),
                VERSION_2_40,
            )
        }
        .unwrap();
        assert_eq!((fl.version.major, fl.version.minor), (2, 40));
        assert!(fl.C_SessionCancel.is_none() && fl.C_LoginUser.is_none());
        // An interface asked for as 3.0 whose table states 3.2 is read as 3.0.
        let v30 = table_3_0(CK_VERSION { major: 3, minor: 2 });
        // SAFETY: a 3.0 table, as the layout asked for reads.
        let fl = unsafe {
            read_table(
                (&v30 as *const CK_FUNCTION_LIST_3_0).cast(),
                Path::new("/m.so"),
                CK_VERSION { major: 3, minor: 0 },
            )
        }
        .unwrap();
        assert_eq!((fl.version.major, fl.version.minor), (3, 0));
        assert!(fl.C_SessionCancel.is_some() && fl.C_VerifySignature.is_none());
    }

    #[test]
    fn codes_no_specification_names_become_general_error() {
        assert_eq!(check(0x1234_5678), Err(CKR_GENERAL_ERROR));
        assert_eq!(check(CKR_SIGNATURE_INVALID), Err(CKR_SIGNATURE_INVALID));
        assert_eq!(
            check(CKR_VENDOR_DEFINED | 0x42),
            Err(CKR_VENDOR_DEFINED | 0x42)
        );
        let mut room = [0u8; 8];
        let mut out = OutBuf::new(Some(&mut room[..]));
        assert_eq!(
            out_call(&mut out, |_, _| 0x1234_5678),
            Err(CKR_GENERAL_ERROR)
        );
    }

    #[test]
    fn too_small_for_a_length_that_fits_is_the_modules_fault() {
        let mut room = [0u8; 64];
        let mut out = OutBuf::new(Some(&mut room[..]));
        let r = out_call(&mut out, |_, n| {
            // SAFETY: the length pointer out_call gives.
            unsafe { *n = 1 };
            CKR_BUFFER_TOO_SMALL
        });
        assert_eq!(r, Err(CKR_GENERAL_ERROR));
        // A length beyond the room is the protocol: reported, with CKR_BUFFER_TOO_SMALL.
        let mut out = OutBuf::new(Some(&mut room[..]));
        let r = out_call(&mut out, |_, n| {
            // SAFETY: as above.
            unsafe { *n = 65 };
            CKR_BUFFER_TOO_SMALL
        });
        assert_eq!((r, out.len()), (Err(CKR_BUFFER_TOO_SMALL), 65));
    }

    #[test]
    fn tables_of_each_version() {
        let v2 = CK_FUNCTION_LIST {
            version: CK_VERSION {
                major: 2,
                minor: 40,
            },
            C_Initialize: Some(ok_reserved),
            C_Finalize: Some(ok_reserved),
            C_GetSlotList: Some(no_slots),
            C_OpenSession: Some(open),
            ..Default::default()
        };
        let fl = read(&v2).unwrap();
        assert_eq!((fl.version.major, fl.version.minor), (2, 40));
        assert!(fl.C_Initialize.is_some() && fl.C_GetSlotList.is_some());
        assert!(fl.C_SessionCancel.is_none() && fl.C_EncapsulateKey.is_none());

        let v3 = table_3_0(CK_VERSION { major: 3, minor: 0 });
        let fl = read(&v3).unwrap();
        assert_eq!((fl.version.major, fl.version.minor), (3, 0));
        assert!(fl.C_SessionCancel.is_some());
        assert!(fl.C_EncapsulateKey.is_none() && fl.C_VerifySignature.is_none());

        // Unknown versions and tables without the basics are refused.
        let v4 = CK_FUNCTION_LIST {
            version: CK_VERSION { major: 4, minor: 0 },
            ..v2
        };
        assert_eq!(
            read(&v4).unwrap_err().to_string(),
            "/m.so: bad PKCS#11 function list: unsupported version 4.0"
        );
        let no_init = CK_FUNCTION_LIST {
            C_Initialize: None,
            ..v2
        };
        assert_eq!(
            read(&no_init).unwrap_err().to_string(),
            "/m.so: bad PKCS#11 function list: the table has no C_Initialize"
        );
    }

    #[test]
    fn output_lengths_follow_the_two_call_protocol() {
        // Size query: NULL goes out, the module's length comes back.
        let mut q = OutBuf::new(None);
        let r = out_call(&mut q, |p, n| {
            assert!(p.is_null());
            // SAFETY: `n` is the length out_call passed.
            unsafe { n.write(40) };
            CKR_OK
        });
        assert_eq!((r, q.len()), (Ok(()), 40));
        // Too small: the needed length is recorded with the error.
        let mut small = [0u8; 8];
        let mut o = OutBuf::new(Some(&mut small));
        let r = out_call(&mut o, |p, n| {
            assert!(!p.is_null());
            // SAFETY: as above.
            unsafe {
                assert_eq!(n.read(), 8);
                n.write(40);
            }
            CKR_BUFFER_TOO_SMALL
        });
        assert_eq!((r, o.len()), (Err(CKR_BUFFER_TOO_SMALL), 40));
        // A module that claims more than the buffer holds is an error.
        let mut o = OutBuf::new(Some(&mut small));
        let r = out_call(&mut o, |_, n| {
            // SAFETY: as above.
            unsafe { n.write(9) };
            CKR_OK
        });
        assert_eq!(r, Err(CKR_GENERAL_ERROR));
        // Other errors pass through.
        let mut o = OutBuf::new(Some(&mut small));
        assert_eq!(
            out_call(&mut o, |_, _| CKR_KEY_HANDLE_INVALID),
            Err(CKR_KEY_HANDLE_INVALID)
        );
    }
}
