//! The OpenCF accelerator provider, `libopencf_accel.so`: RSA private-key operations for
//! 2048-, 3072- and 4096-bit keys on a multi-buffer AVX-512 IFMA engine, and single large
//! AES-GCM, AES-CTR and AES-ECB operations split across cores, behind the framework's
//! metaslot. See docs/ACCEL.md.
//!
//! * one slot (0), token "OpenCF Accelerator", no login needed (`C_Login` is accepted and
//!   ignored, see [`Accel::login`]); session objects only;
//! * [`engine`]: the lane engines; [`rsa`]: a key's engine form and the raw private
//!   operation; [`ct`]: constant-time scalar arithmetic around the engine; [`sched`]: the
//!   worker threads and batching; [`mech`]: mechanisms and padding; [`objects`]: session
//!   objects; [`gcm`]: the bulk engine and its AES-GCM, on [`gf128`] arithmetic; [`blocks`]:
//!   AES-CTR and AES-ECB on the bulk engine; [`fault`]: the test-only fault switch.
//!
//! The crate denies `unsafe` code; the one exception is the call into the IFMA engine after
//! the CPU check (`engine::run`), and the items `pkcs11_module!` generates.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod blocks;
pub mod ct;
pub mod ecdsa;
pub mod engine;
pub mod fault;
pub mod gcm;
pub mod gf128;
pub mod mech;
pub mod objects;
pub mod pad;
pub mod pending;
pub mod rsa;
pub mod sched;

use blocks::{BulkOp, CtrOp, EcbOp};
use fault::Fault;
use gcm::{Bulk, GcmOp};
use mech::{DecryptOp, Prepared, SignOp};
use objects::{Material, Object};
use opencf_abi::sys::*;
use opencf_abi::{
    pad_field, AsyncDone, AttrValue, Attribute, Backend, CkResult, InitArgs, MechParam, Mechanism,
    OutBuf,
};
use openssl::cipher::Cipher;
use openssl::cipher_ctx::{CipherCtx, CipherCtxFlags};
use pending::{AsyncOp, Then};
use sched::Scheduler;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use zeroize::Zeroizing;

/// The token label.
pub const LABEL: &str = "OpenCF Accelerator";
/// The one slot.
pub const SLOT: CK_SLOT_ID = 0;

/// An active decryption: RSA, or one on the bulk engine.
enum Decrypt {
    Rsa(DecryptOp),
    Bulk(BulkOp),
}

/// An active signature: RSA, or ECDSA with a P-256 key.
enum Sign {
    Rsa(SignOp),
    Ecdsa(ecdsa::EcdsaOp),
}

impl Sign {
    fn sig_len(&self) -> usize {
        match self {
            Sign::Rsa(op) => op.sig_len(),
            Sign::Ecdsa(op) => op.sig_len(),
        }
    }
}

#[derive(Default)]
struct Session {
    flags: CK_FLAGS,
    find: Option<Vec<CK_OBJECT_HANDLE>>,
    sign: Option<Sign>,
    encrypt: Option<BulkOp>,
    decrypt: Option<Decrypt>,
    /// An operation that answered `CKR_PENDING` (asynchronous sessions: one at a time).
    pending: Option<AsyncOp>,
}

impl Session {
    /// The operation pending for `function` (`"C_Sign"`, `"C_Decrypt"`), if any.
    fn pending_of(&self, function: &str) -> Option<&AsyncOp> {
        self.pending.as_ref().filter(|p| p.function == function)
    }
}

type Shared<T> = RwLock<HashMap<u64, Arc<T>>>;

/// An operation of the bulk engine taken out of its session for one step.
type Taken = (Arc<Mutex<Session>>, BulkOp);

/// The provider.
pub struct Accel {
    engine: Option<engine::Kind>,
    sched: Scheduler,
    /// ECDSA requests of asynchronous sessions waiting for a pass.
    gather: ecdsa::Gather,
    /// The bulk engine, when offered here ([`gcm::available`]).
    bulk: Option<Bulk>,
    sessions: Shared<Mutex<Session>>,
    objects: Shared<Object>,
    next_handle: AtomicU64,
    logged_in: AtomicBool,
}

fn read<T>(m: &Shared<T>) -> std::sync::RwLockReadGuard<'_, HashMap<u64, Arc<T>>> {
    m.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(m: &Shared<T>) -> std::sync::RwLockWriteGuard<'_, HashMap<u64, Arc<T>>> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

