//! PIN records: the token master key wrapped under a key derived from one PIN.

use opencf_abi::sys::{CKR_USER_TYPE_INVALID, CKU_SO, CKU_USER, CK_USER_TYPE};
use rusqlite::{params, Connection, OptionalExtension};
use zeroize::Zeroizing;

use super::crypto::{
    random_bytes, scrypt_kek, Gcm, ScryptParams, KDF_SCRYPT, KEY_LEN, SALT_LEN, SEAL_OVERHEAD,
    WRAP_AES_256_GCM,
};
use super::schema::SqlCtx;
use super::{MasterKey, StoreError};

/// Which PIN: the normal user's or the security officer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Who {
    User,
    So,
}

impl Who {
    pub fn from_ck(user: CK_USER_TYPE) -> Result<Who, StoreError> {
        match user {
            CKU_USER => Ok(Who::User),
            CKU_SO => Ok(Who::So),
            _ => Err(StoreError::Pin(CKR_USER_TYPE_INVALID)),
        }
    }

    /// The value of the `pins.user_type` column (the PKCS#11 user type).
    pub fn db_key(self) -> i64 {
        match self {
            Who::User => 1,
            Who::So => 0,
        }
    }

    pub fn failures_col(self) -> &'static str {
        match self {
            Who::User => "user_failures",
            Who::So => "so_failures",
        }
    }

    pub fn to_be_changed_col(self) -> &'static str {
        match self {
            Who::User => "user_pin_to_be_changed",
            Who::So => "so_pin_to_be_changed",
        }
    }

    /// AAD of the wrapped master key: names the user it is for, so the SO record
    /// cannot be copied over the user record (or the other way round).
    /// "user" or "SO", for messages.
    fn name(self) -> &'static str {
        match self {
            Who::User => "user",
            Who::So => "SO",
        }
    }

    fn wrap_aad(self) -> &'static [u8] {
        match self {
            Who::User => b"opencf-mk-wrap:user",
            Who::So => b"opencf-mk-wrap:so",
        }
    }
}

/// One row of the `pins` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PinRecord {
    pub kdf: String,
    pub params: ScryptParams,
    pub salt: Vec<u8>,
    pub wrap_alg: String,
    /// `nonce || AES-256-GCM(master key) || tag`.
    pub wrapped: Vec<u8>,
    /// The row's check value ([`PinRecord::check_value`]); `None` in a row written before
    /// the column existed, or by an older build, until a login proves the row intact.
    pub check: Option<Vec<u8>>,
}

impl PinRecord {
    /// Wraps `mk` under a key derived from `pin` with fresh salt and the current
    /// KDF parameters. Costs one scrypt evaluation.
    pub fn create(who: Who, pin: &[u8], mk: &MasterKey) -> Result<PinRecord, StoreError> {
        let params = ScryptParams::current();
        let mut salt = vec![0u8; SALT_LEN];
        random_bytes(&mut salt)?;
        let kek = scrypt_kek(pin, &salt, &params)?;
        let wrapped = Gcm::encryptor(&kek)?.seal(who.wrap_aad(), mk.bytes())?;
        let mut rec = PinRecord {
            kdf: KDF_SCRYPT.to_owned(),
            params,
            salt,
            wrap_alg: WRAP_AES_256_GCM.to_owned(),
            wrapped,
            check: None,
        };
        rec.check = Some(rec.check_value(who));
        Ok(rec)
    }

    /// The check value of the row: SHA-256 over a domain tag, the user and every field,
    /// each with its length. A wrong PIN and a damaged row (a bit flipped in the salt or
    /// the wrapped key, a changed KDF parameter) both fail the GCM tag; the check value
    /// tells them apart before the PIN is tried. It guards against damage, not against
    /// someone who can write the file (who can compute it too, as they can delete the row).
    pub fn check_value(&self, who: Who) -> Vec<u8> {
        let mut h = openssl::sha::Sha256::new();
        let mut field = |b: &[u8]| {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        };
        field(b"opencf-pin-row-check");
        field(&who.db_key().to_le_bytes());
        field(self.kdf.as_bytes());
        for v in [self.params.n, self.params.r, self.params.p] {
            field(&v.to_le_bytes());
        }
        field(&self.salt);
        field(self.wrap_alg.as_bytes());
        field(&self.wrapped);
        h.finish().to_vec()
    }

