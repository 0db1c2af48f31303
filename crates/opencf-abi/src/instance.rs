//! The module instance: the one [`Backend`] value that lives between `C_Initialize` and
//! `C_Finalize`, reached from every exported function without a process-wide lock.
//!
//! # Design
//!
//! * **Slot.** The instance is an `Arc<dyn Any + Send + Sync>` in a process-global slot
//!   guarded by a tiny spin lock (an `AtomicBool` and an `UnsafeCell`). The lock is held only
//!   to clone or swap the `Arc`, never while a backend method runs, and a spin lock (unlike a
//!   `std::sync::Mutex`) can be forcibly released by the fork handler.
//! * **Generation.** A global `AtomicU64` changes whenever the slot changes: `C_Initialize`,
//!   `C_Finalize`, and `fork()` (in the child).
//! * **Per-thread cache.** Each thread keeps `(generation, Arc)` in a `thread_local!`.
//!   [`with_backend`] loads the generation (one `Acquire` load) and, when it equals the cached
//!   one, calls the backend through the cached `Arc` by reference: no lock, no reference-count
//!   traffic, nothing written to memory shared with other threads. Otherwise it refreshes the
//!   cache under the spin lock (this happens once per thread after each initialization).
//!   A nested call on the same thread that needs a refresh while the cache is borrowed takes
//!   a private clone instead.
//! * **Finalize.** `C_Finalize` empties the slot, bumps the generation, drops the calling
//!   thread's cached reference and calls [`Backend::finalize`]. Other threads drop their
//!   cached reference on their next call (or when they exit), so the value itself may be
//!   dropped a little later, on another thread: a backend releases its resources in
//!   `finalize`, not only in `Drop`.
//! * **Fork.** At the first `C_Initialize` `pthread_atfork` handlers are registered. Before
//!   the fork, the prepare handler waits until no thread is inside the keystore's SQLite
//!   ([`fork_quiet`]), so the child inherits none of its mutexes held and no transaction half
//!   done. In the child the handler does only async-signal-safe work (atomic stores, the
//!   gate's release): it bumps a fork counter and the generation, marks the slot stale and
//!   force-unlocks the spin lock. Every call in
//!   the child then answers `CKR_CRYPTOKI_NOT_INITIALIZED` until the child calls
//!   `C_Initialize`, which `std::mem::forget`s the parent's instance (its SQLite connections,
//!   mutexes and threads belong to the parent; dropping them in the child is unsafe) and
//!   builds a fresh one. A thread-local cache entry made before a fork is likewise forgotten,
//!   never dropped, in the child.
//! * **One backend type.** The slot is shared by the whole linked artifact (each `cdylib` has
//!   its own copy). `C_Initialize` for a second backend type while another is initialized
//!   answers `CKR_CRYPTOKI_ALREADY_INITIALIZED`; calls for a type that is not the initialized
//!   one answer `CKR_CRYPTOKI_NOT_INITIALIZED`.

use std::any::Any;
use std::cell::{RefCell, UnsafeCell};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::sys::{CKR_CRYPTOKI_ALREADY_INITIALIZED, CKR_CRYPTOKI_NOT_INITIALIZED};
use crate::{Backend, CkResult, InitArgs};

type Instance = Arc<dyn Any + Send + Sync>;

enum State {
    Empty,
    /// `C_Initialize` is running `Backend::initialize` (outside the lock).
    Initializing,
    Ready(Instance),
}

struct Slot {
    lock: AtomicBool,
    /// Set in a fork child: `state` belongs to the parent and must never be dropped.
    stale: AtomicBool,
    state: UnsafeCell<State>,
}

// SAFETY: `state` is only accessed while `lock` is held (see `SlotGuard`).
unsafe impl Sync for Slot {}

static SLOT: Slot = Slot {
    lock: AtomicBool::new(false),
    stale: AtomicBool::new(false),
    state: UnsafeCell::new(State::Empty),
};

/// An atomic alone on its cache line: the hot path reads it on every call, so no rarely
/// written neighbour (the spin lock, say) should share its line.
#[repr(align(64))]
struct CacheLine(AtomicU64);

/// Changes whenever the slot changes; thread caches are valid for one generation.
static GENERATION: CacheLine = CacheLine(AtomicU64::new(1));
/// Number of `fork()`s this process descends from (counted in the child handler).
static FORKS: AtomicU64 = AtomicU64::new(0);
/// The fork handler is registered (a plain flag rather than `std::sync::Once`: a `Once` caught
/// mid-call by `fork()` would block the child's `C_Initialize` forever).
static ATFORK_REGISTERED: AtomicBool = AtomicBool::new(false);

/// Holds the spin lock; releases it when dropped.
struct SlotGuard(());

impl SlotGuard {
    fn lock() -> SlotGuard {
        let mut spins = 0u32;
        while SLOT
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if spins < 100 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
        SlotGuard(())
    }