fn lock(s: &Mutex<Session>) -> std::sync::MutexGuard<'_, Session> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn version() -> CK_VERSION {
    CK_VERSION { major: 0, minor: 1 }
}

impl Accel {
    fn check_slot(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        if slot == SLOT {
            Ok(())
        } else {
            Err(CKR_SLOT_ID_INVALID)
        }
    }

    fn session(&self, s: CK_SESSION_HANDLE) -> CkResult<Arc<Mutex<Session>>> {
        read(&self.sessions)
            .get(&s)
            .cloned()
            .ok_or(CKR_SESSION_HANDLE_INVALID)
    }

    fn object(&self, h: CK_OBJECT_HANDLE) -> CkResult<Arc<Object>> {
        read(&self.objects)
            .get(&h)
            .cloned()
            .ok_or(CKR_OBJECT_HANDLE_INVALID)
    }

    /// A key of class `class` and type `key_type` for an operation: `CKR_KEY_HANDLE_INVALID`
    /// when unknown, then its kind (`CKR_KEY_TYPE_INCONSISTENT`, after which the framework asks
    /// the next provider, whose answer the caller then gets), the usage attribute and the
    /// allowed mechanisms. The kind comes first, as in the software token: a key of the
    /// wrong kind that also lacks the usage flag is `CKR_KEY_TYPE_INCONSISTENT` in both.
    fn key(
        &self,
        h: CK_OBJECT_HANDLE,
        (class, key_type): (CK_OBJECT_CLASS, CK_KEY_TYPE),
        usage: CK_ATTRIBUTE_TYPE,
        mech: CK_MECHANISM_TYPE,
    ) -> CkResult<Arc<Object>> {
        let o = self.object(h).map_err(|_| CKR_KEY_HANDLE_INVALID)?;
        if o.class != class || o.key_type != key_type {
            return Err(CKR_KEY_TYPE_INCONSISTENT);
        }
        if !o.flag(usage) {
            return Err(CKR_KEY_FUNCTION_NOT_PERMITTED);
        }
        if !o.allows(mech) {
            return Err(CKR_MECHANISM_INVALID);
        }
        Ok(o)
    }

    fn add_object(&self, o: Object) -> CK_OBJECT_HANDLE {
        let h = self.next_handle.fetch_add(1, Ordering::Relaxed);
        write(&self.objects).insert(h, Arc::new(o));
        h
    }

    /// A private key of type `key_type` for `mech` on an engine (`CKR_MECHANISM_INVALID`
    /// without one); the caller takes its engine form (`Object::rsa`, `Object::ecdsa`).
    fn engine_key(
        &self,
        h: CK_OBJECT_HANDLE,
        key_type: CK_KEY_TYPE,
        usage: CK_ATTRIBUTE_TYPE,
        mech: CK_MECHANISM_TYPE,
    ) -> CkResult<Arc<Object>> {
        if self.engine.is_none() {
            return Err(CKR_MECHANISM_INVALID);
        }
        self.key(h, (CKO_PRIVATE_KEY, key_type), usage, mech)
    }

    /// A `CKM_AES_GCM`, `CKM_AES_CTR` or `CKM_AES_ECB` operation with AES key `h`
    /// (`CKR_MECHANISM_INVALID` without the bulk engine).
    fn bulk_op(&self, m: &Mechanism, h: CK_OBJECT_HANDLE, encrypt: bool) -> CkResult<BulkOp> {
        if self.bulk.is_none() || !mech::BULK_MECHS.contains(&m.mechanism) {
            return Err(CKR_MECHANISM_INVALID);
        }
        let usage = if encrypt { CKA_ENCRYPT } else { CKA_DECRYPT };
        let o = self.key(h, (CKO_SECRET_KEY, CKK_AES), usage, m.mechanism)?;
        match m.mechanism {
            CKM_AES_GCM => GcmOp::new(m, o.gcm()?, encrypt).map(BulkOp::Gcm),
            CKM_AES_CTR => CtrOp::new(m, o.aes()?, encrypt).map(BulkOp::Ctr),
            _ => EcbOp::new(m, o.aes()?, encrypt).map(BulkOp::Ecb),
        }
    }

