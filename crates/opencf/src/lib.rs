//! The OpenCF framework, `libopencf.so`: the one PKCS#11 module applications load.
//!
//! It reads the configuration (`opencf_config`), loads every provider listed there (any
//! PKCS#11 module, through `opencf_abi::provider::Provider`), and offers:
//!
//! - slot 0, the **metaslot** (token label "OpenCF Metaslot"), which routes each operation to
//!   the first provider, in config order, that supports the mechanism and whose init succeeds
//!   (see [`route`] and [`metaslot`]);
//! - then every provider's own slots, with framework slot IDs 1, 2, 3, … in config order. These
//!   slots are pass-through: a framework session handle maps to (provider, provider session),
//!   object handles are the provider's own.
//!
//! The code is split by PKCS#11 function group as in the softtoken: [`general`], [`slot`],
//! [`session`], [`object`], [`crypt`], [`digest`], [`sign`], [`keys`], [`random`]; plus
//! [`providers`] (loading), [`route`] (candidate selection, key clones) and [`metaslot`]
//! (the metaslot's session state).
//!
//! First-version rules of the metaslot, where the design leaves room:
//! - every object made through slot 0 (token and session objects alike) lives in the keystore
//!   token, and a metaslot object handle *is* the keystore's object handle; only the clones of
//!   keys in other providers get separate bookkeeping ([`route::CloneCache`]);
//! - key generation, derivation, wrapping, unwrapping and encapsulation run in the keystore
//!   (their results must be stored there);
//! - `C_FindObjects` searches the keystore only (clones are internal session objects of the
//!   other providers and never visible through slot 0).

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod asynchronous;
pub mod crypt;
pub mod digest;
pub mod dual;
pub mod general;
pub mod keys;
pub mod metaslot;
pub mod object;
pub mod providers;
pub mod random;
pub mod route;
pub mod session;
pub mod sign;
pub mod slot;

use metaslot::MetaSession;
use opencf_abi::sys::*;
use opencf_abi::*;
use providers::Prov;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

/// The framework slot ID of the metaslot.
pub const METASLOT_ID: CK_SLOT_ID = 0;

/// A framework session.
pub enum Sess {
    /// A session on a provider's own slot: calls pass through.
    Pass {
        /// Framework slot ID.
        slot: CK_SLOT_ID,
        /// Index into [`OpenCf::providers`].
        prov: usize,
        /// The provider's session handle.
        h: CK_SESSION_HANDLE,
        /// Opened with `CKF_RW_SESSION`.
        rw: bool,
    },
    /// A metaslot session.
    Meta {
        /// Its state.
        s: Box<opencf_abi::sync::SessionLock<MetaSession>>,
        /// Opened with `CKF_RW_SESSION` (kept outside the lock for `C_GetTokenInfo`).
        rw: bool,
    },
}

const SHARDS: usize = 64;

/// A cheap hasher for the framework's integer keys (session handles, mechanism types): one
/// multiply and a fold, instead of SipHash on every call. The keys come from the application,
/// which shares the process, so hash flooding is not a concern.
#[derive(Default, Clone, Copy)]
pub struct UlongHasher(u64);

impl Hasher for UlongHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        let x = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // Fold the well-mixed high bits into the low bits, which pick the bucket.
        self.0 = x ^ (x >> 29);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64)
    }
}

/// A `HashMap` keyed by an integer, with [`UlongHasher`].
pub type UlongMap<K, V> = HashMap<K, V, BuildHasherDefault<UlongHasher>>;

/// Framework sessions in sharded maps: a thread working on its own session takes only a shard's
/// read lock — and usually not even that: [`Sessions::with`] keeps, per thread, the session it
/// used last, valid until any session of the table is removed.
pub struct Sessions {
    shards: Vec<RwLock<UlongMap<CK_SESSION_HANDLE, Arc<Sess>>>>,
    next: AtomicU64,
    /// Identifies this table among the framework instances of the process's lifetime.
    id: u64,
    /// Bumped after every removal; a thread's cached session is used only while it is unchanged.
    removals: AtomicU64,
}

