//! Routing of metaslot operations: candidate providers, key clones, binding an operation to
//! the first provider whose init succeeds, and failover on recoverable errors.

use crate::metaslot::{Bound, Cands, Direct, Kept, MetaSession, Op, OpKind, KINDS, OP_KINDS};
use crate::providers::Provider;
use crate::OpenCf;
use opencf_abi::sys::*;
use opencf_abi::Pinned;
use opencf_abi::*;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Mutex, RwLock};

/// Every candidate of a route ([`OpenCf::bind`]).
const ALL: Range<usize> = 0..usize::MAX;

/// A keystore error about a key handle, as an init reports it: an unknown object is
/// `CKR_KEY_HANDLE_INVALID`.
fn key_handle_error(e: CK_RV) -> CK_RV {
    if e == CKR_OBJECT_HANDLE_INVALID {
        CKR_KEY_HANDLE_INVALID
    } else {
        e
    }
}

/// The output room of the call that ends an operation in a provider without
/// `C_SessionCancel` ([`OpenCf::end_in_provider`]): more than any signature, digest or last
/// blocks of the mechanisms served.
const END_ROOM: usize = 64 << 10;
/// The most room that call is given when the provider asks for more than [`END_ROOM`].
const END_ROOM_MAX: usize = 256 << 20;

/// Errors after which the next candidate provider is tried. Every other error (argument
/// errors, bad handles, session state) goes back to the caller at once. A vendor-defined code
/// means nothing to slot 0's caller, who did not choose the provider: the next one is tried.
pub fn recoverable(rv: CK_RV) -> bool {
    rv >= CKR_VENDOR_DEFINED
        || matches!(
            rv,
            CKR_DEVICE_ERROR
                | CKR_DEVICE_MEMORY
                | CKR_HOST_MEMORY
                | CKR_FUNCTION_FAILED
                | CKR_KEY_SIZE_RANGE
                | CKR_MECHANISM_INVALID
                | CKR_KEY_TYPE_INCONSISTENT
                | CKR_GENERAL_ERROR
                | CKR_FUNCTION_NOT_SUPPORTED
                | CKR_DEVICE_REMOVED
        )
}

/// A key's clone in another provider: its handle there, and the key's guards
/// ([`CLONE_GUARDS`]) as they were read before the clone was made.
struct KeyClone {
    h: CK_OBJECT_HANDLE,
    guards: Vec<AttrValue>,
}

/// Clones of keystore keys in other providers: (keystore handle, provider index) → the clone.
/// The clones are session objects of the provider's framework-owned session
/// ([`crate::providers::Prov::internal_session`]).
pub struct CloneCache {
    map: RwLock<Clones>,
    /// How many clones `map` holds, kept by [`Writing`]: with none (every application that
    /// uses the providers' own slots only), a pass-through call checks no lock.
    count: AtomicUsize,
    /// Serializes clone creation into each provider, so two threads do not clone the same key
    /// twice there; one lock per provider, so a provider slow to take a clone holds up no
    /// other provider's.
    making: Box<[Mutex<()>]>,
}

/// The cache locked for a change; the count follows the change when it is dropped.
struct Writing<'a> {
    clones: std::sync::RwLockWriteGuard<'a, Clones>,
    count: &'a AtomicUsize,
}

impl std::ops::Deref for Writing<'_> {
    type Target = Clones;
    fn deref(&self) -> &Clones {
        &self.clones
    }
}

impl std::ops::DerefMut for Writing<'_> {
    fn deref_mut(&mut self) -> &mut Clones {
        &mut self.clones
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.count
            .store(self.clones.by_key.len(), AtomicOrdering::Release);
    }
}

/// The cached clones, by key and by their handle in their provider.
#[derive(Default)]
struct Clones {
    by_key: HashMap<(CK_OBJECT_HANDLE, usize), KeyClone>,
    /// (provider, clone handle) → how many entries of `by_key` have it (one, unless a
    /// provider gave a lost clone's handle to a new one before the loss was noticed).
    by_handle: HashMap<(usize, CK_OBJECT_HANDLE), usize>,
}

impl Clones {
    fn insert(&mut self, key: CK_OBJECT_HANDLE, prov: usize, c: KeyClone) {
        *self.by_handle.entry((prov, c.h)).or_insert(0) += 1;
        if let Some(old) = self.by_key.insert((key, prov), c) {
            self.unindex(prov, old.h);
        }
    }
    fn remove(&mut self, key: CK_OBJECT_HANDLE, prov: usize) -> Option<KeyClone> {
        let c = self.by_key.remove(&(key, prov))?;
        self.unindex(prov, c.h);
        Some(c)
    }
    fn unindex(&mut self, prov: usize, h: CK_OBJECT_HANDLE) {
        if let Some(n) = self.by_handle.get_mut(&(prov, h)) {
            *n -= 1;
            if *n == 0 {
                self.by_handle.remove(&(prov, h));
            }
        }
    }
}

impl CloneCache {
    /// An empty cache for `providers` providers.
    pub fn new(providers: usize) -> CloneCache {
        CloneCache {
            map: RwLock::default(),
            count: AtomicUsize::new(0),
            making: (0..providers).map(|_| Mutex::new(())).collect(),
        }
    }
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Clones> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }
    fn write(&self) -> Writing<'_> {
        Writing {
            clones: self.map.write().unwrap_or_else(|e| e.into_inner()),
            count: &self.count,
        }
    }
    /// The clone of `key` in `prov`, if it was made with these `guards`.
    fn get(
        &self,
        key: CK_OBJECT_HANDLE,
        prov: usize,
        guards: &[AttrValue],
    ) -> Option<CK_OBJECT_HANDLE> {
        self.read()
            .by_key
            .get(&(key, prov))
            .filter(|c| c.guards == guards)
            .map(|c| c.h)
    }
    /// Removes the clone of `key` in `prov` made with other guards than `guards`, returning
    /// (provider, clone handle) to destroy.
    fn forget_stale(
        &self,
        key: CK_OBJECT_HANDLE,
        prov: usize,
        guards: &[AttrValue],
    ) -> Option<(usize, CK_OBJECT_HANDLE)> {
        let mut m = self.write();
        match m.by_key.get(&(key, prov)) {
            Some(c) if c.guards != guards => m.remove(key, prov).map(|c| (prov, c.h)),
            _ => None,
        }
    }
    /// Forgets the clone of `key` in `prov` if it is `h`, which the provider no longer has;
    /// whether it did.
    fn forget_lost(&self, key: CK_OBJECT_HANDLE, prov: usize, h: CK_OBJECT_HANDLE) -> bool {
        let mut m = self.write();
        if m.by_key.get(&(key, prov)).is_some_and(|c| c.h == h) {
            m.remove(key, prov);
            return true;
        }
        false
    }
    /// Whether `h` is a clone slot 0 keeps in `prov`: one atomic load while there is none,
    /// else one hash lookup.
    pub fn holds(&self, prov: usize, h: CK_OBJECT_HANDLE) -> bool {
        !self.is_empty() && self.read().by_handle.contains_key(&(prov, h))
    }
    /// No clone is cached.
    pub fn is_empty(&self) -> bool {
        self.count.load(AtomicOrdering::Acquire) == 0
    }
    /// Removes the clones whose original `gone` says no longer exists, returning (provider,
    /// clone handle) pairs to destroy. `gone` runs without the cache locked.
    pub fn sweep(
        &self,
        mut gone: impl FnMut(CK_OBJECT_HANDLE) -> bool,
    ) -> Vec<(usize, CK_OBJECT_HANDLE)> {
        let all: Vec<_> = self
            .read()
            .by_key
            .iter()
            .map(|(&(k, p), c)| (k, p, c.h))
            .collect();
        let mut dead = Vec::new();
        let mut checked: HashMap<CK_OBJECT_HANDLE, bool> = HashMap::new();
        for (k, p, h) in all {
            if *checked.entry(k).or_insert_with(|| gone(k)) {
                dead.push((k, p, h));
            }
        }
        let mut m = self.write();
        dead.into_iter()
            .filter(|&(k, p, h)| {
                m.by_key.get(&(k, p)).is_some_and(|c| c.h == h) && m.remove(k, p).is_some()
            })
            .map(|(_, p, h)| (p, h))
            .collect()
    }
    /// Removes every clone of `key`, returning (provider, clone handle) pairs to destroy.
    pub fn forget(&self, key: CK_OBJECT_HANDLE) -> Vec<(usize, CK_OBJECT_HANDLE)> {
        let mut m = self.write();
        let gone: Vec<_> = m
            .by_key
            .iter()
            .filter(|((k, _), _)| *k == key)
            .map(|((_, p), c)| (*p, c.h))
            .collect();
        for (p, _) in &gone {
            m.remove(key, *p);
        }
        gone
    }
}