    /// Runs one step `f` of the bulk operation `op` taken from session `sess`, with the
    /// PKCS#11 rules: a size query or `CKR_BUFFER_TOO_SMALL` keeps the operation, as does a
    /// successful step that does not `finish` it; anything else ends it. A single-part step
    /// (`one_shot`) obeys the fault switch first (`busy`: `CKR_DEVICE_MEMORY`,
    /// `engine-error`: `CKR_DEVICE_ERROR`, both recoverable for the framework).
    fn bulk_step(
        &self,
        sess: &Mutex<Session>,
        mut op: BulkOp,
        finishes: bool,
        one_shot: bool,
        out: &mut OutBuf,
        f: impl FnOnce(&mut BulkOp, &Bulk, &mut OutBuf) -> CkResult<()>,
    ) -> CkResult<()> {
        let bulk = self.bulk.as_ref().ok_or(CKR_FUNCTION_FAILED)?;
        let r = match fault::current() {
            Fault::Busy if one_shot => Err(CKR_DEVICE_MEMORY),
            Fault::EngineError if one_shot => Err(CKR_DEVICE_ERROR),
            _ => f(&mut op, bulk, out),
        };
        let keep = match r {
            Ok(()) => out.is_query() || !finishes,
            Err(e) => e == CKR_BUFFER_TOO_SMALL,
        };
        if keep {
            let mut st = lock(sess);
            if op.encrypts() {
                st.encrypt = Some(op);
            } else {
                st.decrypt = Some(Decrypt::Bulk(op));
            }
        }
        r
    }

    /// `C_EncryptUpdate` / `C_DecryptUpdate` on a bulk operation taken out of its session.
    fn bulk_update(&self, taken: CkResult<Taken>, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let (sess, op) = taken?;
        self.bulk_step(&sess, op, false, false, out, |op, bulk, out| {
            op.update(bulk, data, out)
        })
    }

    /// `C_EncryptFinal` / `C_DecryptFinal` on a bulk operation taken out of its session.
    fn bulk_final(&self, taken: CkResult<Taken>, out: &mut OutBuf) -> CkResult<()> {
        let (sess, op) = taken?;
        self.bulk_step(&sess, op, true, false, out, |op, bulk, out| {
            op.finalize(bulk, out)
        })
    }

    /// The active operation of session `s` in the slot `field` picks, taken out of it.
    fn take<T>(
        &self,
        s: CK_SESSION_HANDLE,
        field: impl Fn(&mut Session) -> &mut Option<T>,
    ) -> CkResult<(Arc<Mutex<Session>>, T)> {
        let sess = self.session(s)?;
        let op = field(&mut lock(&sess))
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        Ok((sess, op))
    }

    /// The active encryption of session `s`, taken out of it.
    fn take_encrypt(&self, s: CK_SESSION_HANDLE) -> CkResult<Taken> {
        self.take(s, |st| &mut st.encrypt)
    }

    /// The active bulk decryption of session `s`, taken out of it; an RSA decryption
    /// ends with `CKR_FUNCTION_NOT_SUPPORTED` (it has no multi-part form).
    fn take_bulk_decrypt(&self, s: CK_SESSION_HANDLE) -> CkResult<Taken> {
        match self.take(s, |st| &mut st.decrypt)? {
            (sess, Decrypt::Bulk(op)) => Ok((sess, op)),
            (_, Decrypt::Rsa(_)) => Err(CKR_FUNCTION_NOT_SUPPORTED),
        }
    }

    /// Starts an operation in the slot `field` picks: `CKR_OPERATION_ACTIVE` when one runs.
    fn start<T>(
        &self,
        s: CK_SESSION_HANDLE,
        field: impl Fn(&mut Session) -> &mut Option<T>,
        make: impl FnOnce() -> CkResult<T>,
    ) -> CkResult<()> {
        let sess = self.session(s)?;
        if field(&mut lock(&sess)).is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        let op = make()?;
        *field(&mut lock(&sess)) = Some(op);
        Ok(())
    }