/// Source of [`Sessions::id`].
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// A thread's last session: (table id, removals seen, handle, session).
type LastSession = Option<(u64, u64, CK_SESSION_HANDLE, Arc<Sess>)>;

thread_local! {
    static LAST_SESSION: std::cell::RefCell<LastSession> = const { std::cell::RefCell::new(None) };
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            shards: (0..SHARDS)
                .map(|_| RwLock::new(UlongMap::default()))
                .collect(),
            next: AtomicU64::new(1),
            id: NEXT_TABLE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            removals: AtomicU64::new(0),
        }
    }
}

impl Sessions {
    fn shard(&self, h: CK_SESSION_HANDLE) -> &RwLock<UlongMap<CK_SESSION_HANDLE, Arc<Sess>>> {
        &self.shards[(h as usize) % SHARDS]
    }
    /// Adds a session and returns its new handle.
    pub fn insert(&self, s: Sess) -> CK_SESSION_HANDLE {
        let h = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.shard(h)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(h, Arc::new(s));
        h
    }
    /// Looks a session up.
    pub fn get(&self, h: CK_SESSION_HANDLE) -> CkResult<Arc<Sess>> {
        self.shard(h)
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&h)
            .cloned()
            .ok_or(CKR_SESSION_HANDLE_INVALID)
    }
    /// Runs `f` on the session behind `h`. The thread's last session is reused without a lock
    /// while no session has been removed since; a nested call looks up the shard.
    pub fn with<R>(
        &self,
        h: CK_SESSION_HANDLE,
        f: impl FnOnce(&Sess) -> CkResult<R>,
    ) -> CkResult<R> {
        use std::sync::atomic::Ordering::Acquire;
        let removals = self.removals.load(Acquire);
        let mut f = Some(f);
        let cached = LAST_SESSION.try_with(|cell| {
            let mut c = cell.try_borrow_mut().ok()?;
            let hit =
                matches!(&*c, Some((id, r, ch, _)) if *id == self.id && *r == removals && *ch == h);
            if !hit {
                match self.get(h) {
                    Ok(s) => *c = Some((self.id, removals, h, s)),
                    Err(e) => return Some(Err(e)),
                }
            }
            let s = &c.as_ref().expect("cached above").3;
            Some((f.take().expect("closure used once"))(s))
        });
        match cached {
            Ok(Some(r)) => r,
            _ => match f.take() {
                Some(f) => f(&*self.get(h)?),
                None => Err(CKR_GENERAL_ERROR),
            },
        }
    }
    /// Removes a session.
    pub fn remove(&self, h: CK_SESSION_HANDLE) -> Option<Arc<Sess>> {
        let r = self
            .shard(h)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&h);
        self.removals
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        r
    }
    /// Every (handle, session) whose session matches `f`.
    pub fn matching(&self, f: impl Fn(&Sess) -> bool) -> Vec<CK_SESSION_HANDLE> {
        let mut out = Vec::new();
        self.each(|h, s| {
            if f(s) {
                out.push(h);
            }
        });
        out
    }
    /// Runs `f` on every (handle, session), one shard's read lock at a time.
    pub fn each(&self, mut f: impl FnMut(CK_SESSION_HANDLE, &Sess)) {
        for sh in &self.shards {
            for (h, s) in sh.read().unwrap_or_else(|e| e.into_inner()).iter() {
                f(*h, s);
            }
        }
    }
}

/// The metaslot's fixed facts, computed at `C_Initialize`.
pub struct MetaInfo {
    /// Index of the keystore provider.
    pub keystore: usize,
    /// The keystore's slot (provider slot ID).
    pub ks_slot: CK_SLOT_ID,
    /// Merged mechanism list.
    pub mechs: HashMap<CK_MECHANISM_TYPE, CK_MECHANISM_INFO>,
    /// Candidate providers of every mechanism and kind of operation.
    pub routes: route::Routes,
    /// `auto_key_migrate`.
    pub auto_key_migrate: bool,
}