    fn state(&mut self) -> &mut State {
        // SAFETY: the lock is held for the guard's lifetime and the returned borrow is tied to
        // `&mut self`, so there is one reference at a time.
        unsafe { &mut *SLOT.state.get() }
    }

    /// In a fork child: forgets the parent's state and clears the stale mark.
    fn forget_if_stale(&mut self) {
        if SLOT.stale.load(Ordering::Acquire) {
            std::mem::forget(std::mem::replace(self.state(), State::Empty));
            SLOT.stale.store(false, Ordering::Release);
        }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        SLOT.lock.store(false, Ordering::Release);
    }
}

/// The fork child handler: atomics, and the release of the fork gate (an atomic store and at
/// most a futex wake, which are async-signal-safe).
extern "C" fn atfork_child() {
    FORKS.fetch_add(1, Ordering::SeqCst);
    SLOT.stale.store(true, Ordering::SeqCst);
    GENERATION.0.fetch_add(1, Ordering::SeqCst);
    SLOT.lock.store(false, Ordering::SeqCst);
    fork_gate_open();
}

/// Held by a thread while it works in state that a fork child inherits and must find whole:
/// the software token's SQLite keystore, whose library keeps process-wide mutexes and lock
/// counts. `fork()` waits (its prepare handler takes the gate's other side) until no thread
/// holds one, so the child never inherits a mutex held or a transaction half done; then the
/// gate opens again in the parent and in the child ([`fork_quiet`]).
static FORK_GATE: std::sync::RwLock<()> = std::sync::RwLock::new(());
thread_local! {
    /// The gate's side taken by the prepare handler, kept until the parent or child handler,
    /// which run in the same (forking) thread.
    static FORK_GATE_HELD: RefCell<Option<std::sync::RwLockWriteGuard<'static, ()>>> =
        const { RefCell::new(None) };
}

/// Keeps `fork()` waiting until it is dropped (see [`fork_quiet`]).
pub struct ForkQuiet(#[allow(dead_code)] std::sync::RwLockReadGuard<'static, ()>);

/// A guard under which this thread may work in state a fork child must not inherit half
/// changed: a `fork()` in another thread waits until every such guard is dropped. Cheap (one
/// uncontended read lock); never held across a call that could wait for a fork.
pub fn fork_quiet() -> ForkQuiet {
    ForkQuiet(FORK_GATE.read().unwrap_or_else(|e| e.into_inner()))
}

extern "C" fn atfork_prepare() {
    let held = FORK_GATE.write().unwrap_or_else(|e| e.into_inner());
    FORK_GATE_HELD.with(|h| *h.borrow_mut() = Some(held));
}

extern "C" fn atfork_parent() {
    fork_gate_open();
}

fn fork_gate_open() {
    let _ = FORK_GATE_HELD.try_with(|h| h.borrow_mut().take());
}

fn register_atfork() {
    if !ATFORK_REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: registers handlers that touch atomics and the fork gate only; they stay
        // valid for as long as this library is loaded (glibc unregisters them when the library
        // is unloaded).
        unsafe {
            libc::pthread_atfork(
                Some(atfork_prepare),
                Some(atfork_parent),
                Some(atfork_child),
            );
        }
    }
}

/// One thread's cached view of the slot.
struct Cached {
    generation: u64,
    forks: u64,
    instance: Option<Instance>,
}

impl Cached {
    const EMPTY: Cached = Cached {
        generation: 0,
        forks: 0,
        instance: None,
    };
}

