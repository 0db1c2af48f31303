//! Persistent keystore of the software token.
//!
//! One SQLite file (WAL, `synchronous=FULL`) holds the token state, the PIN
//! records and the objects; several processes may use it at once. See
//! `DESIGN.md`, "Softtoken keystore".
//!
//! * **Master key.** A random 256-bit key, created by [`TokenStore::create_default`]
//!   and [`TokenStore::init_token`]. It never reaches the disk in clear: each PIN
//!   (user, SO) has a row in `pins` with the master key wrapped by AES-256-GCM
//!   under `scrypt(PIN, salt)` (N=2^15, r=8, p=1, 16-byte salt; the KDF name and
//!   parameters are stored in the row). AAD `opencf-mk-wrap:user` / `:so`. A wrong
//!   PIN shows as a failing GCM tag; a damaged row is told apart before that by its
//!   check value (SHA-256 over its fields, `pin::PinRecord::check_value`), which a login
//!   writes into a row of an older build once it has proved the row intact. Changing a
//!   PIN rewraps only the master key.
//!   The token row also keeps a check value (a GCM tag under the master key) so
//!   that a stale [`MasterKey`] (another process re-initialized the token) is
//!   refused instead of producing undecryptable rows.
//! * **Objects.** One row per object (`objects`: id, version, private) and one row
//!   per attribute (`attributes`). Every attribute value of a private object is
//!   `nonce || AES-256-GCM(value) || tag` under the master key with AAD
//!   `b"opencf-attr" || id (i64 LE) || type (u64 LE)`, so rows cannot be moved
//!   between objects or attributes. Public objects are stored in clear.
//! * **PIN failures** are counted in the database *before* the PIN is tried, and
//!   reset after a success, so killing the process does not give free tries.
//!
//! Errors: [`StoreError::Pin`] carries a PKCS#11 return value for the caller to
//! hand back as is; `Full` (no space left for the database) maps to
//! `CKR_DEVICE_MEMORY`, `Corrupt` and `Io` to `CKR_DEVICE_ERROR`.
//!
//! Not covered: the store authenticates each attribute row on its own, not the
//! set of rows of an object: someone who can write the file can still delete
//! attribute rows or whole objects, or roll the file back to an older copy.

#![forbid(unsafe_code)]

mod crypto;
mod pin;
mod schema;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use opencf_abi::shm::SharedCells;
use opencf_abi::sys::{
    CKR_DEVICE_ERROR, CKR_DEVICE_MEMORY, CKR_FUNCTION_FAILED, CKR_OBJECT_HANDLE_INVALID,
    CKR_PIN_INCORRECT, CKR_PIN_LEN_RANGE, CKR_PIN_LOCKED, CKR_USER_NOT_LOGGED_IN,
    CKR_USER_PIN_NOT_INITIALIZED, CK_ATTRIBUTE_TYPE, CK_RV, CK_USER_TYPE,
};
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use zeroize::Zeroizing;

use crypto::{random_bytes, Gcm, KEY_LEN};
use pin::{PinRecord, Who};
use schema::SqlCtx;

/// Attribute values of one object, by attribute type.
pub type AttrMap = BTreeMap<CK_ATTRIBUTE_TYPE, Vec<u8>>;

/// Consecutive wrong PINs after which a PIN is locked.
pub const MAX_PIN_FAILURES: u32 = 10;
/// Shortest PIN accepted when a PIN is set (bytes).
pub const MIN_PIN_LEN: usize = 4;
/// Longest PIN accepted when a PIN is set (bytes).
pub const MAX_PIN_LEN: usize = 255;
/// Longest token label (bytes; PKCS#11 `CK_TOKEN_INFO.label` is 32 bytes).
pub const MAX_LABEL_LEN: usize = 32;

/// How often a PIN operation starts over when another process changed the PIN
/// record between its steps.
const MAX_RESTARTS: usize = 4;

/// A try that finds the failure count at the limit waits while the keystore moves: tries
/// under way in other processes or threads count as failures until they settle (a right PIN
/// then sets the count back to 0), and each settles with a commit. The keystore unchanged this
/// long means none is under way (a try takes one scrypt run), and the PIN is locked.
const PIN_SETTLE_QUIET: std::time::Duration = std::time::Duration::from_secs(3);
/// The longest such a wait lasts, however the count moves.
const PIN_SETTLE_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// AAD of the master-key check value stored in `token.mk_check`.
const MK_CHECK_AAD: &[u8] = b"opencf-mk-check";

/// The token master key (AES-256), wiped from memory when dropped.
#[derive(Clone)]
pub struct MasterKey(Zeroizing<[u8; KEY_LEN]>);

impl MasterKey {
    fn generate() -> Result<MasterKey, StoreError> {
        let mut k = Zeroizing::new([0u8; KEY_LEN]);
        random_bytes(&mut k[..])?;
        Ok(MasterKey(k))
    }

    fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

/// Errors of the keystore.
#[derive(Debug)]
pub enum StoreError {
    /// A PKCS#11 return value to give back as is: `CKR_PIN_INCORRECT`,
    /// `CKR_PIN_LOCKED`, `CKR_PIN_LEN_RANGE`, `CKR_USER_PIN_NOT_INITIALIZED`,
    /// `CKR_USER_TYPE_INVALID`, `CKR_USER_NOT_LOGGED_IN` (private object without a
    /// master key, or a master key that is no longer the token's), or
    /// `CKR_OBJECT_HANDLE_INVALID` (update of a missing object).
    Pin(CK_RV),
    /// The database or a value in it is damaged or not ours.
    Corrupt(String),
    /// No space left where the database lives (SQLite's `SQLITE_FULL`, `ENOSPC`): nothing
    /// was written. A login is refused so too, since its try is recorded before the PIN is
    /// checked.
    Full(String),
    /// Any other failure (file system, SQLite, OpenSSL).
    Io(String),
    /// An update made from a version of the object that another process has changed since
    /// ([`TokenStore::update_object`]): nothing was written.
    Stale,
}

impl StoreError {
    /// The PKCS#11 return value: `Pin(rv)` gives `rv`; `Full` gives `CKR_DEVICE_MEMORY`
    /// ("the token does not have sufficient memory"); `Corrupt` and `Io` give
    /// `CKR_DEVICE_ERROR`; `Stale` (which callers retry) `CKR_FUNCTION_FAILED`.
    pub fn rv(&self) -> CK_RV {
        match self {
            StoreError::Pin(rv) => *rv,
            StoreError::Full(_) => CKR_DEVICE_MEMORY,
            StoreError::Corrupt(_) | StoreError::Io(_) => CKR_DEVICE_ERROR,
            StoreError::Stale => CKR_FUNCTION_FAILED,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Pin(rv) => write!(f, "PKCS#11 error {rv:#x}"),
            StoreError::Corrupt(m) => write!(f, "token database corrupt: {m}"),
            StoreError::Io(m) => write!(f, "token database error: {m}"),
            StoreError::Full(m) => write!(f, "no space left for the token database: {m}"),
            StoreError::Stale => write!(f, "the object was changed by another process"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Token state kept in the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMeta {
    /// At most 32 bytes, not padded.
    /// Token label (at most 32 bytes).
    pub label: String,
    /// 16 upper-case hex digits, random when the database was created.
    /// Serial number: 16 hex digits, random at creation.
    pub serial: String,
    /// The token has been initialised.
    pub initialized: bool,
    /// The user PIN is set.
    pub user_pin_initialized: bool,
    /// The user PIN must be changed before use.
    pub user_pin_to_be_changed: bool,
    /// The SO PIN must be changed.
    pub so_pin_to_be_changed: bool,
    /// Consecutive failed user logins.
    pub user_failures: u32,
    /// Consecutive failed SO logins.
    pub so_failures: u32,
}

impl TokenMeta {
    /// The user PIN is locked.
    pub fn user_locked(&self) -> bool {
        self.user_failures >= MAX_PIN_FAILURES
    }

    /// The SO PIN is locked.
    pub fn so_locked(&self) -> bool {
        self.so_failures >= MAX_PIN_FAILURES
    }

    fn failures(&self, who: Who) -> u32 {
        match who {
            Who::User => self.user_failures,
            Who::So => self.so_failures,
        }
    }
}

/// The token database. `Send + Sync`: one connection behind a mutex; several
/// `TokenStore`s (in one or several processes) may use the same file.
pub struct TokenStore {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// The keystore's change counter, shared by every process that opens it (see
    /// [`TokenStore::changes`]); `None` where the file cannot be made.
    changes: Option<SharedCells>,
}

/// The change counter's file beside the database: `<database>.changes`.
pub fn changes_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".changes");
    PathBuf::from(p)
}

fn check_pin_len(pin: &[u8]) -> Result<(), StoreError> {
    if (MIN_PIN_LEN..=MAX_PIN_LEN).contains(&pin.len()) {
        Ok(())
    } else {
        Err(StoreError::Pin(CKR_PIN_LEN_RANGE))
    }
}

/// Cuts `label` to at most [`MAX_LABEL_LEN`] bytes on a character boundary.
fn clip_label(label: &str) -> &str {
    let mut end = label.len().min(MAX_LABEL_LEN);
    while !label.is_char_boundary(end) {
        end -= 1;
    }
    &label[..end]
}

/// The attribute type as a `u64` (`CK_ULONG` is 32 bits on some targets).
#[allow(clippy::useless_conversion)]
fn type_bits(ty: CK_ATTRIBUTE_TYPE) -> u64 {
    u64::from(ty)
}

fn type_to_db(ty: CK_ATTRIBUTE_TYPE) -> i64 {
    // Bit pattern of the (unsigned) attribute type in SQLite's signed integer.
    type_bits(ty) as i64
}

#[allow(clippy::useless_conversion, clippy::unnecessary_fallible_conversions)]
fn type_from_db(v: i64) -> Result<CK_ATTRIBUTE_TYPE, StoreError> {
    CK_ATTRIBUTE_TYPE::try_from(v as u64)
        .map_err(|_| StoreError::Corrupt(format!("attribute type {v:#x} out of range")))
}

fn attr_aad(id: i64, ty: CK_ATTRIBUTE_TYPE) -> [u8; 27] {
    let mut aad = [0u8; 27];
    aad[..11].copy_from_slice(b"opencf-attr");
    aad[11..19].copy_from_slice(&id.to_le_bytes());
    aad[19..].copy_from_slice(&type_bits(ty).to_le_bytes());
    aad
}

fn make_mk_check(mk: &MasterKey) -> Result<Vec<u8>, StoreError> {
    Gcm::encryptor(mk.bytes())?.seal(MK_CHECK_AAD, &[])
}

fn read_token(conn: &Connection) -> Result<(TokenMeta, Option<Vec<u8>>), StoreError> {
    let what = "reading token state";
    let row = conn
        .prepare_cached(
            "SELECT label, serial, initialized, user_pin_initialized, user_pin_to_be_changed,
                    so_pin_to_be_changed, user_failures, so_failures, mk_check
             FROM token WHERE id = 1",
        )
        .ctx(what)?
        .query_row([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, bool>(2)?,
                r.get::<_, bool>(3)?,
                r.get::<_, bool>(4)?,
                r.get::<_, bool>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, i64>(7)?,
                r.get::<_, Option<Vec<u8>>>(8)?,
            ))
        })
        .optional()
        .ctx(what)?;
    let Some((label, serial, init, upi, utbc, sotbc, uf, sof, mk_check)) = row else {
        return Err(StoreError::Corrupt("token row missing".into()));
    };
    let count = |v: i64| {
        u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("bad PIN failure counter {v}")))
    };
    Ok((
        TokenMeta {
            label,
            serial,
            initialized: init,
            user_pin_initialized: upi,
            user_pin_to_be_changed: utbc,
            so_pin_to_be_changed: sotbc,
            user_failures: count(uf)?,
            so_failures: count(sof)?,
        },
        mk_check,
    ))
}

