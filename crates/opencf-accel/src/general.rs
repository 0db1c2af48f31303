//! General-purpose functions: `C_Initialize`, `C_Finalize`, `C_GetInfo`.

use crate::ecdsa;
use crate::gcm::{self, Bulk};
use crate::sched::Scheduler;
use crate::{engine, version, write, Accel};
use opencf_abi::sys::*;
use opencf_abi::{pad_field, CkResult, InitArgs};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::RwLock;

impl Accel {
    /// `C_Initialize`.
    pub(crate) fn initialize(args: &InitArgs) -> CkResult<Self> {
        // The scheduler's workers and the bulk engine's helpers are threads of this library:
        // an application that forbids them gets the answer PKCS#11 gives for that.
        if args.no_os_threads {
            return Err(CKR_NEED_TO_CREATE_THREADS);
        }
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

    /// `C_Finalize`.
    pub(crate) fn finalize(&self) {
        self.sched.shutdown();
        if let Some(b) = &self.bulk {
            b.shutdown();
        }
        write(&self.sessions).clear();
        write(&self.objects).clear();
    }

    /// `C_GetInfo`.
    pub(crate) fn get_info(&self) -> CkResult<CK_INFO> {
        Ok(CK_INFO {
            cryptokiVersion: CK_VERSION { major: 3, minor: 2 },
            manufacturerID: pad_field("OpenCF"),
            flags: 0,
            libraryDescription: pad_field("OpenCF accelerator"),
            libraryVersion: version(),
        })
    }
}
