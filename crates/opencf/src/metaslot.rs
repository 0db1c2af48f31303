//! The state of a metaslot session: its keystore session, the provider sessions opened lazily
//! for it, and which provider runs each active operation.

use opencf_abi::sys::*;
use opencf_abi::{CkResult, MechRef, Mechanism};

/// The kinds of operation a session may have active at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `C_Encrypt*`.
    Encrypt = 0,
    /// `C_Decrypt*`.
    Decrypt,
    /// `C_Sign*`.
    Sign,
    /// `C_Verify*`.
    Verify,
    /// `C_Digest*`.
    Digest,
    /// `C_SignRecover`.
    SignRecover,
    /// `C_VerifyRecover`.
    VerifyRecover,
    /// `C_VerifySignature*`.
    VerifySignature,
}

/// Number of [`OpKind`]s.
pub const OP_KINDS: usize = 8;

/// Every [`OpKind`], in index order.
pub const KINDS: [OpKind; OP_KINDS] = [
    OpKind::Encrypt,
    OpKind::Decrypt,
    OpKind::Sign,
    OpKind::Verify,
    OpKind::Digest,
    OpKind::SignRecover,
    OpKind::VerifyRecover,
    OpKind::VerifySignature,
];

impl OpKind {
    /// The `CKF_*` capability a provider must list for the mechanism.
    pub fn flag(self) -> CK_FLAGS {
        match self {
            OpKind::Encrypt => CKF_ENCRYPT,
            OpKind::Decrypt => CKF_DECRYPT,
            OpKind::Sign => CKF_SIGN,
            OpKind::Verify | OpKind::VerifySignature => CKF_VERIFY,
            OpKind::Digest => CKF_DIGEST,
            OpKind::SignRecover => CKF_SIGN_RECOVER,
            OpKind::VerifyRecover => CKF_VERIFY_RECOVER,
        }
    }
    /// The other kind that shares this kind's place in a session: a session verifies one way
    /// at a time, with `C_Verify*` or with `C_VerifySignature*`, since `CKF_VERIFY` (the only
    /// flag `C_SessionCancel` and an error's end can name) ends either.
    pub fn sharing(self) -> Option<OpKind> {
        match self {
            OpKind::Verify => Some(OpKind::VerifySignature),
            OpKind::VerifySignature => Some(OpKind::Verify),
            _ => None,
        }
    }
}

/// Where an active operation runs.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// Index into the operation's candidate list.
    pub idx: usize,
    /// Provider index.
    pub prov: usize,
    /// The provider session.
    pub h: CK_SESSION_HANDLE,
    /// The provider is the keystore: calls go to its pinned session when it lent one
    /// ([`MetaSession::ks_pin`]).
    pub ks: bool,
    /// The provider's counters for the mechanism (`None` when counting is off).
    pub counters: Option<&'static opencf_stat::MechCounters>,
}

/// Candidate providers of an operation, in config order: up to four held inline, so that an
/// init allocates nothing for them.
#[derive(Clone, Debug, Default)]
pub struct Cands {
    len: usize,
    inline: [usize; 4],
    more: Vec<usize>,
}

impl Cands {
    /// No candidates.
    pub const EMPTY: Cands = Cands {
        len: 0,
        inline: [0; 4],
        more: Vec::new(),
    };
    /// Appends a provider index.
    pub fn push(&mut self, p: usize) {
        if self.more.is_empty() && self.len < self.inline.len() {
            self.inline[self.len] = p;
            self.len += 1;
        } else {
            if self.more.is_empty() {
                self.more.extend_from_slice(&self.inline[..self.len]);
            }
            self.more.push(p);
        }
    }
}

impl std::ops::Deref for Cands {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        if self.more.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.more
        }
    }
}

/// An active operation of a metaslot session. Small and free of allocations when its route
/// has a single candidate without a threshold (the common case): nothing then has to be kept
/// for another provider.
#[derive(Debug)]
pub struct Op {
    /// The `CKM_*` type.
    pub mech: CK_MECHANISM_TYPE,
    /// The metaslot (= keystore) key handle, if the operation has one.
    pub key: Option<CK_OBJECT_HANDLE>,
    /// The provider running it; `None` while binding waits for the data length (a candidate
    /// has a `min_bytes` threshold for the mechanism).
    pub bound: Option<Bound>,
    /// Input bytes of the multi-part calls so far (for the statistics).
    pub bytes: u64,
    /// Bound at init to the candidate for the smallest input although a `min_bytes` threshold
    /// applies: a single-part call or a first multi-part step with more data may move it
    /// (see `route::meta_single`, `route::step_in`); once a multi-part step has run, it stays.
    pub eager: bool,
    /// For an eager operation: the smallest single-part input that an earlier candidate
    /// takes ([`crate::route::Route::move_at`]); below it the operation stays where it is.
    /// 0 (every input is checked against the route) unless set where the operation is bound.
    pub move_at: u64,
    /// What another candidate needs to run the operation, kept only while one may still have
    /// to (binding deferred, or a later candidate for failover).
    pub kept: Option<Box<Kept>>,
    /// A digest that has taken a key's value (`C_DigestKey`): its saved state would hold key
    /// bytes, so `C_GetOperationState` refuses it whatever the provider would answer.
    pub keyed: bool,
}