/// What decides how a clone may be used, read from the key in the keystore each time a
/// clone is about to serve: its class (which also fails for a key out of the session's
/// reach), its usage flags and its mechanism restriction. A clone made with other values (the
/// key changed through another slot, by another process, or while the clone was being made)
/// is destroyed and made again from the key as it is.
const CLONE_GUARDS: [CK_ATTRIBUTE_TYPE; 11] = {
    let mut g = [CKA_CLASS; 11];
    let mut i = 0;
    while i < BOOL_USAGE.len() {
        g[GUARD_USAGE + i] = BOOL_USAGE[i];
        i += 1;
    }
    g[GUARD_ALLOWED] = CKA_ALLOWED_MECHANISMS;
    g
};
/// Where [`BOOL_USAGE`] starts in [`CLONE_GUARDS`] (after the class).
const GUARD_USAGE: usize = 1;
/// Where `CKA_ALLOWED_MECHANISMS` is in [`CLONE_GUARDS`] (last).
const GUARD_ALLOWED: usize = GUARD_USAGE + BOOL_USAGE.len();

const BOOL_USAGE: [CK_ATTRIBUTE_TYPE; 9] = [
    CKA_ENCRYPT,
    CKA_DECRYPT,
    CKA_SIGN,
    CKA_VERIFY,
    CKA_WRAP,
    CKA_UNWRAP,
    CKA_DERIVE,
    CKA_SIGN_RECOVER,
    CKA_VERIFY_RECOVER,
];

/// The value attributes that make up a key of this class and type.
fn value_attrs(class: CK_OBJECT_CLASS, kt: CK_KEY_TYPE) -> Vec<CK_ATTRIBUTE_TYPE> {
    match (class, kt) {
        (CKO_SECRET_KEY, _) => vec![CKA_VALUE],
        (CKO_PRIVATE_KEY, CKK_RSA) => vec![
            CKA_MODULUS,
            CKA_PUBLIC_EXPONENT,
            CKA_PRIVATE_EXPONENT,
            CKA_PRIME_1,
            CKA_PRIME_2,
            CKA_EXPONENT_1,
            CKA_EXPONENT_2,
            CKA_COEFFICIENT,
        ],
        (CKO_PUBLIC_KEY, CKK_RSA) => vec![CKA_MODULUS, CKA_PUBLIC_EXPONENT],
        (CKO_PRIVATE_KEY, CKK_EC | CKK_EC_EDWARDS | CKK_EC_MONTGOMERY) => {
            vec![CKA_EC_PARAMS, CKA_VALUE]
        }
        (CKO_PUBLIC_KEY, CKK_EC | CKK_EC_EDWARDS | CKK_EC_MONTGOMERY) => {
            vec![CKA_EC_PARAMS, CKA_EC_POINT]
        }
        _ => vec![CKA_PARAMETER_SET, CKA_VALUE],
    }
}

fn ulong_of(v: &AttrValue) -> CkResult<CK_ULONG> {
    match v {
        AttrValue::Value(b) => ulong_from_bytes(b),
        _ => Err(CKR_KEY_HANDLE_INVALID),
    }
}

/// A `CK_BBOOL` read as the software token reads it: any byte but `CK_FALSE` is true (a key
/// stored with the byte 2 in `CKA_ALWAYS_AUTHENTICATE` needs the PIN there, so it must here).
fn is_true(v: &AttrValue) -> bool {
    matches!(v, AttrValue::Value(b) if opencf_abi::bool_from_bytes(b) == Ok(true))
}

/// Runs a two-call output function: size query, then the real call.
pub fn two_call(mut f: impl FnMut(&mut OutBuf) -> CkResult<()>) -> CkResult<Vec<u8>> {
    let mut q = OutBuf::new(None);
    f(&mut q)?;
    let mut buf = vec![0u8; q.len()];
    let n = {
        let mut o = OutBuf::new(Some(&mut buf));
        f(&mut o)?;
        o.len()
    };
    buf.truncate(n);
    Ok(buf)
}

/// Where a metaslot call runs: a provider's session, and with it the session object itself
/// when the provider is the linked-in keystore and lent it ([`MetaSession::ks_pin`]); the
/// single-part calls and inits that have a pinned form take it, skipping the keystore's own
/// handle lookup.
#[derive(Clone, Copy)]
pub struct At<'a> {
    /// The provider.
    pub p: &'a Provider,
    /// Its session.
    pub h: CK_SESSION_HANDLE,
    /// The same session, pinned.
    pub pin: Option<&'a Pinned>,
}