    /// The scheduler's counters (tests).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// `CKR_OPERATION_ACTIVE` while `function` is pending in session `s`: its operation has
    /// not ended until `C_AsyncComplete` reports it.
    fn not_pending(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<()> {
        let sess = self.session(s)?;
        if lock(&sess).pending_of(function).is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        Ok(())
    }

    /// A `CKM_ECDSA` signature of `data`: OpenSSL's at once in an ordinary session; in an
    /// asynchronous one, a request gathered for the engine's next pass (`CKR_PENDING`, or
    /// the signature at once when this request completed a pass).
    fn ecdsa_sign(
        &self,
        sess: &Mutex<Session>,
        op: &ecdsa::EcdsaOp,
        asynchronous: bool,
        data: &[u8],
        out: &mut OutBuf,
    ) -> CkResult<()> {
        let kind = match self.engine {
            Some(kind) if asynchronous => kind,
            _ => return out.write(&op.key().sign_openssl(data)?).map(|_| ()),
        };
        let req = self.gather.submit(kind, op.key().clone(), data)?;
        match req.take() {
            Some(r) => out.write(&r?).map(|_| ()),
            None => {
                lock(sess).pending = Some(AsyncOp::ecdsa(req));
                Err(CKR_PENDING)
            }
        }
    }

    /// In an asynchronous session, an operation `prepare`d for the engine is queued and the
    /// call answers `CKR_PENDING`; one done at once (OpenSSL's path) is written to `out`.
    fn maybe_pending(
        &self,
        sess: &Mutex<Session>,
        function: &'static str,
        prepared: Prepared<'_>,
        key: &Arc<rsa::RsaKey>,
        then: Then,
        out: &mut OutBuf,
    ) -> CkResult<()> {
        match prepared {
            Prepared::Done(v) => out.write(&v).map(|_| ()),
            Prepared::Engine(ticket, input) => {
                let op = AsyncOp::start(function, &self.sched, ticket, key.clone(), input, then)?;
                lock(sess).pending = Some(op);
                Err(CKR_PENDING)
            }
        }
    }
}

/// Unwraps `wrapped` under the AES key `kek` (RFC 3394, or RFC 5649 with `pad`), with the
/// default initial value only.
fn aes_unwrap(
    kek: &[u8],
    pad: bool,
    iv: &MechParam,
    wrapped: &[u8],
) -> CkResult<Zeroizing<Vec<u8>>> {
    let default_iv: &[u8] = if pad {
        &[0xa6, 0x59, 0x59, 0xa6]
    } else {
        &[0xa6; 8]
    };
    match iv {
        MechParam::None => {}
        MechParam::Bytes(b) if b.is_empty() || b == default_iv => {}
        _ => return Err(CKR_MECHANISM_PARAM_INVALID),
    }
    let cipher = match (kek.len(), pad) {
        (16, false) => Cipher::aes_128_wrap(),
        (24, false) => Cipher::aes_192_wrap(),
        (32, false) => Cipher::aes_256_wrap(),
        (16, true) => Cipher::aes_128_wrap_pad(),
        (24, true) => Cipher::aes_192_wrap_pad(),
        (32, true) => Cipher::aes_256_wrap_pad(),
        _ => return Err(CKR_UNWRAPPING_KEY_SIZE_RANGE),
    };
    if wrapped.len() < 16 || !wrapped.len().is_multiple_of(8) {
        return Err(CKR_WRAPPED_KEY_LEN_RANGE);
    }
    let bad = |_| CKR_WRAPPED_KEY_INVALID;
    let mut ctx = CipherCtx::new().map_err(|_| CKR_HOST_MEMORY)?;
    ctx.set_flags(CipherCtxFlags::FLAG_WRAP_ALLOW);
    ctx.decrypt_init(Some(cipher), Some(kek), None)
        .map_err(bad)?;
    let mut out = Zeroizing::new(vec![0u8; wrapped.len() + 16]);
    let n = ctx.cipher_update(wrapped, Some(&mut out)).map_err(bad)?;
    out.truncate(n);
    Ok(out)
}

impl Backend for Accel {
    fn initialize(_args: &InitArgs) -> CkResult<Self> {
        let engine = engine::provider_engine();
        Ok(Accel {
            engine,
            sched: Scheduler::new(engine.unwrap_or(engine::Kind::Portable)),
            gather: ecdsa::Gather::default(),
            bulk: gcm::available().then(Bulk::default),
            sessions: RwLock::default(),
            objects: RwLock::default(),
            next_handle: AtomicU64::new(1),
            logged_in: AtomicBool::new(false),
        })
    }

    fn finalize(&self) {
        self.sched.shutdown();
        if let Some(b) = &self.bulk {
            b.shutdown();
        }
        write(&self.sessions).clear();
        write(&self.objects).clear();
    }