impl Op {
    /// An operation not yet bound, keeping `kept` for a later binding.
    pub fn new(
        mech: CK_MECHANISM_TYPE,
        key: Option<CK_OBJECT_HANDLE>,
        kept: Option<Box<Kept>>,
    ) -> Op {
        Op {
            mech,
            key,
            bound: None,
            bytes: 0,
            eager: false,
            move_at: 0,
            kept,
            keyed: false,
        }
    }
    /// An operation bound to `b` that keeps nothing for another candidate.
    pub fn bound_to(mech: CK_MECHANISM_TYPE, key: Option<CK_OBJECT_HANDLE>, b: Bound) -> Op {
        Op {
            bound: Some(b),
            ..Op::new(mech, key, None)
        }
    }
}

/// A binding a metaslot session remembers ([`MetaSession::direct`]): the mechanism's only
/// candidate is the keystore, or the keystore is its last candidate and the one for the
/// smallest input (the others have `min_bytes` thresholds).
#[derive(Clone, Copy, Debug)]
pub struct Direct {
    /// The `CKM_*` type.
    pub mech: CK_MECHANISM_TYPE,
    /// Where the operation runs.
    pub b: Bound,
    /// Bound for the smallest input: a larger single-part input may move the operation to a
    /// candidate with a threshold, so the parameter is kept ([`Op::eager`]).
    pub eager: bool,
    /// The eager operation's [`Op::move_at`].
    pub move_at: u64,
}

/// The init arguments of an [`Op`] that a later binding repeats.
#[derive(Debug)]
pub struct Kept {
    /// The parsed mechanism, parameter included.
    pub mech: Mechanism,
    /// Extra init data (the signature of `C_VerifySignatureInit`).
    pub extra: Vec<u8>,
}

impl Kept {
    /// The session's spare (`MetaSession::spare`, taken; a new one if none) with its
    /// mechanism overwritten by a parsed copy of `mech` in the buffers it already has; its
    /// `extra` is left as it was.
    pub fn reuse(spare: &mut Option<Box<Kept>>, mech: MechRef<'_>) -> CkResult<Box<Kept>> {
        let mut kept = spare.take().unwrap_or_else(|| {
            Box::new(Kept {
                mech: Mechanism::new(0),
                extra: Vec::new(),
            })
        });
        mech.copy_into(&mut kept.mech)?;
        Ok(kept)
    }
}