/// Refuses a master key that is not the token's current one (token not
/// initialized, or re-initialized by another process since the login).
fn check_mk(conn: &Connection, mk: &MasterKey) -> Result<(), StoreError> {
    let (meta, check) = read_token(conn)?;
    let stale = StoreError::Pin(CKR_USER_NOT_LOGGED_IN);
    let Some(check) = check.filter(|_| meta.initialized) else {
        return Err(stale);
    };
    match Gcm::decryptor(mk.bytes())?.open(MK_CHECK_AAD, &check)? {
        Some(_) => Ok(()),
        None => Err(stale),
    }
}

fn set_failures(conn: &Connection, who: Who, n: u32) -> Result<(), StoreError> {
    conn.execute(
        &format!("UPDATE token SET {} = ?1 WHERE id = 1", who.failures_col()),
        [i64::from(n)],
    )
    .ctx("updating PIN failure counter")?;
    Ok(())
}

fn write_attrs(
    conn: &Connection,
    id: i64,
    attrs: &AttrMap,
    mut sealer: Option<&mut Gcm>,
) -> Result<(), StoreError> {
    let what = "writing object attributes";
    let mut stmt = conn
        .prepare_cached("INSERT INTO attributes (object_id, type, value) VALUES (?1, ?2, ?3)")
        .ctx(what)?;
    for (&ty, value) in attrs {
        match sealer.as_deref_mut() {
            Some(g) => {
                let blob = g.seal(&attr_aad(id, ty), value)?;
                stmt.execute(params![id, type_to_db(ty), blob]).ctx(what)?;
            }
            None => {
                stmt.execute(params![id, type_to_db(ty), value]).ctx(what)?;
            }
        }
    }
    Ok(())
}

fn open_attr(
    opener: &mut Gcm,
    id: i64,
    ty: CK_ATTRIBUTE_TYPE,
    blob: &[u8],
) -> Result<Vec<u8>, StoreError> {
    match opener.open(&attr_aad(id, ty), blob)? {
        Some(mut plain) => Ok(std::mem::take(&mut *plain)),
        None => Err(StoreError::Corrupt(format!(
            "object {id}: attribute {ty:#x} failed authentication"
        ))),
    }
}

fn version_from_db(id: i64, v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("object {id}: bad version {v}")))
}

fn sealer_for(private: bool, mk: Option<&MasterKey>) -> Result<Option<Gcm>, StoreError> {
    if !private {
        return Ok(None);
    }
    match mk {
        Some(mk) => Ok(Some(Gcm::encryptor(mk.bytes())?)),
        None => Err(StoreError::Pin(CKR_USER_NOT_LOGGED_IN)),
    }
}

