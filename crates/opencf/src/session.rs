//! Session management: `C_OpenSession`, `C_CloseSession`, `C_CloseAllSessions`,
//! `C_GetSessionInfo`, `C_SessionCancel`, `C_GetOperationState`, `C_SetOperationState`,
//! `C_Login`, `C_Logout`.
//!
//! A metaslot session opens its keystore session at once and sessions in other providers when
//! an operation first runs there. Login and logout on the metaslot go to the keystore token.
//!
//! The operation state of a metaslot session is that of its digest, the one operation whose
//! state the providers save (as in the software token): the provider running it saves it, and
//! the metaslot puts in front which provider that is and the mechanism, so that
//! `C_SetOperationState` sends the state back to the same provider, in any session of slot 0
//! of a process with the same configuration. Layout: the magic `OCFM`, a version byte (1), the
//! length of the provider's configured name (one byte) and the name, the mechanism as a
//! little-endian `CK_ULONG`, then the provider's own saved state.

use crate::metaslot::{Bound, MetaSession, Op, OpKind, KINDS};
use crate::route::two_call;
use crate::{dispatch, OpenCf, Sess, METASLOT_ID};
use opencf_abi::sync::{SessionGuard, SessionLock};
use opencf_abi::sys::*;
use opencf_abi::{CkResult, OutBuf};

const STATE_MAGIC: &[u8; 4] = b"OCFM";
const STATE_VERSION: u8 = 1;
const MECH_LEN: usize = std::mem::size_of::<CK_MECHANISM_TYPE>();

/// A saved metaslot state, split: (provider name, mechanism, the provider's state).
fn parse_state(state: &[u8]) -> CkResult<(&[u8], CK_MECHANISM_TYPE, &[u8])> {
    let bad = CKR_SAVED_STATE_INVALID;
    let (magic, rest) = state.split_first_chunk::<4>().ok_or(bad)?;
    let (&[version, name_len], rest) = rest.split_first_chunk::<2>().ok_or(bad)?;
    if magic != STATE_MAGIC || version != STATE_VERSION || rest.len() < name_len as usize {
        return Err(bad);
    }
    let (name, rest) = rest.split_at(name_len as usize);
    let (mech, inner) = rest.split_first_chunk::<MECH_LEN>().ok_or(bad)?;
    Ok((name, CK_MECHANISM_TYPE::from_le_bytes(*mech), inner))
}

