//! SQLite schema, connection setup, file permissions and error mapping.

use std::ffi::OsString;
use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

use super::crypto::random_bytes;
use super::StoreError;

/// Version stored in `schema_info`; bump with a migration when the schema changes.
pub(super) const SCHEMA_VERSION: i64 = 1;

/// How long a statement waits for another connection's lock before failing.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The schema. `token` and `schema_info` hold exactly one row (id = 1).
/// `objects.id` is AUTOINCREMENT so ids are never reused (the id is bound into
/// the AAD of encrypted attributes, and other processes cache objects by id).
pub(super) const SCHEMA_SQL: &str = "
CREATE TABLE schema_info (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
CREATE TABLE token (
    id                     INTEGER PRIMARY KEY CHECK (id = 1),
    label                  TEXT    NOT NULL,
    serial                 TEXT    NOT NULL,
    initialized            INTEGER NOT NULL DEFAULT 0,
    user_pin_initialized   INTEGER NOT NULL DEFAULT 0,
    user_pin_to_be_changed INTEGER NOT NULL DEFAULT 0,
    so_pin_to_be_changed   INTEGER NOT NULL DEFAULT 0,
    user_failures          INTEGER NOT NULL DEFAULT 0,
    so_failures            INTEGER NOT NULL DEFAULT 0,
    -- nonce || GCM tag over an empty message with AAD 'opencf-mk-check' under the
    -- master key: tells whether a MasterKey is the token's current one.
    mk_check               BLOB
);
CREATE TABLE pins (
    user_type   INTEGER PRIMARY KEY,  -- CKU_SO (0) or CKU_USER (1)
    kdf         TEXT    NOT NULL,     -- 'scrypt'
    kdf_n       INTEGER NOT NULL,
    kdf_r       INTEGER NOT NULL,
    kdf_p       INTEGER NOT NULL,
    salt        BLOB    NOT NULL,     -- 16 random bytes per PIN
    wrap_alg    TEXT    NOT NULL,     -- 'aes-256-gcm'
    wrapped_key BLOB    NOT NULL,     -- nonce(12) || ciphertext(32) || tag(16)
    -- SHA-256 over the row's fields (PinRecord::check_value): a damaged row is told from a
    -- wrong PIN. NULL in a row of an older build until a login proves it intact. Added
    -- without a new schema version: older builds name their columns and leave it alone.
    row_check   BLOB
);
CREATE TABLE objects (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    version INTEGER NOT NULL,
    private INTEGER NOT NULL
);
CREATE TABLE attributes (
    object_id INTEGER NOT NULL REFERENCES objects(id) ON DELETE CASCADE,
    type      INTEGER NOT NULL,  -- CK_ATTRIBUTE_TYPE (u64 bit pattern as i64)
    value     BLOB    NOT NULL,  -- clear, or nonce(12) || ciphertext || tag(16)
    PRIMARY KEY (object_id, type)
) WITHOUT ROWID;
";

/// Maps rusqlite errors to [`StoreError`] with a context message: a damaged
/// database or unexpected column types are `Corrupt`, a full disk `Full`, everything
/// else `Io`.
pub(super) fn sql_err(what: &str, e: rusqlite::Error) -> StoreError {
    use rusqlite::Error as E;
    if matches!(&e, E::SqliteFailure(f, _) if f.code == ErrorCode::DiskFull) {
        return StoreError::Full(format!("{what}: {e}"));
    }
    let corrupt = match &e {
        E::SqliteFailure(f, _) => {
            matches!(f.code, ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
        }
        E::InvalidColumnType(..)
        | E::FromSqlConversionFailure(..)
        | E::IntegralValueOutOfRange(..) => true,
        _ => false,
    };
    if corrupt {
        StoreError::Corrupt(format!("{what}: {e}"))
    } else {
        StoreError::Io(format!("{what}: {e}"))
    }
}

pub(super) trait SqlCtx<T> {
    fn ctx(self, what: &str) -> Result<T, StoreError>;
}

impl<T> SqlCtx<T> for rusqlite::Result<T> {
    fn ctx(self, what: &str) -> Result<T, StoreError> {
        self.map_err(|e| sql_err(what, e))
    }
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    let m = format!("{what} {}: {e}", path.display());
    if e.kind() == std::io::ErrorKind::StorageFull {
        StoreError::Full(m)
    } else {
        StoreError::Io(m)
    }
}

/// Creates every missing directory of `dir` with mode 0700 (set explicitly, so
/// the umask does not matter). Existing directories are left alone.
pub(super) fn create_private_dirs(dir: &Path) -> Result<(), StoreError> {
    let mut missing: Vec<&Path> = Vec::new();
    let mut cur = dir;
    loop {
        if cur.exists() {
            break;
        }
        missing.push(cur);
        match cur.parent() {
            Some(p) if !p.as_os_str().is_empty() => cur = p,
            _ => break,
        }
    }
    for d in missing.into_iter().rev() {
        match DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => std::fs::set_permissions(d, Permissions::from_mode(0o700))
                .map_err(|e| io_err("setting permissions of", d, e))?,
            // Another process created it at the same time.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(io_err("creating directory", d, e)),
        }
    }
    Ok(())
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Creates the database file, mode 0600, if it is missing: SQLite gives the -wal and -shm
/// files the mode of the database file.
///
/// The path's last component must be the file itself: a symbolic link there is refused, not
/// followed, so that a link planted in the keystore directory neither has a file elsewhere
/// chmod'ed nor a keystore made elsewhere; a FIFO, device or directory is refused too. An
/// existing file is not opened here (closing a descriptor of it would drop any POSIX lock
/// this process's SQLite holds on it), and its mode is left as it is until it has proved to
/// be a token database ([`fix_permissions`]): another program's file is not changed.
pub(super) fn precreate_db_file(path: &Path) -> Result<(), StoreError> {
    let refused = |why: &str| StoreError::Corrupt(format!("{} {why}", path.display()));
    for _ in 0..2 {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refused(
                    "is a symbolic link; the keystore file must be a regular file itself",
                ))
            }
            Ok(m) if !m.is_file() => {
                return Err(refused(
                    "is not a regular file (a FIFO, device or directory is not a keystore)",
                ))
            }
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("opening", path, e)),
        }
        // Missing: made here, without following a link planted meanwhile. Made by another
        // process meanwhile: looked at again.
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        {
            Ok(f) => {
                return f
                    .set_permissions(Permissions::from_mode(0o600))
                    .map_err(|e| io_err("setting permissions of", path, e))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("creating", path, e)),
        }
    }
    Err(io_err(
        "creating",
        path,
        std::io::Error::other("it kept changing while it was made"),
    ))
}

