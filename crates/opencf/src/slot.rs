//! Slot and token management: `C_GetSlotList`, `C_GetSlotInfo`, `C_GetTokenInfo`,
//! `C_GetMechanismList`, `C_GetMechanismInfo`, `C_InitToken`, `C_InitPIN`, `C_SetPIN`.
//!
//! Slot 0 is the metaslot; framework slot `n ≥ 1` is the `n`-th provider slot counted over the
//! providers in config order. PIN calls on the metaslot go to the keystore token.

use crate::{dispatch, OpenCf, METASLOT_ID};
use opencf_abi::sys::*;
use opencf_abi::{pad_field, CkResult};

/// Token label of the metaslot.
pub const METASLOT_LABEL: &str = "OpenCF Metaslot";

impl OpenCf {
    /// `C_GetSlotList`.
    pub fn slot_list(&self, token_present: bool) -> CkResult<Vec<CK_SLOT_ID>> {
        let mut out = Vec::new();
        if self.meta.is_some() {
            out.push(METASLOT_ID);
        }
        for (i, (prov, ps)) in self.slots.iter().enumerate() {
            if token_present {
                match self.p(*prov).get_slot_info(*ps) {
                    Ok(si) if si.flags & CKF_TOKEN_PRESENT != 0 => {}
                    _ => continue,
                }
            }
            out.push(i as CK_SLOT_ID + 1);
        }
        Ok(out)
    }

    /// `C_GetSlotInfo`.
    pub fn slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO> {
        if slot == METASLOT_ID {
            self.meta()?;
            return Ok(CK_SLOT_INFO {
                slotDescription: pad_field(METASLOT_LABEL),
                manufacturerID: pad_field("OpenCF"),
                flags: CKF_TOKEN_PRESENT,
                hardwareVersion: CK_VERSION { major: 0, minor: 1 },
                firmwareVersion: CK_VERSION { major: 0, minor: 1 },
            });
        }
        let (p, ps) = self.provider_slot(slot)?;
        self.p(p).get_slot_info(ps)
    }

    /// `C_GetTokenInfo`: the metaslot shows the keystore token's state under its own label.
    /// The session counts are the application's sessions on the slot asked about: a
    /// provider's own count would also hold the sessions slot 0 opens in it.
    pub fn token_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
        let mut ti = self.token_info_of_provider(slot)?;
        let (all, rw) = self.session_counts(slot);
        ti.ulSessionCount = all;
        ti.ulRwSessionCount = rw;
        Ok(ti)
    }

    /// The number of the application's sessions on `slot`, and how many of them are
    /// read/write.
    fn session_counts(&self, slot: CK_SLOT_ID) -> (CK_ULONG, CK_ULONG) {
        let (mut all, mut rw) = (0, 0);
        self.sessions.each(|_, s| {
            if s.on_slot(slot) {
                all += 1;
                rw += CK_ULONG::from(s.is_rw());
            }
        });
        (all, rw)
    }

    fn token_info_of_provider(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
        if slot == METASLOT_ID {
            let m = self.meta()?;
            let mut ti = self.p(m.keystore).get_token_info(m.ks_slot)?;
            ti.label = pad_field(METASLOT_LABEL);
            ti.model = pad_field("metaslot");
            // Asynchronous sessions pass through to the providers that offer them.
            ti.flags &= !CKF_ASYNC_SESSION_SUPPORTED;
            if self.providers.iter().any(|pr| pr.offers_async()) {
                ti.flags |= CKF_ASYNC_SESSION_SUPPORTED;
            }
            // Random numbers come from the providers with `random` on (`random.rs`).
            let rng = self.providers.iter().any(|pr| {
                pr.cfg.random
                    && pr
                        .meta_slot
                        .and_then(|s| pr.p.get_token_info(s).ok())
                        .is_some_and(|t| t.flags & CKF_RNG != 0)
            });
            if rng {
                ti.flags |= CKF_RNG;
            } else {
                ti.flags &= !CKF_RNG;
            }
            return Ok(ti);
        }
        let (p, ps) = self.provider_slot(slot)?;
        self.p(p).get_token_info(ps)
    }

    /// `C_GetMechanismList`: the metaslot's merged list; a provider slot's list minus what the
    /// provider's policy disables.
    pub fn mechanisms(&self, slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>> {
        if slot == METASLOT_ID {
            let mut v: Vec<_> = self.meta()?.mechs.keys().copied().collect();
            v.sort_unstable();
            return Ok(v);
        }
        let (p, ps) = self.provider_slot(slot)?;
        let cfg = &self.providers[p].cfg;
        Ok(self
            .p(p)
            .get_mechanism_list(ps)?
            .into_iter()
            .filter(|m| cfg.allows(*m))
            .collect())
    }

    /// `C_GetMechanismInfo`.
    pub fn mechanism(&self, slot: CK_SLOT_ID, m: CK_MECHANISM_TYPE) -> CkResult<CK_MECHANISM_INFO> {
        if slot == METASLOT_ID {
            return self
                .meta()?
                .mechs
                .get(&m)
                .copied()
                .ok_or(CKR_MECHANISM_INVALID);
        }
        let (p, ps) = self.provider_slot(slot)?;
        if !self.providers[p].cfg.allows(m) {
            return Err(CKR_MECHANISM_INVALID);
        }
        self.p(p).get_mechanism_info(ps, m)
    }

    /// `C_InitToken`: not offered on the metaslot (initialize the keystore token in its own
    /// slot).
    pub fn init_token(&self, slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> CkResult<()> {
        if slot == METASLOT_ID {
            self.meta()?;
            return Err(CKR_FUNCTION_NOT_SUPPORTED);
        }
        let (p, ps) = self.provider_slot(slot)?;
        self.p(p).init_token(ps, so_pin, label)
    }

    /// `C_InitPIN`.
    pub fn init_pin(&self, s: CK_SESSION_HANDLE, pin: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.init_pin(h, pin), |m| {
            let ks = self.lock(m).ks;
            self.p(self.meta()?.keystore).init_pin(ks, pin)
        })
    }

    /// `C_SetPIN`.
    pub fn set_pin(&self, s: CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> CkResult<()> {
        dispatch!(self, s, |p, h| p.set_pin(h, old, new), |m| {
            let ks = self.lock(m).ks;
            self.p(self.meta()?.keystore).set_pin(ks, old, new)
        })
    }
}
