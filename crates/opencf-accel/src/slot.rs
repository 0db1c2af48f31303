//! Slot and token management: `C_GetSlotList`, `C_GetSlotInfo`, `C_GetTokenInfo`,
//! `C_GetMechanismList`, `C_GetMechanismInfo`. One slot ([`crate::SLOT`]), its token always
//! present and initialized.

use crate::{engine, lock, mech, read, version, Accel, LABEL, SLOT};
use opencf_abi::sys::*;
use opencf_abi::{pad_field, CkResult};

impl Accel {
    /// `C_GetSlotList`.
    pub(crate) fn get_slot_list(&self, _token_present: bool) -> CkResult<Vec<CK_SLOT_ID>> {
        Ok(vec![SLOT])
    }

    /// `C_GetSlotInfo`.
    pub(crate) fn get_slot_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_SLOT_INFO> {
        self.check_slot(slot)?;
        Ok(CK_SLOT_INFO {
            slotDescription: pad_field(LABEL),
            manufacturerID: pad_field("OpenCF"),
            flags: CKF_TOKEN_PRESENT,
            hardwareVersion: version(),
            firmwareVersion: version(),
        })
    }

    /// `C_GetTokenInfo`.
    pub(crate) fn get_token_info(&self, slot: CK_SLOT_ID) -> CkResult<CK_TOKEN_INFO> {
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

    /// `C_GetMechanismList`.
    pub(crate) fn get_mechanism_list(&self, slot: CK_SLOT_ID) -> CkResult<Vec<CK_MECHANISM_TYPE>> {
        self.check_slot(slot)?;
        Ok(mech::list(self.engine.is_some(), self.bulk.is_some()))
    }

    /// `C_GetMechanismInfo`.
    pub(crate) fn get_mechanism_info(
        &self,
        slot: CK_SLOT_ID,
        m: CK_MECHANISM_TYPE,
    ) -> CkResult<CK_MECHANISM_INFO> {
        self.check_slot(slot)?;
        mech::info(self.engine.is_some(), self.bulk.is_some(), m)
    }
}