impl At<'_> {
    /// `C_Encrypt`.
    #[inline]
    pub fn encrypt(self, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        match self.pin {
            Some(pin) => self.p.pinned_encrypt(pin, d, o),
            None => self.p.encrypt(self.h, d, o),
        }
    }
    /// `C_Decrypt`.
    #[inline]
    pub fn decrypt(self, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        match self.pin {
            Some(pin) => self.p.pinned_decrypt(pin, d, o),
            None => self.p.decrypt(self.h, d, o),
        }
    }
    /// `C_Sign`.
    #[inline]
    pub fn sign(self, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        match self.pin {
            Some(pin) => self.p.pinned_sign(pin, d, o),
            None => self.p.sign(self.h, d, o),
        }
    }
    /// `C_Verify`.
    #[inline]
    pub fn verify(self, d: &[u8], sig: &[u8]) -> CkResult<()> {
        match self.pin {
            Some(pin) => self.p.pinned_verify(pin, d, sig),
            None => self.p.verify(self.h, d, sig),
        }
    }
    /// `C_Digest`.
    #[inline]
    pub fn digest(self, d: &[u8], o: &mut OutBuf) -> CkResult<()> {
        match self.pin {
            Some(pin) => self.p.pinned_digest(pin, d, o),
            None => self.p.digest(self.h, d, o),
        }
    }
}

/// How a mechanism is routed for one kind of operation, computed at `C_Initialize` (the
/// providers' mechanism lists and policies do not change while the framework is initialized).
#[derive(Clone, Debug, Default)]
pub struct Route {
    /// Candidate providers, in config order.
    pub cands: Cands,
    /// Each candidate's `min_bytes` threshold for the mechanism (`None`: none), in the order
    /// of [`Route::cands`].
    pub min: Vec<Option<u64>>,
}