/// Forces mode 0600 on the database, -wal and -shm files (those that exist), once the
/// database has proved to be a token database. Each is changed by its path, and only while
/// that path is a regular file itself: a link there is left alone. (Not through a descriptor
/// opened for it: closing any descriptor of a file drops every POSIX lock this process holds
/// on it, SQLite's included, and other processes would then miss this one's changes.)
pub(super) fn fix_permissions(path: &Path) -> Result<(), StoreError> {
    for suffix in ["", "-wal", "-shm"] {
        let p = with_suffix(path, suffix);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_file() => {
                std::fs::set_permissions(&p, Permissions::from_mode(0o600))
                    .map_err(|e| io_err("setting permissions of", &p, e))?
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("setting permissions of", &p, e)),
        }
    }
    Ok(())
}

/// Opens the connection and sets WAL, synchronous=FULL, busy timeout, foreign
/// keys, secure_delete (deleted secrets are overwritten in the file) and
/// trusted_schema=OFF.
pub(super) fn connect(path: &Path) -> Result<Connection, StoreError> {
    // SQLITE_OPEN_NOFOLLOW: a link put at the path after `precreate_db_file` looked at it is
    // not followed either.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let what = format!("opening token database {}", path.display());
    let conn = Connection::open_with_flags(path, flags).ctx(&what)?;
    conn.busy_timeout(BUSY_TIMEOUT).ctx(&what)?;
    // Another program's database is refused before anything is written to it: switching it
    // to WAL would change its file.
    let foreign: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite_%') \
             AND NOT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' \
             AND name = 'schema_info')",
            [],
            |r| r.get(0),
        )
        .map_err(|e| match sql_err(&what, e) {
            StoreError::Corrupt(m) => {
                StoreError::Corrupt(format!("{m} (not a valid SQLite token database)"))
            }
            other => other,
        })?;
    if foreign {
        return Err(StoreError::Corrupt(
            "file is an SQLite database but not an OpenCF token database".into(),
        ));
    }
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| match sql_err(&what, e) {
            StoreError::Corrupt(m) => {
                StoreError::Corrupt(format!("{m} (not a valid SQLite token database)"))
            }
            other => other,
        })?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io(format!(
            "{what}: cannot enable WAL mode (got {mode:?})"
        )));
    }
    conn.execute_batch(
        "PRAGMA synchronous = FULL;
         PRAGMA foreign_keys = ON;
         PRAGMA secure_delete = ON;
         PRAGMA trusted_schema = OFF;",
    )
    .ctx(&what)?;
    Ok(conn)
}