/// The framework instance: one between `C_Initialize` and `C_Finalize`.
pub struct OpenCf {
    /// Loaded providers, in config order.
    pub providers: Vec<Prov>,
    /// Framework slot `i + 1` → (provider index, provider slot ID).
    pub slots: Vec<(usize, CK_SLOT_ID)>,
    /// The metaslot, when enabled.
    pub meta: Option<MetaInfo>,
    /// Sessions.
    pub sessions: Sessions,
    /// Clones of keystore keys in other providers.
    pub clones: route::CloneCache,
}

impl OpenCf {
    /// The session behind a handle.
    pub fn sess(&self, s: CK_SESSION_HANDLE) -> CkResult<Arc<Sess>> {
        self.sessions.get(s)
    }
    /// The metaslot facts, or `CKR_SLOT_ID_INVALID`.
    pub fn meta(&self) -> CkResult<&MetaInfo> {
        self.meta.as_ref().ok_or(CKR_SLOT_ID_INVALID)
    }
    /// Provider by index.
    pub fn p(&self, i: usize) -> &providers::Provider {
        &self.providers[i].p
    }
    /// Framework slot ID → (provider index, provider slot).
    pub fn provider_slot(&self, slot: CK_SLOT_ID) -> CkResult<(usize, CK_SLOT_ID)> {
        if slot == METASLOT_ID {
            return Err(CKR_SLOT_ID_INVALID);
        }
        self.slots
            .get((slot as usize).wrapping_sub(1))
            .copied()
            .ok_or(CKR_SLOT_ID_INVALID)
    }
}

impl Sess {
    /// Whether the session is on framework slot `slot` (slot 0 for a metaslot session).
    pub fn on_slot(&self, slot: CK_SLOT_ID) -> bool {
        match self {
            Sess::Pass { slot: sl, .. } => *sl == slot,
            Sess::Meta { .. } => slot == METASLOT_ID,
        }
    }
    /// Whether the session was opened read/write.
    pub fn is_rw(&self) -> bool {
        match self {
            Sess::Pass { rw, .. } | Sess::Meta { rw, .. } => *rw,
        }
    }
}

/// Dispatches a call on a session: `$pass` runs with `(prov: &Provider, h)` for a pass-through
/// session, `$meta` with `(m: &SessionLock<MetaSession>)` for a metaslot session.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch {
    // `@prov`: the provider's index in `providers` instead of its configuration.
    ($self:ident, $s:expr, |$p:ident, $h:ident, @$i:ident| $pass:expr, |$m:ident| $meta:expr) => {
        $self.sessions.with($s, |__sess| match __sess {
            $crate::Sess::Pass { prov, h, .. } => {
                let $p = $self.p(*prov);
                let $i = *prov;
                let $h = *h;
                $pass
            }
            $crate::Sess::Meta { s: $m, .. } => $meta,
        })
    };
    // Both the configuration and the index.
    ($self:ident, $s:expr, |$p:ident, $h:ident, $c:ident, @$i:ident| $pass:expr, |$m:ident| $meta:expr) => {
        $self.sessions.with($s, |__sess| match __sess {
            $crate::Sess::Pass { prov, h, .. } => {
                let $p = $self.p(*prov);
                let $c = &$self.providers[*prov].cfg;
                let $i = *prov;
                let $h = *h;
                $pass
            }
            $crate::Sess::Meta { s: $m, .. } => $meta,
        })
    };
    ($self:ident, $s:expr, |$p:ident, $h:ident, $c:ident| $pass:expr, |$m:ident| $meta:expr) => {
        $self.sessions.with($s, |__sess| match __sess {
            $crate::Sess::Pass { prov, h, .. } => {
                let $p = $self.p(*prov);
                let $c = &$self.providers[*prov].cfg;
                let $h = *h;
                $pass
            }
            $crate::Sess::Meta { s: $m, .. } => $meta,
        })
    };
    ($self:ident, $s:expr, |$p:ident, $h:ident| $pass:expr, |$m:ident| $meta:expr) => {
        $self.sessions.with($s, |__sess| match __sess {
            $crate::Sess::Pass { prov, h, .. } => {
                let $p = $self.p(*prov);
                let $h = *h;
                $pass
            }
            $crate::Sess::Meta { s: $m, .. } => $meta,
        })
    };
}

mod backend_impl;

opencf_abi::pkcs11_module!(OpenCf);