impl OpenCf {
    /// Locks a metaslot session's state.
    pub fn lock<'a>(&self, m: &'a SessionLock<MetaSession>) -> SessionGuard<'a, MetaSession> {
        m.lock()
    }

    /// `C_OpenSession`.
    pub fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        if slot == METASLOT_ID {
            let m = self.meta()?;
            // An asynchronous slot-0 session is asynchronous where its operations run, in
            // the providers that offer it; its keystore session is an ordinary one.
            if flags & CKF_ASYNC_SESSION != 0 && !self.providers.iter().any(|pr| pr.offers_async())
            {
                return Err(CKR_SESSION_ASYNC_NOT_SUPPORTED);
            }
            let ks = self
                .p(m.keystore)
                .open_session(m.ks_slot, flags & !CKF_ASYNC_SESSION)?;
            return Ok(self.sessions.insert(Sess::Meta {
                s: Box::new(SessionLock::new(MetaSession::new(
                    flags,
                    ks,
                    self.p(m.keystore).pin_session(ks),
                ))),
                rw: flags & CKF_RW_SESSION != 0,
            }));
        }
        let (prov, ps) = self.provider_slot(slot)?;
        let h = self.p(prov).open_session(ps, flags)?;
        Ok(self.sessions.insert(Sess::Pass {
            slot,
            prov,
            h,
            rw: flags & CKF_RW_SESSION != 0,
        }))
    }

    /// `C_CloseSession`.
    pub fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        let sess = self.sessions.remove(s).ok_or(CKR_SESSION_HANDLE_INVALID)?;
        match &*sess {
            Sess::Pass { prov, h, .. } => {
                let r = self.p(*prov).close_session(*h);
                // The application's last session of the keystore's token logs it out.
                if self.meta.as_ref().is_some_and(|m| m.keystore == *prov) {
                    self.sweep_clones();
                }
                r
            }
            Sess::Meta { s: m, .. } => {
                let ms = self.lock(m);
                for (p, h) in &ms.others {
                    let _ = self.p(*p).close_session(*h);
                }
                let r = self.p(self.meta()?.keystore).close_session(ms.ks);
                drop(ms);
                self.sweep_clones();
                r
            }
        }
    }

    /// `C_CloseAllSessions`.
    pub fn close_all_sessions(&self, slot: CK_SLOT_ID) -> CkResult<()> {
        if slot == METASLOT_ID {
            self.meta()?;
        } else {
            self.provider_slot(slot)?;
        }
        let hs = self.sessions.matching(|s| s.on_slot(slot));
        for h in hs {
            let _ = self.close_session(h);
        }
        Ok(())
    }

    /// `C_GetSessionInfo`, with the framework's slot ID.
    pub fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        match &*self.sess(s)? {
            Sess::Pass { slot, prov, h, .. } => {
                let mut i = self.p(*prov).get_session_info(*h)?;
                i.slotID = *slot;
                Ok(i)
            }
            Sess::Meta { s: m, .. } => {
                let (ks, flags) = {
                    let ms = self.lock(m);
                    (ms.ks, ms.flags)
                };
                let mut i = self.p(self.meta()?.keystore).get_session_info(ks)?;
                i.slotID = METASLOT_ID;
                i.flags |= flags & CKF_ASYNC_SESSION;
                Ok(i)
            }
        }
    }

    /// `C_SessionCancel`: on the metaslot, cancels the named operations where they run.
    pub fn session_cancel(&self, s: CK_SESSION_HANDLE, flags: CK_FLAGS) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.session_cancel(h, flags), |m| {
            let mut ms = self.lock(m);
            for k in KINDS {
                if flags & k.flag() == 0 {
                    continue;
                }
                if let Some(op) = ms.ops[k as usize].take() {
                    if let Some(b) = op.bound {
                        let _ = self.end_in_provider(b.prov, b.h, k);
                    }
                }
                // A call that answered `CKR_PENDING` is still active where it runs.
                if let Some((prov, h)) = ms.take_pending(k) {
                    let _ = self.end_in_provider(prov, h, k);
                }
            }
            if flags & CKF_FIND_OBJECTS != 0 && ms.finding {
                ms.finding = false;
                let _ = self.p(self.meta()?.keystore).find_objects_final(ms.ks);
            }
            // The message-based operations run in the keystore session (`crypt.rs`).
            let message = flags
                & (CKF_MESSAGE_ENCRYPT
                    | CKF_MESSAGE_DECRYPT
                    | CKF_MESSAGE_SIGN
                    | CKF_MESSAGE_VERIFY);
            if message != 0 {
                let _ = self.p(self.meta()?.keystore).session_cancel(ms.ks, message);
            }
            Ok(())
        })
    }

    /// `C_GetOperationState`. On the metaslot: the saved state of the session's digest, which
    /// must be its only active operation (`CKR_STATE_UNSAVEABLE` otherwise, also when its
    /// provider cannot save it).
    pub fn get_operation_state(&self, s: CK_SESSION_HANDLE, out: &mut OutBuf) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.get_operation_state(h, out), |m| {
            let mut ms = self.lock(m);
            let others = KINDS
                .iter()
                .any(|&k| k != OpKind::Digest && ms.ops[k as usize].is_some());
            if others {
                return Err(CKR_STATE_UNSAVEABLE);
            }
            let keystore = self.meta()?.keystore;
            // The message-based operations are not routed: they run in the keystore session,
            // which answers for them (a digest there answers for both).
            let ks = ms.ks;
            let ks_busy = || {
                self.p(keystore)
                    .get_operation_state(ks, &mut OutBuf::new(None))
                    == Err(CKR_STATE_UNSAVEABLE)
            };
            // A digest that took a key holds key bytes in its state (docs/SOFTTOKEN.md).
            if ms.ops[OpKind::Digest as usize]
                .as_ref()
                .is_some_and(|op| op.keyed)
            {
                return Err(CKR_STATE_UNSAVEABLE);
            }
            let Some(mech) = ms.ops[OpKind::Digest as usize].as_ref().map(|op| op.mech) else {
                return Err(if ks_busy() {
                    CKR_STATE_UNSAVEABLE
                } else {
                    CKR_OPERATION_NOT_INITIALIZED
                });
            };
            let b = self.meta_bound(&mut ms, OpKind::Digest)?;
            if b.prov != keystore && ks_busy() {
                return Err(CKR_STATE_UNSAVEABLE);
            }
            let inner = two_call(|o| self.p(b.prov).get_operation_state(b.h, o))?;
            let name = self.providers[b.prov].cfg.name.as_bytes();
            let name_len = u8::try_from(name.len()).map_err(|_| CKR_STATE_UNSAVEABLE)?;
            let mut state = Vec::with_capacity(6 + name.len() + MECH_LEN + inner.len());
            state.extend_from_slice(STATE_MAGIC);
            state.extend_from_slice(&[STATE_VERSION, name_len]);
            state.extend_from_slice(name);
            state.extend_from_slice(&mech.to_le_bytes());
            state.extend_from_slice(&inner);
            out.write(&state).map(|_| ())
        })
    }

    /// `C_SetOperationState`. On the metaslot: a state [`OpenCf::get_operation_state`] saved
    /// goes back to the provider that saved it, which checks its own part; the restored
    /// digest replaces the session's, and the other operations stay as they are. Digests take
    /// no key: the key handles are not looked at, as in the software token.
    pub fn set_operation_state(
        &self,
        s: CK_SESSION_HANDLE,
        state: &[u8],
        e: CK_OBJECT_HANDLE,
        a: CK_OBJECT_HANDLE,
    ) -> CkResult<()> {
        dispatch!(self, s, |p, h, @prov| {
            // A state of the software token names its digest: one the policy disables on
            // this provider is refused, as its `C_DigestInit` is.
            let pv = &self.providers[prov];
            if pv.softtoken_states {
                match opencf_softtoken_core::mech::saved_state_mechanism(state) {
                    Some(mech) if pv.cfg.allows(mech) => {}
                    _ => return Err(CKR_SAVED_STATE_INVALID),
                }
            }
            p.set_operation_state(h, state, e, a)
        }, |m| {
            let (name, mech, inner) = parse_state(state)?;
            let meta = self.meta()?;
            let route = meta
                .routes
                .get(&mech)
                .map(|r| &r[OpKind::Digest as usize])
                .ok_or(CKR_SAVED_STATE_INVALID)?;
            let (idx, prov) = route
                .cands
                .iter()
                .enumerate()
                .find(|(_, &p)| self.providers[p].cfg.name.as_bytes() == name)
                .map(|(i, &p)| (i, p))
                .ok_or(CKR_SAVED_STATE_INVALID)?;
            // The software token's part names the digest it holds: it must be the header's,
            // which the route and the policy were checked for (any other could be one the
            // policy disables, run under an allowed one's name and counters).
            if self.providers[prov].softtoken_states
                && opencf_softtoken_core::mech::saved_state_mechanism(inner) != Some(mech)
            {
                return Err(CKR_SAVED_STATE_INVALID);
            }
            let mut ms = self.lock(m);
            let h = self.session_in(&mut ms, prov)?;
            self.p(prov).set_operation_state(h, inner, 0, 0)?;
            // The digest running elsewhere, if any, ends there (in the same session the
            // provider has just replaced it).
            if let Some(Op {
                bound: Some(old), ..
            }) = ms.ops[OpKind::Digest as usize].take()
            {
                if (old.prov, old.h) != (prov, h) {
                    self.end_digest(old);
                }
            }
            let counters = self.providers[prov]
                .stats
                .map(|st| ms.counters(prov, mech, st));
            let b = Bound {
                idx,
                prov,
                h,
                ks: prov == meta.keystore,
                counters,
            };
            ms.ops[OpKind::Digest as usize] = Some(Op::bound_to(mech, None, b));
            Ok(())
        })
    }

    /// Ends a digest where it runs: cancelled (3.0), or finished and its value dropped.
    fn end_digest(&self, b: Bound) {
        let p = self.p(b.prov);
        if p.session_cancel(b.h, CKF_DIGEST).is_err() {
            let _ = two_call(|o| p.digest_final(b.h, o));
        }
    }

    /// `C_Login`.
    pub fn login(&self, s: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.login(h, user, pin), |m| {
            let ks = self.lock(m).ks;
            self.p(self.meta()?.keystore).login(ks, user, pin)
        })
    }

    /// `C_Logout`.
    pub fn logout(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        // Through the keystore's own slot too: the application is logged out of the token,
        // and the clones of its private keys must go (`sweep_clones`).
        dispatch!(
            self,
            s,
            |p, h| p.logout(h).inspect(|_| self.sweep_clones()),
            |m| {
                let ks = self.lock(m).ks;
                self.p(self.meta()?.keystore).logout(ks)?;
                self.sweep_clones();
                Ok(())
            }
        )
    }

    /// Checks a session handle.
    pub fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.sess(s).map(|_| ())
    }
}