    fn get_info(&self) -> CkResult<CK_INFO> {
        Ok(CK_INFO {
            cryptokiVersion: CK_VERSION { major: 3, minor: 2 },
            manufacturerID: pad_field("OpenCF"),
            flags: 0,
            libraryDescription: pad_field("OpenCF accelerator"),
            libraryVersion: version(),
        })
    }

    fn get_slot_list(&self, _token_present: bool) -> CkResult<Vec<CK_SLOT_ID>> {
        Ok(vec![SLOT])
    }

    fn get_slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO> {
        self.check_slot(slot)?;
        Ok(CK_SLOT_INFO {
            slotDescription: pad_field(LABEL),
            manufacturerID: pad_field("OpenCF"),
            flags: CKF_TOKEN_PRESENT,
            hardwareVersion: version(),
            firmwareVersion: version(),
        })
    }

    fn get_token_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
        self.check_slot(slot)?;
        let sessions = read(&self.sessions);
        let rw = sessions
            .values()
            .filter(|s| lock(s).flags & CKF_RW_SESSION != 0)
            .count();
        let model = match self.engine {
            Some(engine::Kind::Ifma) => "AVX-512 IFMA",
            _ => "no RSA engine",
        };
        Ok(CK_TOKEN_INFO {
            label: pad_field(LABEL),
            manufacturerID: pad_field("OpenCF"),
            model: pad_field(model),
            serialNumber: pad_field("accel-0"),
            flags: CKF_TOKEN_INITIALIZED
                | CKF_RNG
                | CKF_USER_PIN_INITIALIZED
                | CKF_ASYNC_SESSION_SUPPORTED,
            ulMaxSessionCount: CK_EFFECTIVELY_INFINITE,
            ulSessionCount: sessions.len() as CK_ULONG,
            ulMaxRwSessionCount: CK_EFFECTIVELY_INFINITE,
            ulRwSessionCount: rw as CK_ULONG,
            ulMaxPinLen: 256,
            ulMinPinLen: 0,
            ulTotalPublicMemory: CK_UNAVAILABLE_INFORMATION,
            ulFreePublicMemory: CK_UNAVAILABLE_INFORMATION,
            ulTotalPrivateMemory: CK_UNAVAILABLE_INFORMATION,
            ulFreePrivateMemory: CK_UNAVAILABLE_INFORMATION,
            hardwareVersion: version(),
            firmwareVersion: version(),
            utcTime: [b' '; 16],
        })
    }

    fn get_mechanism_list(&self, slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>> {
        self.check_slot(slot)?;
        Ok(mech::list(self.engine.is_some(), self.bulk.is_some()))
    }

    fn get_mechanism_info(
        &self,
        slot: CK_SLOT_ID,
        m: CK_MECHANISM_TYPE,
    ) -> CkResult<CK_MECHANISM_INFO> {
        self.check_slot(slot)?;
        mech::info(self.engine.is_some(), self.bulk.is_some(), m)
    }

    fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        self.check_slot(slot)?;
        if flags & CKF_SERIAL_SESSION == 0 {
            return Err(CKR_SESSION_PARALLEL_NOT_SUPPORTED);
        }
        let h = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let s = Session {
            flags,
            ..Session::default()
        };
        write(&self.sessions).insert(h, Arc::new(Mutex::new(s)));
        Ok(h)
    }

    fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        write(&self.sessions)
            .remove(&s)
            .ok_or(CKR_SESSION_HANDLE_INVALID)?;
        write(&self.objects).retain(|_, o| o.session != s);
        if read(&self.sessions).is_empty() {
            self.logged_in.store(false, Ordering::Relaxed);
        }
        Ok(())
    }

    fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        self.check_slot(slot)?;
        write(&self.sessions).clear();
        write(&self.objects).clear();
        self.logged_in.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        let sess = self.session(s)?;
        let flags = lock(&sess).flags;
        let rw = flags & CKF_RW_SESSION != 0;
        let state = match (self.logged_in.load(Ordering::Relaxed), rw) {
            (true, true) => CKS_RW_USER_FUNCTIONS,
            (true, false) => CKS_RO_USER_FUNCTIONS,
            (false, true) => CKS_RW_PUBLIC_SESSION,
            (false, false) => CKS_RO_PUBLIC_SESSION,
        };
        Ok(CK_SESSION_INFO {
            slotID: SLOT,
            state,
            flags: flags & (CKF_RW_SESSION | CKF_SERIAL_SESSION),
            ulDeviceError: 0,
        })
    }

    fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        if flags & CKF_SIGN != 0 {
            st.sign = None;
        }
        // A pending operation of a cancelled kind is dropped (its halves still run; the
        // results are thrown away).
        if (flags & CKF_SIGN != 0 && st.pending_of("C_Sign").is_some())
            || (flags & CKF_DECRYPT != 0 && st.pending_of("C_Decrypt").is_some())
        {
            st.pending = None;
        }
        if flags & CKF_ENCRYPT != 0 {
            st.encrypt = None;
        }
        if flags & CKF_DECRYPT != 0 {
            st.decrypt = None;
        }
        if flags & CKF_FIND_OBJECTS != 0 {
            st.find = None;
        }
        Ok(())
    }

    fn async_complete(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<AsyncDone> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        let p = st
            .pending_of(function)
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let Some(r) = p.poll(self.sched.kind(), &self.gather) else {
            return Ok(AsyncDone::Pending);
        };
        st.pending = None;
        r.map(AsyncDone::Output)
    }

    /// Pending operations do not outlive `C_Finalize` here.
    fn async_get_id(&self, s: CK_SESSION_HANDLE, function: &str) -> CkResult<CK_ULONG> {
        let sess = self.session(s)?;
        let pending = lock(&sess).pending_of(function).is_some();
        Err(if pending {
            CKR_STATE_UNSAVEABLE
        } else {
            CKR_OPERATION_NOT_INITIALIZED
        })
    }

    /// No identifier is ever handed out ([`Accel::async_get_id`]).
    fn async_join(&self, s: CK_SESSION_HANDLE, _function: &str, _id: CK_ULONG) -> CkResult<()> {
        self.session(s)?;
        Err(CKR_SAVED_STATE_INVALID)
    }

    /// `C_Login`: the token needs no login; a user login is accepted with any PIN and only
    /// changes the reported session state. A second login answers
    /// `CKR_USER_ALREADY_LOGGED_IN`; the SO cannot log in (`CKR_USER_TYPE_INVALID`).
    fn login(&self, s: CK_SESSION_HANDLE, user: CK_USER_TYPE, _pin: &[u8]) -> CkResult<()> {
        self.session(s)?;
        match user {
            CKU_USER | CKU_CONTEXT_SPECIFIC => {}
            CKU_SO => return Err(CKR_USER_TYPE_INVALID),
            _ => return Err(CKR_USER_TYPE_INVALID),
        }
        if user == CKU_CONTEXT_SPECIFIC {
            return Ok(());
        }
        if self.logged_in.swap(true, Ordering::Relaxed) {
            return Err(CKR_USER_ALREADY_LOGGED_IN);
        }
        Ok(())
    }

    fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.session(s)?;
        if !self.logged_in.swap(false, Ordering::Relaxed) {
            return Err(CKR_USER_NOT_LOGGED_IN);
        }
        Ok(())
    }

    fn create_object(
        &self,
        s: CK_SESSION_HANDLE,
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.session(s)?;
        let o = Object::new(template, Material::Template, s)?;
        Ok(self.add_object(o))
    }

    fn destroy_object(&self, s: CK_SESSION_HANDLE, obj: CK_OBJECT_HANDLE) -> CkResult<()> {
        self.session(s)?;
        write(&self.objects)
            .remove(&obj)
            .map(|_| ())
            .ok_or(CKR_OBJECT_HANDLE_INVALID)
    }

    fn get_attribute_value(
        &self,
        s: CK_SESSION_HANDLE,
        obj: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
    ) -> CkResult<Vec<AttrValue>> {
        self.session(s)?;
        let o = self.object(obj)?;
        Ok(types.iter().map(|t| o.attribute(*t)).collect())
    }

    fn find_objects_init(&self, s: CK_SESSION_HANDLE, template: &[Attribute]) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        if st.find.is_some() {
            return Err(CKR_OPERATION_ACTIVE);
        }
        let mut found: Vec<CK_OBJECT_HANDLE> = read(&self.objects)
            .iter()
            .filter(|(_, o)| o.matches(template))
            .map(|(h, _)| *h)
            .collect();
        found.sort_unstable_by(|a, b| b.cmp(a));
        st.find = Some(found);
        Ok(())
    }

    fn find_objects(&self, s: CK_SESSION_HANDLE, max: usize) -> CkResult<Vec<CK_OBJECT_HANDLE>> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        let list = st.find.as_mut().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let n = max.min(list.len());
        Ok((0..n).filter_map(|_| list.pop()).collect())
    }

    fn find_objects_final(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        st.find.take().ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        Ok(())
    }

    fn encrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.start(s, |st| &mut st.encrypt, || self.bulk_op(m, key, true))
    }

    fn encrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let (sess, op) = self.take_encrypt(s)?;
        self.bulk_step(&sess, op, true, true, out, |op, bulk, out| {
            op.one_shot(bulk, data, out)
        })
    }

    fn encrypt_update(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.bulk_update(self.take_encrypt(s), data, out)
    }

    fn encrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.bulk_final(self.take_encrypt(s), out)
    }

    fn decrypt_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.not_pending(s, "C_Decrypt")?;
        self.start(
            s,
            |st| &mut st.decrypt,
            || match m.mechanism {
                CKM_AES_GCM | CKM_AES_CTR | CKM_AES_ECB => {
                    self.bulk_op(m, key, false).map(Decrypt::Bulk)
                }
                _ => DecryptOp::new(
                    m,
                    self.engine_key(key, CKK_RSA, CKA_DECRYPT, m.mechanism)?
                        .rsa()?,
                )
                .map(Decrypt::Rsa),
            },
        )
    }

    fn decrypt(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let (sess, op) = self.take(s, |st| &mut st.decrypt)?;
        let op = match op {
            Decrypt::Bulk(op) => {
                return self.bulk_step(&sess, op, true, true, out, |op, bulk, out| {
                    op.one_shot(bulk, data, out)
                })
            }
            Decrypt::Rsa(op) => op,
        };
        let keep = |op| lock(&sess).decrypt = Some(Decrypt::Rsa(op));
        // A ciphertext of the wrong length ends the operation, size query or not.
        op.check_len(data)?;
        if out.is_query() {
            out.reserve(op.max_len())?;
            keep(op);
            return Ok(());
        }
        // Asynchronous only with room for any plaintext: a buffer too small must be answered
        // at once, never after `CKR_PENDING`.
        if lock(&sess).flags & CKF_ASYNC_SESSION != 0 && out.capacity() >= op.max_len() {
            let prepared = op.prepare(&self.sched, data, true)?;
            let key = op.key().clone();
            return self.maybe_pending(&sess, "C_Decrypt", prepared, &key, Then::Decrypt(op), out);
        }
        let plain = op.decrypt(&self.sched, data)?;
        match out.write(&plain) {
            Err(CKR_BUFFER_TOO_SMALL) => {
                keep(op);
                Err(CKR_BUFFER_TOO_SMALL)
            }
            r => r.map(|_| ()),
        }
    }

    fn decrypt_update(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        self.bulk_update(self.take_bulk_decrypt(s), data, out)
    }

    fn decrypt_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        self.bulk_final(self.take_bulk_decrypt(s), out)
    }

    fn sign_init(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        self.not_pending(s, "C_Sign")?;
        self.start(
            s,
            |st| &mut st.sign,
            || match m.mechanism {
                CKM_ECDSA => {
                    let k = self.engine_key(key, CKK_EC, CKA_SIGN, m.mechanism)?;
                    ecdsa::EcdsaOp::new(m, k.ecdsa()?).map(Sign::Ecdsa)
                }
                _ => {
                    let k = self.engine_key(key, CKK_RSA, CKA_SIGN, m.mechanism)?;
                    SignOp::new(m, k.rsa()?).map(Sign::Rsa)
                }
            },
        )
    }

    fn sign(&self, s: CK_SESSION_HANDLE, data: &[u8], out: &mut OutBuf) -> CkResult<()> {
        let sess = self.session(s)?;
        let op = lock(&sess)
            .sign
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        if let Sign::Rsa(op) = &op {
            op.check(data)?;
        }
        match out.reserve(op.sig_len()) {
            Ok(Some(_)) => {}
            r => {
                lock(&sess).sign = Some(op);
                return r.map(|_| ());
            }
        }
        let asynchronous = lock(&sess).flags & CKF_ASYNC_SESSION != 0;
        let mut op = match op {
            Sign::Rsa(op) => op,
            Sign::Ecdsa(op) => return self.ecdsa_sign(&sess, &op, asynchronous, data, out),
        };
        if asynchronous {
            let prepared = op.prepare(&self.sched, Some(data), true)?;
            let key = op.key().clone();
            return self.maybe_pending(&sess, "C_Sign", prepared, &key, Then::Sign, out);
        }
        let sig = op.sign(&self.sched, Some(data))?;
        out.write(&sig)?;
        Ok(())
    }

    fn sign_update(&self, s: CK_SESSION_HANDLE, data: &[u8]) -> CkResult<()> {
        let sess = self.session(s)?;
        let mut st = lock(&sess);
        let Some(Sign::Rsa(op)) = st.sign.as_mut() else {
            let r = match st.sign {
                Some(_) => CKR_FUNCTION_NOT_SUPPORTED,
                None => CKR_OPERATION_NOT_INITIALIZED,
            };
            st.sign = None;
            return Err(r);
        };
        if !op.multi_part() {
            st.sign = None;
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        let r = op.update(data);
        if r.is_err() {
            st.sign = None;
        }
        r
    }

    fn sign_final(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        let sess = self.session(s)?;
        let op = match lock(&sess).sign.take() {
            Some(Sign::Rsa(op)) if !op.multi_part() => return Err(CKR_FUNCTION_NOT_SUPPORTED),
            Some(op) => op,
            None => return Err(CKR_OPERATION_NOT_INITIALIZED),
        };
        // A size query or a buffer too small is answered first, as the software token does
        // for CKM_ECDSA too (which then has no C_SignFinal).
        match out.reserve(op.sig_len()) {
            Ok(Some(_)) => {}
            r => {
                lock(&sess).sign = Some(op);
                return r.map(|_| ());
            }
        }
        let Sign::Rsa(mut op) = op else {
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        };
        let sig = op.sign(&self.sched, None)?;
        out.write(&sig)?;
        Ok(())
    }

    fn unwrap_key(
        &self,
        s: CK_SESSION_HANDLE,
        m: &Mechanism,
        unwrapping_key: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        template: &[Attribute],
    ) -> CkResult<CK_OBJECT_HANDLE> {
        self.session(s)?;
        let pad = match m.mechanism {
            CKM_AES_KEY_WRAP => false,
            CKM_AES_KEY_WRAP_KWP | CKM_AES_KEY_WRAP_PAD => true,
            _ => return Err(CKR_MECHANISM_INVALID),
        };
        let kek = self
            .object(unwrapping_key)
            .map_err(|_| CKR_UNWRAPPING_KEY_HANDLE_INVALID)?;
        if !kek.flag(CKA_UNWRAP) {
            return Err(CKR_KEY_FUNCTION_NOT_PERMITTED);
        }
        if !kek.allows(m.mechanism) {
            return Err(CKR_MECHANISM_INVALID);
        }
        let kv = kek
            .aes_value()
            .ok_or(CKR_UNWRAPPING_KEY_TYPE_INCONSISTENT)?;
        let plain = aes_unwrap(kv, pad, &m.param, wrapped)?;
        let class = template
            .iter()
            .find(|a| a.kind == CKA_CLASS)
            .ok_or(CKR_TEMPLATE_INCOMPLETE)?
            .as_ulong()?;
        let material = match class {
            CKO_PRIVATE_KEY => Material::Pkcs8(plain),
            CKO_SECRET_KEY => Material::Value(plain),
            _ => return Err(CKR_ATTRIBUTE_VALUE_INVALID),
        };
        let o = Object::new(template, material, s)?;
        Ok(self.add_object(o))
    }

    /// OpenSSL's generator seeds itself from the operating system and takes no seed from
    /// here, so the call says so rather than accept bytes it would ignore.
    fn seed_random(&self, s: CK_SESSION_HANDLE, _seed: &[u8]) -> CkResult<()> {
        self.session(s)?;
        Err(CKR_RANDOM_SEED_NOT_SUPPORTED)
    }

    fn generate_random(&self, s: CK_SESSION_HANDLE, out: &mut [u8]) -> CkResult<()> {
        self.session(s)?;
        openssl::rand::rand_bytes(out).map_err(|_| CKR_FUNCTION_FAILED)
    }

    fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.session(s).map(|_| ())
    }
}

opencf_abi::pkcs11_module!(Accel);
