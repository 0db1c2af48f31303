//! The OpenCF accelerator provider, `libopencf_accel.so`: RSA private-key operations for
//! 2048-, 3072- and 4096-bit keys on a multi-buffer AVX-512 IFMA engine, and single large
//! AES-GCM, AES-CTR and AES-ECB operations split across cores, behind the framework's
//! metaslot. See docs/ACCEL.md.
//!
//! * one slot (0), token "OpenCF Accelerator", no login needed (`C_Login` is accepted and
//!   ignored, see [`session`]); session objects only;
//! * the PKCS#11 functions, one file per function group as in the specification:
//!   [`general`] (`C_Initialize`, `C_Finalize`, `C_GetInfo`), [`slot`] (slots, the token,
//!   mechanisms), [`session`] (sessions, login), [`object`] (`C_CreateObject`, `C_FindObjects`
//!   …), [`crypt`] (`C_Encrypt*`, `C_Decrypt*`), [`sign`] (`C_Sign*`), [`keys`]
//!   (`C_UnwrapKey`), [`random`], [`asynchronous`] (`C_AsyncComplete` …); `backend_impl`
//!   forwards the framework's `Backend` calls to them, one line each;
//! * [`engine`]: the lane engines; [`rsa`]: a key's engine form and the raw private
//!   operation; [`ct`]: constant-time scalar arithmetic around the engine; [`sched`]: the
//!   worker threads and batching; [`mech`]: mechanisms and padding; [`objects`]: session
//!   objects; [`gcm`]: the bulk engine and its AES-GCM, on [`gf128`] arithmetic; [`blocks`]:
//!   AES-CTR and AES-ECB on the bulk engine; [`fault`]: the test-only fault switch;
//!   [`counters`]: the engines' counters in `cryptoadm stat`.
//!
//! The crate denies `unsafe` code; the one exception is the call into the IFMA engine after
//! the CPU check (`engine::on_ifma`), and the items `pkcs11_module!` generates.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod asynchronous;
mod backend_impl;
pub mod blocks;
pub mod calibrate;
pub mod counters;
pub mod crypt;
pub mod ct;
pub mod ecdsa;
pub mod engine;
pub mod fault;
pub mod gcm;
pub mod general;
pub mod gf128;
pub mod keys;
pub mod mech;
pub mod object;
pub mod objects;
pub mod pad;
pub mod pending;
pub mod random;
pub mod rsa;
pub mod sched;
pub mod session;
pub mod sign;
pub mod slot;

use blocks::BulkOp;
use crypt::Decrypt;
use gcm::Bulk;
use objects::Object;
use opencf_abi::sys::*;
use opencf_abi::CkResult;
use pending::AsyncOp;
use sched::Scheduler;
use sign::Sign;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

/// The token label.
pub const LABEL: &str = "OpenCF Accelerator";
/// The one slot.
pub const SLOT: CK_SLOT_ID = 0;

#[derive(Default)]
struct Session {
    flags: CK_FLAGS,
    find: Option<Vec<CK_OBJECT_HANDLE>>,
    sign: Option<Sign>,
    encrypt: Option<BulkOp>,
    decrypt: Option<Decrypt>,
    /// The signature that answered `CKR_PENDING` (asynchronous sessions), until
    /// `C_AsyncComplete` reports it.
    pending_sign: Option<AsyncOp>,
    /// The same for a decryption: a session may have one of each kind under way.
    pending_decrypt: Option<AsyncOp>,
}

impl Session {
    /// Where the operation pending for `function` (`"C_Sign"`, `"C_Decrypt"`) is kept.
    fn pending_slot(&mut self, function: &str) -> Option<&mut Option<AsyncOp>> {
        match function {
            "C_Sign" => Some(&mut self.pending_sign),
            "C_Decrypt" => Some(&mut self.pending_decrypt),
            _ => None,
        }
    }

    /// The operation pending for `function`, if any.
    fn pending_of(&self, function: &str) -> Option<&AsyncOp> {
        match function {
            "C_Sign" => self.pending_sign.as_ref(),
            "C_Decrypt" => self.pending_decrypt.as_ref(),
            _ => None,
        }
    }

    /// Records `op`, pending for its function.
    fn set_pending(&mut self, op: AsyncOp) {
        if let Some(slot) = self.pending_slot(op.function) {
            *slot = Some(op);
        }
    }
}

type Shared<T> = RwLock<HashMap<u64, Arc<T>>>;

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
}

opencf_abi::pkcs11_module!(Accel);