impl Drop for Cached {
    fn drop(&mut self) {
        // A reference taken before a fork belongs to the parent: forget it in the child.
        if self.forks != FORKS.load(Ordering::Acquire) {
            if let Some(instance) = self.instance.take() {
                std::mem::forget(instance);
            }
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cached> = const { RefCell::new(Cached::EMPTY) };
}

/// Reads the slot under the lock: the generation and a reference to the instance, if any.
fn snapshot() -> Cached {
    let mut guard = SlotGuard::lock();
    let generation = GENERATION.0.load(Ordering::Acquire);
    let forks = FORKS.load(Ordering::Acquire);
    let instance = if SLOT.stale.load(Ordering::Acquire) {
        None
    } else {
        match guard.state() {
            State::Ready(instance) => Some(instance.clone()),
            _ => None,
        }
    };
    Cached {
        generation,
        forks,
        instance,
    }
}

fn call<B: Backend, R>(
    instance: Option<&(dyn Any + Send + Sync)>,
    f: impl FnOnce(&B) -> CkResult<R>,
) -> CkResult<R> {
    match instance.and_then(|i| i.downcast_ref::<B>()) {
        Some(b) => f(b),
        None => Err(CKR_CRYPTOKI_NOT_INITIALIZED),
    }
}

/// Runs `f` with the initialized backend, or answers `CKR_CRYPTOKI_NOT_INITIALIZED` (also in
/// a fork child that has not called `C_Initialize`, and when another backend type is
/// initialized). See the module documentation for how this avoids any shared lock.
pub fn with_backend<B: Backend, R>(f: impl FnOnce(&B) -> CkResult<R>) -> CkResult<R> {
    let generation = GENERATION.0.load(Ordering::Acquire);
    let mut f = Some(f);
    let cached = CACHE.try_with(|cell| {
        // Fast path: the cache is current.
        if let Ok(c) = cell.try_borrow() {
            if c.generation == generation {
                let f = f.take().expect("closure used once");
                return Some(call(c.instance.as_deref(), f));
            }
        }
        // Refresh the cache, unless it is borrowed by an outer call on this thread.
        let fresh = snapshot();
        let Ok(mut c) = cell.try_borrow_mut() else {
            let f = f.take().expect("closure used once");
            return Some(call(fresh.instance.as_deref(), f));
        };
        let old = std::mem::replace(&mut *c, fresh);
        drop(c);
        drop(old); // forgets a pre-fork reference, see `Cached::drop`
        let c = cell.borrow();
        let f = f.take().expect("closure used once");
        Some(call(c.instance.as_deref(), f))
    });
    match cached {
        Ok(Some(result)) => result,
        // Thread-local storage is being torn down: use a private reference.
        _ => {
            let fresh = snapshot();
            match f.take() {
                Some(f) => call(fresh.instance.as_deref(), f),
                None => Err(CKR_CRYPTOKI_NOT_INITIALIZED),
            }
        }
    }
}

/// Drops this thread's cached reference (after `C_Finalize`).
fn clear_thread_cache() {
    let _ = CACHE.try_with(|cell| {
        if let Ok(mut c) = cell.try_borrow_mut() {
            let old = std::mem::replace(&mut *c, Cached::EMPTY);
            drop(c);
            drop(old);
        }
    });
}

/// `C_Initialize` after argument checks: builds the backend with [`Backend::initialize`]
/// (outside the lock) and publishes it. `CKR_CRYPTOKI_ALREADY_INITIALIZED` when a backend is
/// initialized (a call racing with one in progress waits for it to finish first). In a fork child the parent's instance is forgotten first.
/// The first call also gives this module's copy of OpenSSL its memory functions
/// ([`crate::ossl_mem`]).
pub fn initialize<B: Backend>(args: &InitArgs) -> CkResult<()> {
    register_atfork();
    // Before the backend (or anything else in this module) allocates through OpenSSL.
    crate::ossl_mem::install();
    // A concurrent C_Initialize waits for the one in progress: when it returns, the module
    // is usable (ALREADY_INITIALIZED) or, if the first attempt failed, it tries itself.
    loop {
        let mut guard = SlotGuard::lock();
        guard.forget_if_stale();
        match guard.state() {
            State::Empty => {
                *guard.state() = State::Initializing;
                break;
            }
            State::Initializing => {
                drop(guard);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            _ => return Err(CKR_CRYPTOKI_ALREADY_INITIALIZED),
        }
    }
    let built = catch_unwind(AssertUnwindSafe(|| {
        B::initialize(args).map(|backend| Arc::new(backend) as Instance)
    }));
    let mut guard = SlotGuard::lock();
    match built {
        Ok(Ok(instance)) => {
            *guard.state() = State::Ready(instance);
            GENERATION.0.fetch_add(1, Ordering::AcqRel);
            Ok(())
        }
        Ok(Err(rv)) => {
            *guard.state() = State::Empty;
            Err(rv)
        }
        Err(panic) => {
            *guard.state() = State::Empty;
            drop(guard);
            resume_unwind(panic)
        }
    }
}

/// `C_Finalize` after argument checks: unpublishes the instance and calls
/// [`Backend::finalize`]. `CKR_CRYPTOKI_NOT_INITIALIZED` when `B` is not initialized (or in a
/// fork child that has not called `C_Initialize`).
pub fn finalize<B: Backend>() -> CkResult<()> {
    let instance = {
        let mut guard = SlotGuard::lock();
        if SLOT.stale.load(Ordering::Acquire) {
            return Err(CKR_CRYPTOKI_NOT_INITIALIZED);
        }
        match guard.state() {
            State::Ready(instance) if (**instance).is::<B>() => {}
            _ => return Err(CKR_CRYPTOKI_NOT_INITIALIZED),
        }
        let State::Ready(instance) = std::mem::replace(guard.state(), State::Empty) else {
            unreachable!("checked above")
        };
        GENERATION.0.fetch_add(1, Ordering::AcqRel);
        instance
    };
    clear_thread_cache();
    if let Some(backend) = instance.downcast_ref::<B>() {
        backend.finalize();
    }
    drop(instance);
    Ok(())
}

/// True when a backend of type `B` is initialized in this process (and this is not a fork
/// child that has yet to call `C_Initialize`).
pub fn is_initialized<B: Backend>() -> bool {
    with_backend::<B, _>(|_| Ok(())).is_ok()
}
