//! Session management: `C_OpenSession`, `C_CloseSession`, `C_CloseAllSessions`,
//! `C_GetSessionInfo`, `C_SessionCancel`, `C_Login`, `C_Logout`.
//!
//! A metaslot session opens its keystore session at once and sessions in other providers when
//! an operation first runs there. Login and logout on the metaslot go to the keystore token.

use crate::metaslot::{MetaSession, KINDS};
use crate::{dispatch, OpenCf, Sess, METASLOT_ID};
use opencf_abi::sync::{SessionGuard, SessionLock};
use opencf_abi::sys::*;
use opencf_abi::CkResult;

impl OpenCf {
    /// Locks a metaslot session's state.
    pub fn lock<'a>(&self, m: &'a SessionLock<MetaSession>) -> SessionGuard<'a, MetaSession> {
        m.lock()
    }

    /// `C_OpenSession`.
    pub fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> CkResult<CK_SESSION_HANDLE> {
        if slot == METASLOT_ID {
            let m = self.meta()?;
            let ks = self.p(m.keystore).open_session(m.ks_slot, flags)?;
            return Ok(self.sessions.insert(Sess::Meta(Box::new(SessionLock::new(
                MetaSession::new(flags, ks, self.p(m.keystore).pin_session(ks)),
            )))));
        }
        let (prov, ps) = self.provider_slot(slot)?;
        let h = self.p(prov).open_session(ps, flags)?;
        Ok(self.sessions.insert(Sess::Pass { slot, prov, h }))
    }

    /// `C_CloseSession`.
    pub fn close_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        let sess = self.sessions.remove(s).ok_or(CKR_SESSION_HANDLE_INVALID)?;
        match &*sess {
            Sess::Pass { prov, h, .. } => self.p(*prov).close_session(*h),
            Sess::Meta(m) => {
                let ms = self.lock(m);
                for (p, h) in &ms.others {
                    let _ = self.p(*p).close_session(*h);
                }
                self.p(self.meta()?.keystore).close_session(ms.ks)
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
        let hs = self.sessions.matching(|s| match s {
            Sess::Pass { slot: sl, .. } => *sl == slot,
            Sess::Meta(_) => slot == METASLOT_ID,
        });
        for h in hs {
            let _ = self.close_session(h);
        }
        Ok(())
    }

    /// `C_GetSessionInfo`, with the framework's slot ID.
    pub fn get_session_info(&self, s: CK_SESSION_HANDLE) -> CkResult<CK_SESSION_INFO> {
        match &*self.sess(s)? {
            Sess::Pass { slot, prov, h } => {
                let mut i = self.p(*prov).get_session_info(*h)?;
                i.slotID = *slot;
                Ok(i)
            }
            Sess::Meta(m) => {
                let ks = self.lock(m).ks;
                let mut i = self.p(self.meta()?.keystore).get_session_info(ks)?;
                i.slotID = METASLOT_ID;
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
                        let _ = self.p(b.prov).session_cancel(b.h, k.flag());
                    }
                }
            }
            if flags & CKF_FIND_OBJECTS != 0 && ms.finding {
                ms.finding = false;
                let _ = self.p(self.meta()?.keystore).find_objects_final(ms.ks);
            }
            Ok(())
        })
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
        dispatch!(self, s, |p, h| p.logout(h), |m| {
            let ks = self.lock(m).ks;
            self.p(self.meta()?.keystore).logout(ks)
        })
    }

    /// Checks a session handle.
    pub fn check_session(&self, s: CK_SESSION_HANDLE) -> CkResult<()> {
        self.sess(s).map(|_| ())
    }
}