/// The keystore's connection, locked, and the fork gate held while it is: a `fork()` in
/// another thread waits until no thread is inside SQLite, whose process-wide mutexes and lock
/// counts a child would otherwise inherit held (a child's `C_Initialize` then waited forever
/// on a mutex of its fresh connection, or on a write lock no process held).
struct Locked<'a> {
    conn: MutexGuard<'a, Connection>,
    _quiet: opencf_abi::instance::ForkQuiet,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

impl TokenStore {
    /// Opens the token database, creating missing directories (0700) and the
    /// file (0600). Sets WAL mode, `synchronous=FULL`, a 10 s busy timeout and
    /// foreign keys; creates the schema if the file is empty; checks the schema
    /// version. A file that is not an SQLite database, or not ours, gives
    /// [`StoreError::Corrupt`].
    pub fn open(path: &Path) -> Result<TokenStore, StoreError> {
        // SQLite is entered here too: a fork waits (see `Locked`).
        let _quiet = opencf_abi::instance::fork_quiet();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            schema::create_private_dirs(parent)?;
        }
        schema::precreate_db_file(path)?;
        // Two processes opening a new keystore at once: switching it to WAL needs an
        // exclusive lock, for which SQLite does not always wait on its busy handler. Retry
        // for as long as the busy timeout would have waited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let conn = loop {
            let attempt = schema::connect(path).and_then(|mut c| {
                schema::init_schema(&mut c)?;
                Ok(c)
            });
            match attempt {
                Err(StoreError::Io(m))
                    if (m.contains("locked") || m.contains("busy"))
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other?,
            }
        };
        conn.set_prepared_statement_cache_capacity(32);
        schema::fix_permissions(path)?;
        Ok(TokenStore {
            conn: Mutex::new(conn),
            path: path.to_owned(),
            changes: SharedCells::open_shared(&changes_path(path), 1).ok(),
        })
    }

    /// The keystore's change counter: every process bumps it after each write it commits, so
    /// a process sees another's change at its next use of an object, for the price of one
    /// atomic load. A hint only: `None` (a file that could not be made, a read-only keystore)
    /// leaves the sync points of `PRAGMA data_version` (a new session, a search), which
    /// [`TokenStore::data_version`] still decides.
    pub fn changes(&self) -> Option<u64> {
        self.changes
            .as_ref()
            .map(|c| c.cells()[0].load(std::sync::atomic::Ordering::Acquire))
    }

    /// Commits a write transaction and bumps the change counter.
    fn commit(&self, tx: Transaction<'_>, what: &str) -> Result<(), StoreError> {
        tx.commit().ctx(what)?;
        if let Some(c) = &self.changes {
            c.cells()[0].fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> Locked<'_> {
        // A fork waits while the connection is in use (see `Locked`); taken first, so that a
        // fork waiting for it holds up no thread that waits for the connection.
        let quiet = opencf_abi::instance::fork_quiet();
        // A panic while holding the lock leaves no transaction open (the
        // Transaction guard rolls back on unwind), so a poisoned lock is usable.
        Locked {
            conn: self.conn.lock().unwrap_or_else(|p| p.into_inner()),
            _quiet: quiet,
        }
    }

    fn immediate<'c>(conn: &'c mut Connection, what: &str) -> Result<Transaction<'c>, StoreError> {
        conn.transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx(what)
    }

    /// Current token state.
    pub fn meta(&self) -> Result<TokenMeta, StoreError> {
        Ok(read_token(&self.lock())?.0)
    }

    /// First-use setup: if the token is not initialized yet, sets `label`, a new
    /// master key, and user PIN = SO PIN = `default_pin`, both flagged
    /// to-be-changed. Does nothing if it is initialized (also when another
    /// process initializes it concurrently).
    pub fn create_default(&self, label: &str, default_pin: &[u8]) -> Result<(), StoreError> {
        check_pin_len(default_pin)?;
        if self.meta()?.initialized {
            return Ok(());
        }
        // The expensive part (two scrypt runs) outside any lock.
        let mk = MasterKey::generate()?;
        let user_rec = PinRecord::create(Who::User, default_pin, &mk)?;
        let so_rec = PinRecord::create(Who::So, default_pin, &mk)?;
        let check = make_mk_check(&mk)?;

        let what = "creating default token";
        let mut conn = self.lock();
        let tx = Self::immediate(&mut conn, what)?;
        if read_token(&tx)?.0.initialized {
            return Ok(());
        }
        tx.execute("DELETE FROM pins", []).ctx(what)?;
        user_rec.store(&tx, Who::User)?;
        so_rec.store(&tx, Who::So)?;
        tx.execute(
            "UPDATE token SET label = ?1, initialized = 1, user_pin_initialized = 1,
                 user_pin_to_be_changed = 1, so_pin_to_be_changed = 1,
                 user_failures = 0, so_failures = 0, mk_check = ?2
             WHERE id = 1",
            params![clip_label(label), check],
        )
        .ctx(what)?;
        self.commit(tx, what)
    }

    /// C_InitToken. If the token is initialized, `so_pin` must verify (failures
    /// are counted as in [`TokenStore::login`]). Then deletes all objects, makes
    /// a new master key, sets the label (cut to 32 bytes), SO PIN = `so_pin` (not
    /// to-be-changed) and leaves the user PIN uninitialized. The serial number is
    /// kept.
    pub fn init_token(&self, label: &str, so_pin: &[u8]) -> Result<(), StoreError> {
        let what = "initializing token";
        for _ in 0..MAX_RESTARTS {
            let was_initialized = self.meta()?.initialized;
            let expected_so = if was_initialized {
                Some(self.verify_pin(Who::So, so_pin)?.1)
            } else {
                None
            };
            check_pin_len(so_pin)?;
            let mk = MasterKey::generate()?;
            let so_rec = PinRecord::create(Who::So, so_pin, &mk)?;
            let check = make_mk_check(&mk)?;

            let mut conn = self.lock();
            let tx = Self::immediate(&mut conn, what)?;
            let initialized = read_token(&tx)?.0.initialized;
            if initialized != was_initialized
                || (initialized && PinRecord::load(&tx, Who::So)? != expected_so)
            {
                // Another process initialized the token or changed the SO PIN
                // meanwhile: start over (the SO PIN is verified again).
                continue;
            }
            tx.execute_batch("DELETE FROM attributes; DELETE FROM objects; DELETE FROM pins;")
                .ctx(what)?;
            so_rec.store(&tx, Who::So)?;
            tx.execute(
                "UPDATE token SET label = ?1, initialized = 1, user_pin_initialized = 0,
                     user_pin_to_be_changed = 0, so_pin_to_be_changed = 0,
                     user_failures = 0, so_failures = 0, mk_check = ?2
                 WHERE id = 1",
                params![clip_label(label), check],
            )
            .ctx(what)?;
            return self.commit(tx, what);
        }
        Err(StoreError::Io(format!(
            "{what}: token kept changing concurrently"
        )))
    }

    /// Verifies the PIN of `CKU_USER` or `CKU_SO` and returns the master key.
    ///
    /// Locked → `Pin(CKR_PIN_LOCKED)` without trying. Otherwise the failure
    /// counter is incremented and committed first, then the PIN is tried; a
    /// success resets the counter. Wrong → `Pin(CKR_PIN_INCORRECT)`, or
    /// `Pin(CKR_PIN_LOCKED)` when this failure reaches [`MAX_PIN_FAILURES`].
    /// No such PIN (user PIN not initialized, or token not initialized) →
    /// `Pin(CKR_USER_PIN_NOT_INITIALIZED)`. Other user types →
    /// `Pin(CKR_USER_TYPE_INVALID)`.
    pub fn login(&self, user: CK_USER_TYPE, pin: &[u8]) -> Result<MasterKey, StoreError> {
        Ok(self.verify_pin(Who::from_ck(user)?, pin)?.0)
    }

    /// The PIN check shared by login, set_pin and init_token. Returns the
    /// master key and the PIN record it was unwrapped from.
    fn verify_pin(&self, who: Who, pin: &[u8]) -> Result<(MasterKey, PinRecord), StoreError> {
        let what = "verifying PIN";
        let start = std::time::Instant::now();
        // At the limit: the keystore's change counter (every settled try commits, and so
        // moves it) as last seen, and since when it has not moved.
        let mut at_limit: Option<(Option<u64>, std::time::Instant)> = None;
        for _ in 0..MAX_RESTARTS {
            // Step 1: admission and failure count, committed (fsync'd) before
            // the PIN is tried.
            let (rec, count) = loop {
                let mut conn = self.lock();
                let tx = Self::immediate(&mut conn, what)?;
                let meta = read_token(&tx)?.0;
                let failures = meta.failures(who);
                if failures >= MAX_PIN_FAILURES {
                    // Tries under way elsewhere count until they settle: wait while the count
                    // moves, so that right PINs tried at once are not taken for a lock.
                    drop(tx);
                    drop(conn);
                    let now = std::time::Instant::now();
                    let moved = self.changes();
                    match at_limit {
                        Some((seen, since)) if seen == moved => {
                            if now - since >= PIN_SETTLE_QUIET || now - start >= PIN_SETTLE_MAX {
                                return Err(StoreError::Pin(CKR_PIN_LOCKED));
                            }
                        }
                        _ => at_limit = Some((moved, now)),
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    continue;
                }
                if !meta.initialized || (who == Who::User && !meta.user_pin_initialized) {
                    return Err(StoreError::Pin(CKR_USER_PIN_NOT_INITIALIZED));
                }
                let rec = PinRecord::load(&tx, who)?
                    .ok_or_else(|| StoreError::Corrupt(format!("{who:?} PIN record missing")))?;
                // A damaged record is told before the PIN is tried: no try is counted.
                rec.check_intact(who)?;
                let count = failures + 1;
                set_failures(&tx, who, count)?;
                self.commit(tx, what)?;
                break (rec, count);
            };

            // Step 2: scrypt and unwrap, without holding the lock.
            let result = rec.unwrap_key(who, pin)?;

            // Step 3: settle, if the record did not change meanwhile.
            let mut conn = self.lock();
            let tx = Self::immediate(&mut conn, what)?;
            if PinRecord::load(&tx, who)?.as_ref() != Some(&rec) {
                // PIN changed or token re-initialized concurrently: try again
                // against the current record (counted again: errs on the safe side).
                continue;
            }
            return match result {
                Some(mk) => {
                    set_failures(&tx, who, 0)?;
                    // The row is intact (its key unwrapped): a row of an older build gets
                    // its check value now.
                    let mut rec = rec;
                    rec.add_check(&tx, who)?;
                    self.commit(tx, what)?;
                    Ok((mk, rec))
                }
                None if count >= MAX_PIN_FAILURES => Err(StoreError::Pin(CKR_PIN_LOCKED)),
                None => Err(StoreError::Pin(CKR_PIN_INCORRECT)),
            };
        }
        Err(StoreError::Io(format!(
            "{what}: PIN record kept changing concurrently"
        )))
    }

    /// C_SetPIN: checks the new PIN's length (4..=255 bytes, else
    /// `Pin(CKR_PIN_LEN_RANGE)` without using a try), verifies `old_pin` as
    /// [`TokenStore::login`] does, then rewraps the master key under `new_pin`
    /// and clears that user's to-be-changed flag.
    pub fn set_pin(
        &self,
        user: CK_USER_TYPE,
        old_pin: &[u8],
        new_pin: &[u8],
    ) -> Result<(), StoreError> {
        let who = Who::from_ck(user)?;
        check_pin_len(new_pin)?;
        let what = "changing PIN";
        for _ in 0..MAX_RESTARTS {
            let (mk, old_rec) = self.verify_pin(who, old_pin)?;
            let new_rec = PinRecord::create(who, new_pin, &mk)?;
            drop(mk);

            let mut conn = self.lock();
            let tx = Self::immediate(&mut conn, what)?;
            if PinRecord::load(&tx, who)?.as_ref() != Some(&old_rec) {
                continue;
            }
            new_rec.store(&tx, who)?;
            tx.execute(
                &format!(
                    "UPDATE token SET {} = 0, {} = 0 WHERE id = 1",
                    who.to_be_changed_col(),
                    who.failures_col()
                ),
                [],
            )
            .ctx(what)?;
            return self.commit(tx, what);
        }
        Err(StoreError::Io(format!(
            "{what}: PIN record kept changing concurrently"
        )))
    }

    /// C_InitPIN, with the master key of the logged-in SO: sets the user PIN
    /// (length 4..=255 bytes), resets its failure counter, marks it initialized
    /// and not to-be-changed. A master key that is not the token's current one
    /// gives `Pin(CKR_USER_NOT_LOGGED_IN)`.
    pub fn init_user_pin(&self, mk: &MasterKey, new_pin: &[u8]) -> Result<(), StoreError> {
        check_pin_len(new_pin)?;
        let rec = PinRecord::create(Who::User, new_pin, mk)?;
        let what = "initializing user PIN";
        let mut conn = self.lock();
        let tx = Self::immediate(&mut conn, what)?;
        check_mk(&tx, mk)?;
        rec.store(&tx, Who::User)?;
        tx.execute(
            "UPDATE token SET user_pin_initialized = 1, user_pin_to_be_changed = 0,
                 user_failures = 0
             WHERE id = 1",
            [],
        )
        .ctx(what)?;
        self.commit(tx, what)
    }

    /// Stores a new object (version 1) and returns its id. Private objects have
    /// every value encrypted and need the master key (`None` →
    /// `Pin(CKR_USER_NOT_LOGGED_IN)`; so does a stale key). One durable
    /// transaction.
    pub fn insert_object(
        &self,
        private: bool,
        attrs: &AttrMap,
        mk: Option<&MasterKey>,
    ) -> Result<i64, StoreError> {
        Ok(self.insert_objects(&[(private, attrs)], mk)?[0])
    }

    /// Inserts several objects in one transaction (the two halves of a key pair): all are
    /// stored or none, also when the process is killed halfway. Their ids, in order, each at
    /// version 1.
    pub fn insert_objects(
        &self,
        objects: &[(bool, &AttrMap)],
        mk: Option<&MasterKey>,
    ) -> Result<Vec<i64>, StoreError> {
        let mut sealers = objects
            .iter()
            .map(|(private, _)| sealer_for(*private, mk))
            .collect::<Result<Vec<_>, _>>()?;
        let what = "inserting object";
        let mut conn = self.lock();
        let tx = Self::immediate(&mut conn, what)?;
        if let Some(mk) = mk.filter(|_| objects.iter().any(|(private, _)| *private)) {
            check_mk(&tx, mk)?;
        }
        let mut ids = Vec::with_capacity(objects.len());
        for ((private, attrs), sealer) in objects.iter().zip(&mut sealers) {
            tx.prepare_cached("INSERT INTO objects (version, private) VALUES (1, ?1)")
                .ctx(what)?
                .execute([private])
                .ctx(what)?;
            let id = tx.last_insert_rowid();
            write_attrs(&tx, id, attrs, sealer.as_mut())?;
            ids.push(id);
        }
        self.commit(tx, what)?;
        Ok(ids)
    }

    /// Replaces all attributes of object `id` (and its private flag) atomically and
    /// increments its version, provided the object is still at version `base`, the one the
    /// new attributes were made from; returns the new version. Missing object →
    /// `Pin(CKR_OBJECT_HANDLE_INVALID)`; an object another process changed since `base` →
    /// [`StoreError::Stale`], nothing written (the caller reads it again and starts over);
    /// master key rules as for [`TokenStore::insert_object`].
    pub fn update_object(
        &self,
        id: i64,
        base: u64,
        private: bool,
        attrs: &AttrMap,
        mk: Option<&MasterKey>,
    ) -> Result<u64, StoreError> {
        let mut sealer = sealer_for(private, mk)?;
        let what = "updating object";
        let mut conn = self.lock();
        let tx = Self::immediate(&mut conn, what)?;
        if let Some(mk) = mk.filter(|_| private) {
            check_mk(&tx, mk)?;
        }
        let now: Option<i64> = tx
            .prepare_cached("SELECT version FROM objects WHERE id = ?1")
            .ctx(what)?
            .query_row([id], |r| r.get(0))
            .optional()
            .ctx(what)?;
        match now {
            None => return Err(StoreError::Pin(CKR_OBJECT_HANDLE_INVALID)),
            Some(v) if v as u64 != base => return Err(StoreError::Stale),
            Some(_) => {}
        }
        tx.prepare_cached("UPDATE objects SET version = version + 1, private = ?2 WHERE id = ?1")
            .ctx(what)?
            .execute(params![id, private])
            .ctx(what)?;
        tx.prepare_cached("DELETE FROM attributes WHERE object_id = ?1")
            .ctx(what)?
            .execute([id])
            .ctx(what)?;
        write_attrs(&tx, id, attrs, sealer.as_mut())?;
        self.commit(tx, what)?;
        Ok(base + 1)
    }

    /// Deletes object `id`; `false` if there was none.
    pub fn delete_object(&self, id: i64) -> Result<bool, StoreError> {
        let what = "deleting object";
        let mut conn = self.lock();
        let tx = Self::immediate(&mut conn, what)?;
        tx.prepare_cached("DELETE FROM attributes WHERE object_id = ?1")
            .ctx(what)?
            .execute([id])
            .ctx(what)?;
        let n = tx
            .prepare_cached("DELETE FROM objects WHERE id = ?1")
            .ctx(what)?
            .execute([id])
            .ctx(what)?;
        self.commit(tx, what)?;
        Ok(n > 0)
    }

    /// `(id, version, private)` of every object, ordered by id.
    pub fn object_versions(&self) -> Result<Vec<(i64, u64, bool)>, StoreError> {
        let what = "listing objects";
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("SELECT id, version, private FROM objects ORDER BY id")
            .ctx(what)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, bool>(2)?,
                ))
            })
            .ctx(what)?;
        let mut out = Vec::new();
        for row in rows {
            let (id, v, private) = row.ctx(what)?;
            out.push((id, version_from_db(id, v)?, private));
        }
        Ok(out)
    }

    /// The attributes of object `id`: `Ok(None)` if there is no such object, or
    /// if it is private and `mk` is `None`. A value that fails to authenticate →
    /// `Corrupt`; a stale master key → `Pin(CKR_USER_NOT_LOGGED_IN)`.
    pub fn load_object(
        &self,
        id: i64,
        mk: Option<&MasterKey>,
    ) -> Result<Option<AttrMap>, StoreError> {
        let mut opener = match mk {
            Some(mk) => Some(Gcm::decryptor(mk.bytes())?),
            None => None,
        };
        let what = "loading object";
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .ctx(what)?;
        let private: Option<bool> = tx
            .prepare_cached("SELECT private FROM objects WHERE id = ?1")
            .ctx(what)?
            .query_row([id], |r| r.get(0))
            .optional()
            .ctx(what)?;
        let Some(private) = private else {
            return Ok(None);
        };
        let opener = match (private, opener.as_mut(), mk) {
            (false, _, _) => None,
            (true, Some(o), Some(mk)) => {
                check_mk(&tx, mk)?;
                Some(o)
            }
            _ => return Ok(None),
        };
        let mut attrs = AttrMap::new();
        {
            let mut stmt = tx
                .prepare_cached("SELECT type, value FROM attributes WHERE object_id = ?1")
                .ctx(what)?;
            let mut rows = stmt.query([id]).ctx(what)?;
            let mut opener = opener;
            while let Some(row) = rows.next().ctx(what)? {
                let ty = type_from_db(row.get(0).ctx(what)?)?;
                let blob = row.get_ref(1).ctx(what)?.as_blob().map_err(|e| {
                    StoreError::Corrupt(format!("object {id}: attribute value: {e}"))
                })?;
                let value = match opener.as_deref_mut() {
                    Some(o) => open_attr(o, id, ty, blob)?,
                    None => blob.to_vec(),
                };
                attrs.insert(ty, value);
            }
        }
        tx.commit().ctx(what)?;
        Ok(Some(attrs))
    }

    /// Every public object, plus every private one when `mk` is given, as
    /// `(id, version, private, attributes)` ordered by id; one read
    /// transaction and one query. A value that fails to authenticate →
    /// `Corrupt`; a stale master key → `Pin(CKR_USER_NOT_LOGGED_IN)`.
    pub fn load_all(
        &self,
        mk: Option<&MasterKey>,
    ) -> Result<Vec<(i64, u64, bool, AttrMap)>, StoreError> {
        let mut opener = match mk {
            Some(mk) => Some(Gcm::decryptor(mk.bytes())?),
            None => None,
        };
        let what = "loading objects";
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .ctx(what)?;
        if let Some(mk) = mk {
            check_mk(&tx, mk)?;
        }
        let mut out: Vec<(i64, u64, bool, AttrMap)> = Vec::new();
        {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT o.id, o.version, o.private, a.type, a.value
                     FROM objects AS o LEFT JOIN attributes AS a ON a.object_id = o.id
                     WHERE o.private = 0 OR ?1
                     ORDER BY o.id",
                )
                .ctx(what)?;
            let mut rows = stmt.query([mk.is_some()]).ctx(what)?;
            while let Some(row) = rows.next().ctx(what)? {
                let id: i64 = row.get(0).ctx(what)?;
                if out.last().map(|o| o.0) != Some(id) {
                    let version = version_from_db(id, row.get(1).ctx(what)?)?;
                    let private: bool = row.get(2).ctx(what)?;
                    out.push((id, version, private, AttrMap::new()));
                }
                let Some(entry) = out.last_mut() else {
                    continue;
                };
                let Some(ty) = row.get::<_, Option<i64>>(3).ctx(what)? else {
                    continue; // object without attributes
                };
                let ty = type_from_db(ty)?;
                let blob = row.get_ref(4).ctx(what)?.as_blob().map_err(|e| {
                    StoreError::Corrupt(format!("object {id}: attribute value: {e}"))
                })?;
                let value = if entry.2 {
                    match opener.as_mut() {
                        Some(o) => open_attr(o, id, ty, blob)?,
                        None => continue, // not reachable: filtered by the query
                    }
                } else {
                    blob.to_vec()
                };
                entry.3.insert(ty, value);
            }
        }
        tx.commit().ctx(what)?;
        Ok(out)
    }

    /// SQLite's `PRAGMA data_version`: changes whenever *another* connection
    /// (another `TokenStore` or process) commits to the file; this store's own
    /// commits do not change it.
    pub fn data_version(&self) -> Result<i64, StoreError> {
        self.lock()
            .pragma_query_value(None, "data_version", |r| r.get(0))
            .ctx("reading data_version")
    }
}

#[cfg(test)]
impl TokenStore {
    /// Bulk insert in one transaction (for the load_all benchmark test).
    fn insert_many_for_test(
        &self,
        objects: &[(bool, AttrMap)],
        mk: Option<&MasterKey>,
    ) -> Result<(), StoreError> {
        let mut sealer = sealer_for(true, mk).ok().flatten();
        let mut conn = self.lock();
        let tx = Self::immediate(&mut conn, "bulk insert")?;
        for (private, attrs) in objects {
            tx.execute(
                "INSERT INTO objects (version, private) VALUES (1, ?1)",
                [private],
            )
            .ctx("bulk insert")?;
            let id = tx.last_insert_rowid();
            let s = if *private { sealer.as_mut() } else { None };
            if *private && s.is_none() {
                return Err(StoreError::Pin(CKR_USER_NOT_LOGGED_IN));
            }
            write_attrs(&tx, id, attrs, s)?;
        }
        self.commit(tx, "bulk insert")
    }
}