    /// `Corrupt` when the row has a check value that its fields do not match.
    pub fn check_intact(&self, who: Who) -> Result<(), StoreError> {
        match &self.check {
            Some(c) if *c != self.check_value(who) => Err(StoreError::Corrupt(format!(
                "the {} PIN record is damaged (its fields do not match their check value); \
                 restore the keystore from a copy, or remove it to start a new token",
                who.name()
            ))),
            _ => Ok(()),
        }
    }

    /// Writes the check value of a row that has none, once a login has proved it intact.
    pub fn add_check(&mut self, conn: &Connection, who: Who) -> Result<(), StoreError> {
        if self.check.is_some() {
            return Ok(());
        }
        let check = self.check_value(who);
        conn.prepare_cached("UPDATE pins SET row_check = ?1 WHERE user_type = ?2")
            .ctx("writing PIN record check")?
            .execute(params![check, who.db_key()])
            .ctx("writing PIN record check")?;
        self.check = Some(check);
        Ok(())
    }

    /// Derives the key from `pin` and unwraps the master key. `Ok(None)` means
    /// the PIN is wrong (the GCM tag did not verify). Costs one scrypt evaluation.
    pub fn unwrap_key(&self, who: Who, pin: &[u8]) -> Result<Option<MasterKey>, StoreError> {
        if self.kdf != KDF_SCRYPT {
            return Err(StoreError::Corrupt(format!(
                "unknown PIN KDF {:?}",
                self.kdf
            )));
        }
        if self.wrap_alg != WRAP_AES_256_GCM {
            return Err(StoreError::Corrupt(format!(
                "unknown key wrapping algorithm {:?}",
                self.wrap_alg
            )));
        }
        if self.salt.is_empty() || self.salt.len() > 1024 {
            return Err(StoreError::Corrupt("bad PIN salt length".into()));
        }
        if self.wrapped.len() != KEY_LEN + SEAL_OVERHEAD {
            return Err(StoreError::Corrupt("bad wrapped master key length".into()));
        }
        let kek = scrypt_kek(pin, &self.salt, &self.params)?;
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        if Gcm::decryptor(&kek)?.open_into(who.wrap_aad(), &self.wrapped, &mut key[..])? {
            Ok(Some(MasterKey(key)))
        } else {
            Ok(None)
        }
    }

    pub fn load(conn: &Connection, who: Who) -> Result<Option<PinRecord>, StoreError> {
        let row = conn
            .prepare_cached(
                "SELECT kdf, kdf_n, kdf_r, kdf_p, salt, wrap_alg, wrapped_key, row_check
                 FROM pins WHERE user_type = ?1",
            )
            .ctx("reading PIN record")?
            .query_row([who.db_key()], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Vec<u8>>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, Vec<u8>>(6)?,
                    r.get::<_, Option<Vec<u8>>>(7)?,
                ))
            })
            .optional()
            .ctx("reading PIN record")?;
        let Some((kdf, n, r, p, salt, wrap_alg, wrapped, check)) = row else {
            return Ok(None);
        };
        let conv = |v: i64| {
            u64::try_from(v).map_err(|_| StoreError::Corrupt("negative KDF parameter".into()))
        };
        Ok(Some(PinRecord {
            kdf,
            params: ScryptParams {
                n: conv(n)?,
                r: conv(r)?,
                p: conv(p)?,
            },
            salt,
            wrap_alg,
            wrapped,
            check,
        }))
    }

    pub fn store(&self, conn: &Connection, who: Who) -> Result<(), StoreError> {
        let conv =
            |v: u64| i64::try_from(v).map_err(|_| StoreError::Io("KDF parameter too large".into()));
        conn.prepare_cached(
            "INSERT OR REPLACE INTO pins
                 (user_type, kdf, kdf_n, kdf_r, kdf_p, salt, wrap_alg, wrapped_key, row_check)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .ctx("writing PIN record")?
        .execute(params![
            who.db_key(),
            self.kdf,
            conv(self.params.n)?,
            conv(self.params.r)?,
            conv(self.params.p)?,
            self.salt,
            self.wrap_alg,
            self.wrapped,
            self.check_value(who),
        ])
        .ctx("writing PIN record")?;
        Ok(())
    }
}