/// A metaslot session.
#[derive(Debug)]
pub struct MetaSession {
    /// `CKF_*` flags it was opened with.
    pub flags: CK_FLAGS,
    /// The keystore session, opened with the metaslot session.
    pub ks: CK_SESSION_HANDLE,
    /// The keystore session itself, when the keystore is linked in and lends it
    /// (`Provider::pin_session`): the hot calls skip the keystore's handle lookup.
    pub ks_pin: Option<opencf_abi::Pinned>,
    /// Sessions in other providers, opened on first use: (provider index, handle).
    pub others: Vec<(usize, CK_SESSION_HANDLE)>,
    /// Active operations, indexed by [`OpKind`].
    pub ops: [Option<Op>; OP_KINDS],
    /// A `C_FindObjects*` search is active (it runs in the keystore session).
    pub finding: bool,
    /// Operations run, to time one in [`LATENCY_SAMPLE`] for the statistics.
    pub calls: u32,
    /// The session's own counter entries (`cryptoadm stat`): its lock makes it their only
    /// writer, so counting an operation needs no atomic read-modify-write.
    pub shard: opencf_stat::Shard,
    /// The counters found last (provider index, mechanism): an application repeating one
    /// operation finds them without a lookup.
    pub last_counters: Option<(usize, CK_MECHANISM_TYPE, &'static opencf_stat::MechCounters)>,
    /// Per kind of operation, the last binding to the keystore that no other candidate could
    /// have taken at init: the next init of the same mechanism goes straight to the keystore
    /// session (the route, the session and the key handle there cannot have changed).
    pub direct: [Option<Direct>; OP_KINDS],
    /// A [`Kept`] whose buffers the session's inits on the short path reuse: an eager init
    /// keeps its parameter there (returned when the operation ends on the short path), and
    /// an init bound to the linked keystore parses its parameter there for the keystore
    /// instead of the keystore allocating a parse of its own.
    pub spare: Option<Box<Kept>>,
    /// Single-part calls a provider answered `CKR_PENDING` (asynchronous sessions):
    /// (function name, provider index, provider session), for `C_AsyncComplete`.
    pub pending: Vec<(&'static str, usize, CK_SESSION_HANDLE)>,
}

/// One operation in this many has its latency measured for `cryptoadm stat` (reading the
/// clock twice costs about as much as the counting itself).
pub const LATENCY_SAMPLE: u32 = 16;

impl MetaSession {
    /// Whether an operation of `kind`, or of the kind sharing its place
    /// ([`OpKind::sharing`]), is active.
    pub fn occupied(&self, kind: OpKind) -> bool {
        self.ops[kind as usize].is_some()
            || kind
                .sharing()
                .is_some_and(|o| self.ops[o as usize].is_some())
    }
    /// A session whose keystore session is `ks` (pinned as `ks_pin` where the keystore lends
    /// it).
    pub fn new(flags: CK_FLAGS, ks: CK_SESSION_HANDLE, ks_pin: Option<opencf_abi::Pinned>) -> Self {
        MetaSession {
            flags,
            ks,
            ks_pin,
            others: Vec::new(),
            ops: Default::default(),
            finding: false,
            calls: 0,
            shard: opencf_stat::Shard::claim(),
            last_counters: None,
            direct: [None; OP_KINDS],
            spare: None,
            pending: Vec::new(),
        }
    }
    /// After a single-part call of `kind` bound at `b`: a `CKR_PENDING` answer is kept for
    /// `C_AsyncComplete` (only `C_Sign` and `C_Decrypt` are answered so).
    pub fn keep_pending(&mut self, kind: OpKind, b: &Bound, r: &CkResult<()>) {
        if *r != Err(CKR_PENDING) {
            return;
        }
        let Some(function) = pending_function(kind) else {
            return;
        };
        self.pending.retain(|(f, ..)| *f != function);
        self.pending.push((function, b.prov, b.h));
    }
    /// Whether a call of `kind` answered `CKR_PENDING` and `C_AsyncComplete` has not reported
    /// it yet: its operation is still active.
    pub fn is_pending(&self, kind: OpKind) -> bool {
        !self.pending.is_empty()
            && pending_function(kind).is_some_and(|f| self.pending.iter().any(|(p, ..)| *p == f))
    }
    /// Forgets the pending call of `kind`, if any: where it runs (provider, session).
    pub fn take_pending(&mut self, kind: OpKind) -> Option<(usize, CK_SESSION_HANDLE)> {
        let function = pending_function(kind)?;
        let i = self.pending.iter().position(|(f, ..)| *f == function)?;
        let (_, prov, h) = self.pending.swap_remove(i);
        Some((prov, h))
    }
    /// The session's counters of provider `prov` for mechanism `mech` (`stats`: that
    /// provider's).
    pub fn counters(
        &mut self,
        prov: usize,
        mech: CK_MECHANISM_TYPE,
        stats: &'static opencf_stat::ProviderStats,
    ) -> &'static opencf_stat::MechCounters {
        match self.last_counters {
            Some((p, m, c)) if p == prov && m == mech => c,
            _ => {
                let c = stats.mech_in(mech, &self.shard);
                self.last_counters = Some((prov, mech, c));
                c
            }
        }
    }
    /// Counts a single-part call bound to `b` for the latency sampling; the start time if
    /// this one is timed (one in [`LATENCY_SAMPLE`], not a size query, counting on).
    #[inline]
    pub fn timing(&mut self, b: &Bound, query: bool) -> Option<std::time::Instant> {
        self.calls = self.calls.wrapping_add(1);
        (self.calls.is_multiple_of(LATENCY_SAMPLE) && !query && b.counters.is_some())
            .then(std::time::Instant::now)
    }
    /// The active operation of a kind, or `CKR_OPERATION_NOT_INITIALIZED`.
    pub fn op(&mut self, k: OpKind) -> CkResult<&mut Op> {
        self.ops[k as usize]
            .as_mut()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)
    }
}

/// The function whose `CKR_PENDING` answer keeps an operation of `kind` active (PKCS#11 3.2
/// asynchronous sessions: only `C_Sign` and `C_Decrypt` are answered so).
fn pending_function(kind: OpKind) -> Option<&'static str> {
    match kind {
        OpKind::Sign => Some("C_Sign"),
        OpKind::Decrypt => Some("C_Decrypt"),
        _ => None,
    }
}