/// Creates the schema if the database is empty (race-free: BEGIN IMMEDIATE),
/// otherwise checks that it is ours and of a supported version.
pub(super) fn init_schema(conn: &mut Connection) -> Result<(), StoreError> {
    let what = "checking token database schema";
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .ctx(what)?;
    let has_info: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_info')",
            [],
            |r| r.get(0),
        )
        .ctx(what)?;
    if has_info {
        let version: Option<i64> = tx
            .query_row("SELECT version FROM schema_info WHERE id = 1", [], |r| {
                r.get(0)
            })
            .optional()
            .ctx(what)?;
        match version {
            Some(SCHEMA_VERSION) => {}
            Some(v) => {
                return Err(StoreError::Corrupt(format!(
                    "unsupported token database schema version {v} (this build supports {SCHEMA_VERSION})"
                )))
            }
            None => return Err(StoreError::Corrupt("token database has no schema version".into())),
        }
        let has_token: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM token WHERE id = 1)",
                [],
                |r| r.get(0),
            )
            .ctx(what)?;
        if !has_token {
            return Err(StoreError::Corrupt(
                "token database has no token row".into(),
            ));
        }
        // A database made by an older build: the PIN records' check column is added.
        let has_check: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM pragma_table_info('pins') WHERE name = 'row_check')",
                [],
                |r| r.get(0),
            )
            .ctx(what)?;
        if !has_check {
            tx.execute_batch("ALTER TABLE pins ADD COLUMN row_check BLOB")
                .ctx("adding the PIN records' check column")?;
            return tx.commit().ctx("adding the PIN records' check column");
        }
        // Nothing else to write: dropping rolls back.
        return Ok(());
    }
    let other_tables: i64 = tx
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
            [],
            |r| r.get(0),
        )
        .ctx(what)?;
    if other_tables != 0 {
        return Err(StoreError::Corrupt(
            "file is an SQLite database but not an OpenCF token database".into(),
        ));
    }
    tx.execute_batch(SCHEMA_SQL)
        .ctx("creating token database schema")?;
    tx.execute(
        "INSERT INTO schema_info (id, version) VALUES (1, ?1)",
        [SCHEMA_VERSION],
    )
    .ctx("creating token database schema")?;
    let mut raw = [0u8; 8];
    random_bytes(&mut raw)?;
    let serial: String = raw.iter().map(|b| format!("{b:02X}")).collect();
    tx.execute(
        "INSERT INTO token (id, label, serial) VALUES (1, '', ?1)",
        params![serial],
    )
    .ctx("creating token database schema")?;
    tx.commit().ctx("creating token database schema")
}