impl Route {
    /// Some candidate has a `min_bytes` threshold: binding waits for the data length.
    pub fn defer(&self) -> bool {
        self.min.iter().any(Option::is_some)
    }
    /// Whether candidate `i` takes a single-part input of `len` bytes: its `min_bytes`
    /// threshold (if any) is at most `len`, or it is the last candidate.
    pub fn takes_len(&self, i: usize, len: usize) -> bool {
        i + 1 == self.cands.len() || self.min[i].is_none_or(|min| len as u64 >= min)
    }
    /// The first candidate that takes a single-part input of `len` bytes.
    pub fn first_for_len(&self, len: usize) -> usize {
        (0..self.cands.len())
            .find(|&i| self.takes_len(i, len))
            .unwrap_or(0)
    }
    /// The smallest single-part input that a candidate before candidate `i` takes (so
    /// `first_for_len(len) < i` exactly when `len` reaches it); `u64::MAX` when none does.
    pub fn move_at(&self, i: usize) -> u64 {
        (0..i.min(self.cands.len()))
            .map(|j| self.min[j].unwrap_or(0))
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// The routes of every mechanism of the metaslot, by kind of operation.
pub type Routes = crate::UlongMap<CK_MECHANISM_TYPE, Box<[Route; OP_KINDS]>>;

/// Builds [`Routes`] over the providers for the merged mechanism list `mechs`.
pub fn routes(
    provs: &[crate::providers::Prov],
    mechs: &HashMap<CK_MECHANISM_TYPE, CK_MECHANISM_INFO>,
) -> Routes {
    let mut out = Routes::default();
    for &m in mechs.keys() {
        let per_kind: [Route; OP_KINDS] = std::array::from_fn(|k| {
            let flag = KINDS[k].flag();
            let mut r = Route::default();
            for (i, p) in provs.iter().enumerate() {
                if p.mechs.get(&m).is_some_and(|info| info.flags & flag != 0) {
                    r.cands.push(i);
                    r.min.push(p.cfg.min_bytes(m));
                }
            }
            r
        });
        out.insert(m, Box::new(per_kind));
    }
    out
}

impl OpenCf {
    /// The metaslot session's session in provider `prov`, opened on first use.
    pub fn session_in(&self, ms: &mut MetaSession, prov: usize) -> CkResult<CK_SESSION_HANDLE> {
        if prov == self.meta()?.keystore {
            return Ok(ms.ks);
        }
        if let Some((_, h)) = ms.others.iter().find(|(p, _)| *p == prov) {
            return Ok(*h);
        }
        let pr = &self.providers[prov];
        let slot = pr.meta_slot.ok_or(CKR_DEVICE_REMOVED)?;
        // An asynchronous metaslot session is asynchronous in the providers that offer it.
        let async_too = ms.flags & CKF_ASYNC_SESSION != 0 && pr.offers_async();
        let flags = CKF_SERIAL_SESSION | if async_too { CKF_ASYNC_SESSION } else { 0 };
        let h = pr.p.open_session(slot, flags)?;
        ms.others.push((prov, h));
        Ok(h)
    }

    /// The handle of metaslot key `key` in provider `prov`: the key itself in the keystore, a
    /// (cached) clone elsewhere. `Ok(None)`: the key cannot be moved there (skip the provider).
    pub fn key_in(
        &self,
        ms: &mut MetaSession,
        prov: usize,
        key: CK_OBJECT_HANDLE,
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        if prov == self.meta()?.keystore {
            return Ok(Some(key));
        }
        // A clone serves only while the key itself is within this session's reach in the
        // keystore (not once it is destroyed, elsewhere or with the session that owned a
        // session object, nor, for a private key, after C_Logout), and only as the key is
        // now ([`CLONE_GUARDS`]).
        let guards = self.clone_guards(ms, key)?;
        if let Some(h) = self.clones.get(key, prov, &guards) {
            return Ok(Some(h));
        }
        let _g = self.clones.making[prov]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(h) = self.clones.get(key, prov, &guards) {
            return Ok(Some(h));
        }
        if let Some(stale) = self.clones.forget_stale(key, prov, &guards) {
            self.destroy_clones(vec![stale]);
        }
        // The clone takes its usage flags and mechanism restriction from these guards, so
        // it is made with exactly the values it is recorded with; a change after this read
        // makes the next use find them different and make the clone again.
        let made = self.make_clone(ms, prov, key, &guards)?;
        if let Some(h) = made {
            self.clones
                .write()
                .insert(key, prov, KeyClone { h, guards });
        }
        Ok(made)
    }

    /// `f` run with metaslot key `key`'s handle in provider `prov` ([`OpenCf::key_in`]);
    /// `Ok(None)` when the key cannot be moved there. When the provider answers that the
    /// handle is invalid and it was a clone slot 0 had cached (destroyed behind slot 0's back,
    /// e.g. through the provider's own slot), the clone is forgotten, made again, and `f` runs
    /// once more with it.
    pub fn with_key_in<T>(
        &self,
        ms: &mut MetaSession,
        prov: usize,
        key: CK_OBJECT_HANDLE,
        f: impl Fn(&MetaSession, CK_OBJECT_HANDLE) -> CkResult<T>,
    ) -> CkResult<Option<CkResult<T>>> {
        let Some(h) = self.key_in(ms, prov, key)? else {
            return Ok(None);
        };
        let r = f(ms, h);
        // The cache holds no entry for the keystore, whose handle is the key itself.
        let lost = matches!(r, Err(CKR_KEY_HANDLE_INVALID | CKR_OBJECT_HANDLE_INVALID))
            && self.clones.forget_lost(key, prov, h);
        if !lost {
            return Ok(Some(r));
        }
        Ok(self.key_in(ms, prov, key)?.map(|h| f(ms, h)))
    }

    /// `CKR_KEY_HANDLE_INVALID` unless metaslot key `key` is an object within the reach of
    /// session `ms` in the keystore (one attribute read).
    fn check_key(&self, ms: &MetaSession, key: CK_OBJECT_HANDLE) -> CkResult<()> {
        self.p(self.meta()?.keystore)
            .get_attribute_value(ms.ks, key, &[CKA_CLASS])
            .map(|_| ())
            .map_err(key_handle_error)
    }

    /// Metaslot key `key`'s [`CLONE_GUARDS`] in the keystore, in session `ms`:
    /// `CKR_KEY_HANDLE_INVALID` when it is not an object within that session's reach.
    fn clone_guards(&self, ms: &MetaSession, key: CK_OBJECT_HANDLE) -> CkResult<Vec<AttrValue>> {
        self.p(self.meta()?.keystore)
            .get_attribute_value(ms.ks, key, &CLONE_GUARDS)
            .map_err(key_handle_error)
    }

    /// Clones metaslot key `key` into provider `prov`, with the usage flags and mechanism
    /// restriction of `guards` (the key's [`CLONE_GUARDS`], as [`OpenCf::key_in`] read them).
    fn make_clone(
        &self,
        ms: &mut MetaSession,
        prov: usize,
        key: CK_OBJECT_HANDLE,
        guards: &[AttrValue],
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        let ks = self.p(self.meta()?.keystore);
        // The class is the first guard; the rest of what the clone needs besides its value
        // comes in one call.
        let class = ulong_of(&guards[0])?;
        let head = ks
            .get_attribute_value(
                ms.ks,
                key,
                &[CKA_KEY_TYPE, CKA_ALWAYS_AUTHENTICATE, CKA_LABEL, CKA_ID],
            )
            .map_err(key_handle_error)?;
        let kt = ulong_of(&head[0])?;
        // A key that wants the user's PIN before each use stays where that is enforced.
        if is_true(&head[1]) {
            return Ok(None);
        }
        let vals_t = value_attrs(class, kt);
        let vals = ks.get_attribute_value(ms.ks, key, &vals_t)?;
        let target = &self.providers[prov];
        let ts = match target.internal_session() {
            Ok(h) => h,
            Err(_) => return Ok(None),
        };
        let mut tmpl = vec![
            Attribute::ulong(CKA_CLASS, class),
            Attribute::ulong(CKA_KEY_TYPE, kt),
            Attribute::bool(CKA_TOKEN, false),
            Attribute::bool(CKA_PRIVATE, false),
        ];
        for (t, v) in [CKA_LABEL, CKA_ID].iter().zip(&head[2..]) {
            if let AttrValue::Value(b) = v {
                tmpl.push(Attribute::new(*t, b.clone()));
            }
        }
        // Every usage flag the key has, false ones too: left out, a flag takes the target's
        // default, which for most is true.
        for (t, v) in BOOL_USAGE.iter().zip(&guards[GUARD_USAGE..GUARD_ALLOWED]) {
            if let AttrValue::Value(_) = v {
                tmpl.push(Attribute::bool(*t, is_true(v)));
            }
        }
        // The clone keeps the key's mechanism restriction.
        if let AttrValue::Value(b) = &guards[GUARD_ALLOWED] {
            if !b.is_empty() {
                tmpl.push(Attribute::new(CKA_ALLOWED_MECHANISMS, b.clone()));
            }
        }
        if vals.iter().all(|v| !matches!(v, AttrValue::Sensitive)) {
            // Non-sensitive: by attributes.
            for (t, v) in vals_t.iter().zip(vals) {
                if let AttrValue::Value(b) = v {
                    tmpl.push(Attribute::new(*t, b));
                }
            }
            return Ok(target.p.create_object(ts, &tmpl).ok());
        }
        // Sensitive: wrap in the keystore under a one-off AES-256 key, unwrap in the target.
        if !self.meta()?.auto_key_migrate {
            return Ok(None);
        }
        let guard =
            ks.get_attribute_value(ms.ks, key, &[CKA_EXTRACTABLE, CKA_WRAP_WITH_TRUSTED])?;
        let wm = if is_true(&guard[0]) && !is_true(&guard[1]) {
            self.wrap_mechs(prov)
        } else {
            // A non-extractable key (or one that only a trusted key may wrap) moves only by the
            // keystore's migration mechanism: AES-KWP that the software token serves to the
            // framework alone (docs/METASLOT.md).
            self.kwp_unwrap_mech(prov)
                .map(|u| (CKM_OPENCF_MIGRATE_KWP, u))
        };
        let Some(wm) = wm else {
            return Ok(None);
        };
        tmpl.push(Attribute::bool(CKA_SENSITIVE, true));
        tmpl.push(Attribute::bool(CKA_EXTRACTABLE, false));
        Ok(self.migrate(ms, prov, ts, key, &tmpl, wm).ok().flatten())
    }

    /// The mechanism with which provider `prov` unwraps AES-KWP (RFC 5649), under either
    /// number.
    fn kwp_unwrap_mech(&self, prov: usize) -> Option<CK_MECHANISM_TYPE> {
        let t = &self.providers[prov].mechs;
        [CKM_AES_KEY_WRAP_KWP, CKM_AES_KEY_WRAP_PAD]
            .into_iter()
            .find(|m| t.get(m).is_some_and(|i| i.flags & CKF_UNWRAP != 0))
    }

    /// The (wrap, unwrap) mechanisms that move a key from the keystore to provider `prov`:
    /// AES key wrap with padding (RFC 5649) where both have it — also when the target lists it
    /// under the older number `CKM_AES_KEY_WRAP_PAD` (SoftHSMv2 does; same algorithm) — else
    /// plain AES key wrap (RFC 3394, inputs a multiple of 8 bytes).
    fn wrap_mechs(&self, prov: usize) -> Option<(CK_MECHANISM_TYPE, CK_MECHANISM_TYPE)> {
        let ks = &self.providers[self.meta.as_ref()?.keystore].mechs;
        let t = &self.providers[prov].mechs;
        let can = |m: &crate::UlongMap<CK_MECHANISM_TYPE, CK_MECHANISM_INFO>, k, f| {
            m.get(&k).is_some_and(|i| i.flags & f != 0)
        };
        [
            (CKM_AES_KEY_WRAP_KWP, CKM_AES_KEY_WRAP_KWP),
            (CKM_AES_KEY_WRAP_KWP, CKM_AES_KEY_WRAP_PAD),
            (CKM_AES_KEY_WRAP_PAD, CKM_AES_KEY_WRAP_PAD),
            (CKM_AES_KEY_WRAP, CKM_AES_KEY_WRAP),
        ]
        .into_iter()
        .find(|&(w, u)| can(ks, w, CKF_WRAP) && can(t, u, CKF_UNWRAP))
    }

    fn migrate(
        &self,
        ms: &mut MetaSession,
        prov: usize,
        ts: CK_SESSION_HANDLE,
        key: CK_OBJECT_HANDLE,
        tmpl: &[Attribute],
        (wrap_m, unwrap_m): (CK_MECHANISM_TYPE, CK_MECHANISM_TYPE),
    ) -> CkResult<Option<CK_OBJECT_HANDLE>> {
        let ks = self.p(self.meta()?.keystore);
        let target = self.p(prov);
        let one_off_t = [
            Attribute::ulong(CKA_CLASS, CKO_SECRET_KEY),
            Attribute::ulong(CKA_KEY_TYPE, CKK_AES),
            Attribute::ulong(CKA_VALUE_LEN, 32),
            Attribute::bool(CKA_TOKEN, false),
            Attribute::bool(CKA_PRIVATE, false),
            Attribute::bool(CKA_WRAP, true),
            Attribute::bool(CKA_UNWRAP, true),
            Attribute::bool(CKA_SENSITIVE, false),
            Attribute::bool(CKA_EXTRACTABLE, true),
        ];
        let wk = ks.generate_key(ms.ks, &Mechanism::new(CKM_AES_KEY_GEN), &one_off_t)?;
        let result = (|| {
            let wrapped = two_call(|o| ks.wrap_key(ms.ks, &Mechanism::new(wrap_m), wk, key, o))?;
            let v = ks.get_attribute_value(ms.ks, wk, &[CKA_VALUE])?;
            let AttrValue::Value(kv) = &v[0] else {
                return Err(CKR_FUNCTION_FAILED);
            };
            let mut t2: Vec<Attribute> = one_off_t
                .iter()
                .filter(|a| a.kind != CKA_VALUE_LEN)
                .cloned()
                .collect();
            t2.push(Attribute::new(CKA_VALUE, kv.clone()));
            let tk = target.create_object(ts, &t2)?;
            let r = target.unwrap_key(ts, &Mechanism::new(unwrap_m), tk, &wrapped, tmpl);
            let _ = target.destroy_object(ts, tk);
            r
        })();
        let _ = ks.destroy_object(ms.ks, wk);
        Ok(result.ok())
    }

    /// Where an operation bound to `b` runs (`pin`: the session's [`MetaSession::ks_pin`]).
    #[inline]
    pub fn at<'a>(&'a self, b: &Bound, pin: Option<&'a Pinned>) -> At<'a> {
        At {
            p: self.p(b.prov),
            h: b.h,
            pin: pin.filter(|_| b.ks),
        }
    }

    /// Calls the init of `kind` where `at` says.
    pub fn init_on(
        &self,
        kind: OpKind,
        at: At<'_>,
        mech: MechRef<'_>,
        key: CK_OBJECT_HANDLE,
        extra: &[u8],
    ) -> CkResult<()> {
        let (p, h) = (at.p, at.h);
        if let Some(pin) = at.pin {
            match kind {
                OpKind::Encrypt => return p.pinned_encrypt_init(pin, mech, key),
                OpKind::Decrypt => return p.pinned_decrypt_init(pin, mech, key),
                OpKind::Sign => return p.pinned_sign_init(pin, mech, key),
                OpKind::Verify => return p.pinned_verify_init(pin, mech, key),
                OpKind::Digest => return p.pinned_digest_init(pin, mech),
                _ => {}
            }
        }
        match kind {
            OpKind::Encrypt => p.encrypt_init(h, mech, key),
            OpKind::Decrypt => p.decrypt_init(h, mech, key),
            OpKind::Sign => p.sign_init(h, mech, key),
            OpKind::Verify => p.verify_init(h, mech, key),
            OpKind::Digest => p.digest_init(h, mech),
            OpKind::SignRecover => p.sign_recover_init(h, mech, key),
            OpKind::VerifyRecover => p.verify_recover_init(h, mech, key),
            OpKind::VerifySignature => p.verify_signature_init(h, mech, key, extra),
        }
    }

    /// The route of mechanism `mt` for `kind` (no candidates when the metaslot does not offer
    /// it).
    fn route(&self, mt: CK_MECHANISM_TYPE, kind: OpKind) -> CkResult<&Route> {
        static NONE: Route = Route {
            cands: Cands::EMPTY,
            min: Vec::new(),
        };
        Ok(self
            .meta()?
            .routes
            .get(&mt)
            .map_or(&NONE, |r| &r[kind as usize]))
    }

    /// Binds `op` to the first candidate of `among` (indices into the route's candidates) whose
    /// init succeeds. With `len` known, a candidate whose `min_bytes` threshold is above it is
    /// passed over (unless it is the last).
    pub fn bind(
        &self,
        ms: &mut MetaSession,
        kind: OpKind,
        op: &mut Op,
        among: Range<usize>,
        len: Option<usize>,
    ) -> CkResult<()> {
        let route = self.route(op.mech, kind)?;
        let kept = op.kept.take();
        let bare = Mechanism::new(op.mech);
        let (mech, extra) = match &kept {
            Some(k) => (&k.mech, &k.extra[..]),
            None => (&bare, &[][..]),
        };
        let r = self.bind_with(ms, kind, op.key, route, mech.into(), extra, among, len);
        op.kept = kept;
        op.bound = Some(r?);
        Ok(())
    }

    /// Where an operation on key `key` (if any) with mechanism `mech` and extra init data
    /// `extra` runs: the first candidate of `route` in `among` whose init succeeds (see
    /// [`OpenCf::bind`]).
    #[allow(clippy::too_many_arguments)]
    fn bind_with(
        &self,
        ms: &mut MetaSession,
        kind: OpKind,
        key: Option<CK_OBJECT_HANDLE>,
        route: &Route,
        mech: MechRef<'_>,
        extra: &[u8],
        among: Range<usize>,
        len: Option<usize>,
    ) -> CkResult<Bound> {
        let mut last = CKR_MECHANISM_INVALID;
        // The providers whose init failed: fallbacks once a later one takes the operation.
        let mut left_behind: Vec<usize> = Vec::new();
        let mt = mech.mechanism();
        let cands = &route.cands[..];
        let end = among.end.min(cands.len());
        for (i, &prov) in cands.iter().enumerate().take(end).skip(among.start) {
            if len.is_some_and(|len| !route.takes_len(i, len)) {
                continue;
            }
            let h = match self.session_in(ms, prov) {
                Ok(h) => h,
                Err(e)
                    if recoverable(e) || e == CKR_DEVICE_REMOVED || e == CKR_TOKEN_NOT_PRESENT =>
                {
                    last = e;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let b = Bound {
                idx: i,
                prov,
                h,
                ks: prov == self.meta()?.keystore,
                counters: None,
            };
            let init = |ms: &MetaSession, pk| {
                self.init_on(kind, self.at(&b, ms.ks_pin.as_ref()), mech, pk, extra)
            };
            let r = match key {
                None => init(ms, 0),
                Some(k) => match self.with_key_in(ms, prov, k, init) {
                    Ok(Some(r)) => r,
                    Ok(None) => continue,
                    Err(e) if recoverable(e) => {
                        last = e;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            match r {
                Ok(()) => {
                    self.fallbacks(&left_behind, mt);
                    let counters = self.providers[prov].stats.map(|s| ms.counters(prov, mt, s));
                    return Ok(Bound { counters, ..b });
                }
                Err(e) if recoverable(e) => {
                    self.left(prov, mt, e);
                    left_behind.push(prov);
                    last = e;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// A metaslot `C_*Init`. The common case — the session's last binding of this mechanism
    /// went straight to the keystore ([`MetaSession::direct`]) — is kept short, the rest is
    /// [`OpenCf::meta_init_routed`].
    pub fn meta_init(
        &self,
        m: &opencf_abi::sync::SessionLock<MetaSession>,
        kind: OpKind,
        mech: MechRef<'_>,
        key: Option<CK_OBJECT_HANDLE>,
        extra: &[u8],
    ) -> CkResult<()> {
        let mut guard = m.lock();
        let ms = &mut *guard;
        let mt = mech.mechanism();
        match ms.direct[kind as usize] {
            Some(d) if d.mech == mt && !ms.occupied(kind) && ms.pending.is_empty() => {
                // As `bind_with` over that candidate, without looking the route up.
                let at = self.at(&d.b, ms.ks_pin.as_ref());
                let key_h = key.unwrap_or(0);
                let r = if d.eager {
                    let mut kept = Kept::reuse(&mut ms.spare, mech)?;
                    kept.extra.clear();
                    kept.extra.extend_from_slice(extra);
                    self.init_on(kind, at, (&kept.mech).into(), key_h, extra)
                        .map(|()| Op {
                            bound: Some(d.b),
                            eager: true,
                            move_at: d.move_at,
                            ..Op::new(mt, key, Some(kept))
                        })
                } else if at.pin.is_some() {
                    // The linked keystore takes a parsed mechanism: parse it into the spare
                    // copy's buffers rather than have the keystore allocate a new parse.
                    let kept = Kept::reuse(&mut ms.spare, mech)?;
                    let r = self.init_on(kind, at, (&kept.mech).into(), key_h, extra);
                    ms.spare = Some(kept);
                    r.map(|()| Op::bound_to(mt, key, d.b))
                } else {
                    self.init_on(kind, at, mech, key_h, extra)
                        .map(|()| Op::bound_to(mt, key, d.b))
                };
                match r {
                    Ok(op) => {
                        ms.ops[kind as usize] = Some(op);
                        Ok(())
                    }
                    Err(e) => {
                        if recoverable(e) {
                            self.left(d.b.prov, mt, e);
                        }
                        Err(e)
                    }
                }
            }
            _ => self.meta_init_routed(ms, kind, mech, key, extra),
        }
    }

    /// A metaslot `C_*Init` through the mechanism's route: binding, or keeping what a later
    /// binding needs.
    #[inline(never)]
    fn meta_init_routed(
        &self,
        ms: &mut MetaSession,
        kind: OpKind,
        mech: MechRef<'_>,
        key: Option<CK_OBJECT_HANDLE>,
        extra: &[u8],
    ) -> CkResult<()> {
        if ms.occupied(kind) || ms.is_pending(kind) {
            return Err(CKR_OPERATION_ACTIVE);
        }
        let mt = mech.mechanism();
        let route = match self.meta()?.routes.get(&mt) {
            Some(r) if !r[kind as usize].cands.is_empty() => &r[kind as usize],
            _ => return Err(CKR_MECHANISM_INVALID),
        };
        let cands = &route.cands[..];
        let defer = route.defer();
        if !defer && cands.len() == 1 {
            // Nothing to keep: the caller's mechanism goes to the provider as it came.
            let b = self.bind_with(ms, kind, key, route, mech, extra, ALL, None)?;
            if b.ks {
                ms.direct[kind as usize] = Some(Direct {
                    mech: mt,
                    b,
                    eager: false,
                    move_at: 0,
                });
            }
            ms.ops[kind as usize] = Some(Op::bound_to(mt, key, b));
            return Ok(());
        }
        // A later candidate may have to run the operation: keep the parameter.
        let kept = Kept {
            mech: mech.to_mechanism()?,
            extra: extra.to_vec(),
        };
        let mut op = Op::new(mt, key, Some(Box::new(kept)));
        if !defer {
            self.bind(ms, kind, &mut op, ALL, None)?;
        } else {
            // A threshold applies, but binding now costs nothing when the candidate for the
            // smallest input can cancel the operation (`C_SessionCancel`, 3.0) should a larger
            // input belong to an earlier candidate: errors then come from the init, as without
            // a threshold, and small operations take the direct path.
            let small = route.first_for_len(0);
            if self.p(cands[small]).has_v3() {
                self.bind(ms, kind, &mut op, small..usize::MAX, Some(0))?;
                op.eager = true;
                if let Some(b) = op.bound {
                    op.move_at = route.move_at(b.idx);
                    if b.ks && b.idx + 1 == cands.len() {
                        ms.direct[kind as usize] = Some(Direct {
                            mech: mt,
                            b,
                            eager: true,
                            move_at: op.move_at,
                        });
                    }
                }
            } else if let Some(k) = key {
                // Bind when the data length is known; check the key now.
                self.check_key(ms, k)?;
            }
        }
        ms.ops[kind as usize] = Some(op);
        Ok(())
    }

    /// A metaslot single-part call (`C_Encrypt`, `C_Sign`, …) of `len` input bytes. `query`:
    /// the output buffer is NULL, so an `Ok` leaves the operation active. A recoverable error
    /// re-runs the whole operation on the next candidate. The common case — an operation bound
    /// at init that no threshold moves for an input of this length ([`Op::move_at`]), and no
    /// error — is kept short; binding, moving and failover are in
    /// [`OpenCf::meta_single_routed`].
    pub fn meta_single(
        &self,
        m: &opencf_abi::sync::SessionLock<MetaSession>,
        kind: OpKind,
        len: usize,
        query: bool,
        mut f: impl FnMut(At<'_>) -> CkResult<()>,
    ) -> CkResult<()> {
        let mut ms = m.lock();
        let ms = &mut *ms;
        let bound = match &ms.ops[kind as usize] {
            // Eager: bound for the smallest input, and this one is too small to move it.
            Some(op) if !op.eager || (len as u64) < op.move_at => op.bound,
            _ => None,
        };
        let Some(b) = bound else {
            return self.meta_single_routed(ms, kind, len, query, &mut f, None);
        };
        let t0 = ms.timing(&b, query);
        let r = f(self.at(&b, ms.ks_pin.as_ref()));
        match r {
            // The operation stays active: a size query, or a buffer too small.
            Ok(()) if query => r,
            Err(CKR_BUFFER_TOO_SMALL) => r,
            Err(e) if recoverable(e) => {
                self.meta_single_routed(ms, kind, len, query, &mut f, Some((b, e)))
            }
            r => {
                ran(b.counters, &r, len as u64, t0);
                ms.keep_pending(kind, &b, &r);
                if let Err(e) = r {
                    self.ended_in_provider(&b, kind, e);
                }
                if let Some(Op { kept: Some(k), .. }) = ms.ops[kind as usize].take() {
                    ms.spare = Some(k);
                }
                r
            }
        }
    }

    /// A single-part call that binds (or moves) its operation first, or whose provider
    /// `failure` names has just failed with a recoverable error: the next candidate, if any,
    /// then re-runs the whole operation. An operation waiting for the data length is bound
    /// now; one bound at init for the smallest input moves to an earlier candidate whose
    /// threshold the input reaches.
    #[inline(never)]
    fn meta_single_routed(
        &self,
        ms: &mut MetaSession,
        kind: OpKind,
        len: usize,
        query: bool,
        f: &mut impl FnMut(At<'_>) -> CkResult<()>,
        mut failure: Option<(Bound, CK_RV)>,
    ) -> CkResult<()> {
        // Where the next binding starts, and the error that made it necessary (failover).
        let mut start = 0;
        let mut failed = None;
        // The providers that failed the call: fallbacks once another one answers it.
        let mut left_behind: Vec<usize> = Vec::new();
        loop {
            // The operation stays in place in the session; it is taken out only to bind it.
            let msr = &mut *ms;
            let op = msr.ops[kind as usize]
                .as_mut()
                .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
            if let Some((b, e)) = failure.take() {
                if b.idx + 1 == self.route(op.mech, kind)?.cands.len() {
                    // No candidate left: the caller gets the provider's error.
                    ran(b.counters, &Err(e), len as u64, None);
                    msr.ops[kind as usize] = None;
                    return Err(e);
                }
                self.left(b.prov, op.mech, e);
                left_behind.push(b.prov);
                op.bound = None;
                start = b.idx + 1;
                failed = Some(e);
            }
            if let Some((b, want)) = self.move_target(op, kind, len)? {
                // The input reaches an earlier candidate's threshold: move the operation.
                let mut op = msr.ops[kind as usize].take().expect("active");
                self.move_op(ms, kind, &mut op, b, want, len);
                ms.ops[kind as usize] = Some(op);
                continue;
            }
            let Some(b) = op.bound else {
                let mut op = msr.ops[kind as usize].take().expect("active");
                // Bound for this input now, not for the smallest one.
                op.eager = false;
                // No candidate left after a failover: the caller gets the provider's error.
                self.bind(ms, kind, &mut op, start..usize::MAX, Some(len))
                    .map_err(|e| failed.unwrap_or(e))?;
                ms.ops[kind as usize] = Some(op);
                continue;
            };
            let t0 = msr.timing(&b, query);
            let r = f(self.at(&b, msr.ks_pin.as_ref()));
            match r {
                // The operation stays active: a size query, or a buffer too small. Another
                // candidate has taken it over from those that failed it (the call that
                // follows goes straight to it): their fallbacks count now.
                Ok(()) | Err(CKR_BUFFER_TOO_SMALL) if query || r.is_err() => {
                    if let Some(op) = msr.ops[kind as usize].as_ref() {
                        self.fallbacks(&left_behind, op.mech);
                    }
                    return r;
                }
                Err(e) if recoverable(e) => failure = Some((b, e)),
                r => {
                    ran(b.counters, &r, len as u64, t0);
                    if let Some(op) = msr.ops[kind as usize].as_ref() {
                        self.fallbacks(&left_behind, op.mech);
                    }
                    msr.keep_pending(kind, &b, &r);
                    if let Err(e) = r {
                        self.ended_in_provider(&b, kind, e);
                    }
                    msr.ops[kind as usize] = None;
                    return r;
                }
            }
        }
    }

    /// After a single-part call that ended its operation with an error (every error but
    /// `CKR_BUFFER_TOO_SMALL` and `CKR_PENDING` ends it, PKCS#11 3.2 §5.2): the slot forgets
    /// the operation, and so must the provider. One that keeps it after such an error would
    /// answer every later init of that kind with `CKR_OPERATION_ACTIVE` in a session the slot
    /// reports idle, so it is told to end it.
    #[cold]
    fn ended_in_provider(&self, b: &Bound, kind: OpKind, e: CK_RV) {
        if e != CKR_PENDING {
            let _ = self.end_in_provider(b.prov, b.h, kind);
        }
    }

    /// Ends the operation of `kind` in session `h` of provider `prov`: with
    /// `C_SessionCancel`, or, in a provider without it (a PKCS#11 2.40 module), with the call
    /// that finishes the operation, which ends it on every answer but `CKR_BUFFER_TOO_SMALL`
    /// (PKCS#11 3.2 §5.2). Its output room holds any last output of the mechanisms served (a
    /// signature, a digest, the last blocks); a larger one the provider asks for (a decryption
    /// that gives all its output at the end) is given up to [`END_ROOM_MAX`].
    /// `CKR_OPERATION_CANCEL_FAILED` when the operation could not be ended.
    #[cold]
    pub fn end_in_provider(&self, prov: usize, h: CK_SESSION_HANDLE, kind: OpKind) -> CkResult<()> {
        let p = self.p(prov);
        match p.session_cancel(h, kind.flag()) {
            Err(CKR_FUNCTION_NOT_SUPPORTED) => {}
            r => return r,
        }
        let mut room = vec![0u8; END_ROOM];
        loop {
            let mut out = OutBuf::new(Some(&mut room[..]));
            let r = match kind {
                OpKind::Encrypt => p.encrypt_final(h, &mut out),
                OpKind::Decrypt => p.decrypt_final(h, &mut out),
                OpKind::Sign => p.sign_final(h, &mut out),
                OpKind::Digest => p.digest_final(h, &mut out),
                OpKind::Verify => p.verify_final(h, &[]),
                OpKind::VerifySignature => p.verify_signature_final(h),
                OpKind::SignRecover => p.sign_recover(h, &[], &mut out),
                OpKind::VerifyRecover => p.verify_recover(h, &[], &mut out),
            };
            if r != Err(CKR_BUFFER_TOO_SMALL) {
                return Ok(());
            }
            let want = out.len();
            if want <= room.len() || want > END_ROOM_MAX {
                return Err(CKR_OPERATION_CANCEL_FAILED);
            }
            room = vec![0u8; want];
        }
    }

    /// For an operation bound at init for the smallest input (eager): where it is bound, and
    /// the earlier candidate an input of `len` bytes reaches the threshold of, if any.
    fn move_target(&self, op: &Op, kind: OpKind, len: usize) -> CkResult<Option<(Bound, usize)>> {
        let Some(b) = op.bound.filter(|_| op.eager) else {
            return Ok(None);
        };
        let want = self.route(op.mech, kind)?.first_for_len(len);
        Ok((want < b.idx).then_some((b, want)))
    }

    /// Moves `op`, bound at init to candidate `from` for the smallest input, to the first of
    /// the earlier candidates `want..from.idx` that takes a single-part input of `len` bytes
    /// (a single-part call, or the first step of a multi-part operation, of that length).
    /// The operation is started there before it leaves `from`: when no earlier candidate takes
    /// it (the key destroyed since the init, which the application may do; a clone refused;
    /// a busy provider), or `from` cannot cancel, it runs where the init bound it, as the
    /// init's answer promised. Either way it is no longer moved.
    fn move_op(
        &self,
        ms: &mut MetaSession,
        kind: OpKind,
        op: &mut Op,
        from: Bound,
        want: usize,
        len: usize,
    ) {
        op.eager = false;
        op.bound = None;
        if self.bind(ms, kind, op, want..from.idx, Some(len)).is_ok() {
            let to = op.bound.expect("bound");
            if self.end_in_provider(from.prov, from.h, kind).is_ok() {
                return;
            }
            // `from` keeps its operation: the new one is given up.
            let _ = self.end_in_provider(to.prov, to.h, kind);
        }
        op.bound = Some(from);
    }

    /// Runs a step of a multi-part operation on its provider (binding it first if it was
    /// waiting for the length). `len`: the step's input; `query`: the step only asks for its
    /// output's length (its input is not taken, nor counted); `ends`: the step ends the
    /// operation when it returns `r`.
    pub fn meta_step(
        &self,
        m: &opencf_abi::sync::SessionLock<MetaSession>,
        kind: OpKind,
        len: usize,
        query: bool,
        ends: impl Fn(&CkResult<()>) -> bool,
        f: impl FnOnce(&Provider, CK_SESSION_HANDLE) -> CkResult<()>,
    ) -> CkResult<()> {
        self.step_in(&mut m.lock(), kind, len, query, ends, f)
    }

    /// [`OpenCf::meta_step`] on a session already locked (the dual-function updates run two
    /// steps under one lock).
    pub fn step_in(
        &self,
        ms: &mut MetaSession,
        kind: OpKind,
        len: usize,
        query: bool,
        ends: impl Fn(&CkResult<()>) -> bool,
        f: impl FnOnce(&Provider, CK_SESSION_HANDLE) -> CkResult<()>,
    ) -> CkResult<()> {
        let mut op = ms.ops[kind as usize]
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        if op.bound.is_none() {
            // Binding waited for the data: the first step's length decides, as a single-part
            // call's would.
            self.bind(ms, kind, &mut op, ALL, Some(len))?;
        }
        // The first step of an operation bound at init for the smallest input: nothing has run
        // yet, so an input that reaches an earlier candidate's threshold moves it there, as a
        // single-part call of that length would ([`OpenCf::move_op`]).
        if let Ok(Some((b, want))) = self.move_target(&op, kind, len) {
            self.move_op(ms, kind, &mut op, b, want, len);
        }
        // The provider has seen a multi-part step: the operation stays with it, and a later
        // single-part call gets its answer (`CKR_OPERATION_ACTIVE` from a provider that
        // refuses one after an update) instead of moving to a candidate that starts afresh.
        op.eager = false;
        let b = op.bound.expect("bound");
        let r = f(self.p(b.prov), b.h);
        // The input counts once the provider took it: not for a size query or a buffer too
        // small, after which the caller gives the same input again.
        if r.is_ok() && !query {
            op.bytes += len as u64;
        }
        if ends(&r) {
            ran(b.counters, &r, op.bytes, None);
            // An error ends the operation here, so it must end in the provider too, also when
            // the error was not the provider's own (a length it reported beyond the room, which
            // the framework refused) or the provider kept it (see `ended_in_provider`).
            if let Err(e) = r {
                self.ended_in_provider(&b, kind, e);
            }
        } else {
            ms.ops[kind as usize] = Some(op);
        }
        r
    }

    /// Counts a recoverable error `e` of provider `prov` (`cryptoadm stat`): an error, or busy
    /// if it said so (`CKR_DEVICE_MEMORY`). The fallback is counted once another candidate
    /// has taken the operation over ([`OpenCf::fallbacks`]), not before: with none left, or
    /// none that could, the caller gets the error and nothing fell back.
    fn left(&self, prov: usize, mech: CK_MECHANISM_TYPE, e: CK_RV) {
        let Some(stats) = self.providers[prov].stats else {
            return;
        };
        let c = stats.mech(mech);
        if e == CKR_DEVICE_MEMORY {
            c.busy();
        } else {
            c.error();
        }
    }

    /// Counts a fallback of each provider in `left_behind`: another one took over `mech`.
    fn fallbacks(&self, left_behind: &[usize], mech: CK_MECHANISM_TYPE) {
        for &prov in left_behind {
            if let Some(stats) = self.providers[prov].stats {
                stats.mech(mech).fallback();
            }
        }
    }

    /// The bound provider of an active operation, binding it if needed (for `C_DigestKey`).
    pub fn meta_bound(&self, ms: &mut MetaSession, kind: OpKind) -> CkResult<Bound> {
        let mut op = ms.ops[kind as usize]
            .take()
            .ok_or(CKR_OPERATION_NOT_INITIALIZED)?;
        let r = if op.bound.is_none() {
            self.bind(ms, kind, &mut op, ALL, None)
        } else {
            Ok(())
        };
        let b = op.bound;
        if r.is_ok() {
            ms.ops[kind as usize] = Some(op);
        }
        r.map(|_| b.expect("bound"))
    }
}

/// Ends-rule of an update step: any error but `CKR_BUFFER_TOO_SMALL` ends the operation.
pub fn update_ends(r: &CkResult<()>) -> bool {
    matches!(r, Err(e) if *e != CKR_BUFFER_TOO_SMALL)
}

/// Ends-rule of a step after which the operation is always over (`C_VerifyFinal`).
pub fn always_ends(_: &CkResult<()>) -> bool {
    true
}

/// Ends-rule of a final step with output: success (not a size query) or any error but
/// `CKR_BUFFER_TOO_SMALL`.
pub fn final_ends(query: bool) -> impl Fn(&CkResult<()>) -> bool {
    move |r| match r {
        Ok(()) => !query,
        Err(e) => *e != CKR_BUFFER_TOO_SMALL,
    }
}

/// Counts an operation that ended where `counters` count (`cryptoadm stat`): its input bytes,
/// its latency if it was timed from `t0`, or an error. A signature that does not verify is an
/// answer, not a failure of the provider.
fn ran(
    counters: Option<&'static opencf_stat::MechCounters>,
    r: &CkResult<()>,
    bytes: u64,
    t0: Option<std::time::Instant>,
) {
    let Some(c) = counters else {
        return;
    };
    match r {
        // A call answered `CKR_PENDING` (asynchronous session) counts when it is accepted.
        Ok(()) | Err(CKR_SIGNATURE_INVALID | CKR_SIGNATURE_LEN_RANGE | CKR_PENDING) => {
            c.count(bytes);
            if let Some(t0) = t0 {
                c.latency(t0.elapsed().as_nanos() as u64);
            }
        }
        Err(_) => c.error(),
    }
}
