//! Tests of the keystore (scrypt runs with N = 2^10 here, see `ScryptParams::current`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use opencf_abi::sys::{
    CKA_CLASS, CKA_ID, CKA_LABEL, CKA_VALUE, CKR_DEVICE_ERROR, CKR_OBJECT_HANDLE_INVALID,
    CKR_PIN_INCORRECT, CKR_PIN_LEN_RANGE, CKR_PIN_LOCKED, CKR_USER_NOT_LOGGED_IN,
    CKR_USER_PIN_NOT_INITIALIZED, CKR_USER_TYPE_INVALID, CKU_CONTEXT_SPECIFIC, CKU_SO, CKU_USER,
    CK_ATTRIBUTE_TYPE,
};
use rusqlite::Connection;

use super::crypto::{scrypt_kek, ScryptParams};
use super::pin::{PinRecord, Who};
use super::*;

const DEFAULT_PIN: &[u8] = b"changeme";

/// A unique temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "opencf-store-test-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn db(&self) -> PathBuf {
        self.0.join("token.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn attrs(pairs: &[(CK_ATTRIBUTE_TYPE, &[u8])]) -> AttrMap {
    pairs.iter().map(|(t, v)| (*t, v.to_vec())).collect()
}

fn pin_err<T: std::fmt::Debug>(r: Result<T, StoreError>) -> CK_RV {
    match r {
        Err(StoreError::Pin(rv)) => rv,
        other => panic!("expected a Pin error, got {other:?}"),
    }
}

fn fresh(dir: &TempDir) -> TokenStore {
    let s = TokenStore::open(&dir.db()).expect("open");
    s.create_default("OpenCF Softtoken", DEFAULT_PIN)
        .expect("create_default");
    s
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn store_is_send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TokenStore>();
    assert_send_sync::<MasterKey>();
}

#[test]
fn create_default_then_login() {
    let dir = TempDir::new();
    let s = TokenStore::open(&dir.db()).unwrap();
    let m = s.meta().unwrap();
    assert!(!m.initialized);
    assert_eq!(m.serial.len(), 16);
    assert!(m.serial.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(
        pin_err(s.login(CKU_USER, DEFAULT_PIN)),
        CKR_USER_PIN_NOT_INITIALIZED
    );
    assert_eq!(pin_err(s.create_default("x", b"abc")), CKR_PIN_LEN_RANGE);

    s.create_default("OpenCF Softtoken", DEFAULT_PIN).unwrap();
    let m = s.meta().unwrap();
    assert_eq!(
        m,
        TokenMeta {
            label: "OpenCF Softtoken".into(),
            serial: m.serial.clone(),
            initialized: true,
            user_pin_initialized: true,
            user_pin_to_be_changed: true,
            so_pin_to_be_changed: true,
            user_failures: 0,
            so_failures: 0,
        }
    );
    let mk_user = s.login(CKU_USER, DEFAULT_PIN).unwrap();
    let mk_so = s.login(CKU_SO, DEFAULT_PIN).unwrap();
    assert_eq!(mk_user.bytes(), mk_so.bytes());
    assert_eq!(
        pin_err(s.login(CKU_CONTEXT_SPECIFIC, DEFAULT_PIN)),
        CKR_USER_TYPE_INVALID
    );

    // Idempotent, also through a second store on the same file.
    let s2 = TokenStore::open(&dir.db()).unwrap();
    s2.create_default("Other", b"otherpin").unwrap();
    assert_eq!(s2.meta().unwrap(), s.meta().unwrap());
    assert_eq!(
        s2.login(CKU_USER, DEFAULT_PIN).unwrap().bytes(),
        mk_user.bytes()
    );
    assert!(format!("{mk_user:?}").contains("redacted"));
}

#[test]
fn wrong_pin_counts_and_locks() {
    let dir = TempDir::new();
    let s = fresh(&dir);
    // A wrong PIN, then the right one: the counter goes back to 0.
    assert_eq!(pin_err(s.login(CKU_USER, b"wrong-pin")), CKR_PIN_INCORRECT);
    assert_eq!(s.meta().unwrap().user_failures, 1);
    s.login(CKU_USER, DEFAULT_PIN).unwrap();
    assert_eq!(s.meta().unwrap().user_failures, 0);

    for i in 1..MAX_PIN_FAILURES {
        assert_eq!(pin_err(s.login(CKU_USER, b"wrong-pin")), CKR_PIN_INCORRECT);
        assert_eq!(s.meta().unwrap().user_failures, i);
    }
    assert!(!s.meta().unwrap().user_locked());
    // The 10th failure locks.
    assert_eq!(pin_err(s.login(CKU_USER, b"wrong-pin")), CKR_PIN_LOCKED);
    let m = s.meta().unwrap();
    assert!(m.user_locked());
    assert!(!m.so_locked());
    assert_eq!(m.so_failures, 0);
    // Locked refuses even the right PIN, and does not count further.
    assert_eq!(pin_err(s.login(CKU_USER, DEFAULT_PIN)), CKR_PIN_LOCKED);
    assert_eq!(
        pin_err(s.set_pin(CKU_USER, DEFAULT_PIN, b"newpin12")),
        CKR_PIN_LOCKED
    );
    assert_eq!(s.meta().unwrap().user_failures, MAX_PIN_FAILURES);
    // Persisted: a new store on the file sees the lock.
    drop(s);
    let s = TokenStore::open(&dir.db()).unwrap();
    assert!(s.meta().unwrap().user_locked());
    assert_eq!(pin_err(s.login(CKU_USER, DEFAULT_PIN)), CKR_PIN_LOCKED);
    // The SO can still log in and re-set the user PIN, which unlocks it.
    let mk = s.login(CKU_SO, DEFAULT_PIN).unwrap();
    s.init_user_pin(&mk, b"fresh-user").unwrap();
    let m = s.meta().unwrap();
    assert_eq!(m.user_failures, 0);
    assert!(!m.user_pin_to_be_changed);
    s.login(CKU_USER, b"fresh-user").unwrap();
}

#[test]
fn set_pin_rewraps_master_key() {
    let dir = TempDir::new();
    let s = fresh(&dir);
    let mk = s.login(CKU_USER, DEFAULT_PIN).unwrap();
    let secret = attrs(&[(CKA_LABEL, b"k"), (CKA_VALUE, b"top secret value")]);
    let id = s.insert_object(true, &secret, Some(&mk)).unwrap();

    assert_eq!(
        pin_err(s.set_pin(CKU_USER, DEFAULT_PIN, b"abc")),
        CKR_PIN_LEN_RANGE
    );
    assert_eq!(
        pin_err(s.set_pin(CKU_USER, DEFAULT_PIN, &[b'x'; 256])),
        CKR_PIN_LEN_RANGE
    );
    assert_eq!(
        s.meta().unwrap().user_failures,
        0,
        "length errors use no try"
    );
    assert_eq!(
        pin_err(s.set_pin(CKU_USER, b"not-the-pin", b"newpin12")),
        CKR_PIN_INCORRECT
    );
    assert_eq!(s.meta().unwrap().user_failures, 1);

    s.set_pin(CKU_USER, DEFAULT_PIN, b"newpin12").unwrap();
    let m = s.meta().unwrap();
    assert!(!m.user_pin_to_be_changed);
    assert!(m.so_pin_to_be_changed);
    assert_eq!(m.user_failures, 0);
    assert_eq!(pin_err(s.login(CKU_USER, DEFAULT_PIN)), CKR_PIN_INCORRECT);
    let mk2 = s.login(CKU_USER, b"newpin12").unwrap();
    assert_eq!(mk2.bytes(), mk.bytes(), "only the wrapping changed");
    assert_eq!(s.load_object(id, Some(&mk2)).unwrap(), Some(secret));

    // SO PIN: independent of the user PIN.
    s.set_pin(CKU_SO, DEFAULT_PIN, b"so-secret").unwrap();
    assert!(!s.meta().unwrap().so_pin_to_be_changed);
    assert_eq!(s.login(CKU_SO, b"so-secret").unwrap().bytes(), mk.bytes());
}

#[test]
fn init_token_wipes_objects() {
    let dir = TempDir::new();
    let s = fresh(&dir);
    let serial = s.meta().unwrap().serial;
    let mk = s.login(CKU_USER, DEFAULT_PIN).unwrap();
    s.insert_object(true, &attrs(&[(CKA_VALUE, b"secret")]), Some(&mk))
        .unwrap();
    s.insert_object(false, &attrs(&[(CKA_LABEL, b"cert")]), None)
        .unwrap();
    assert_eq!(s.object_versions().unwrap().len(), 2);

    // Wrong SO PIN: counted, nothing wiped.
    assert_eq!(pin_err(s.init_token("New", b"wrong-so")), CKR_PIN_INCORRECT);
    assert_eq!(s.meta().unwrap().so_failures, 1);
    assert_eq!(s.object_versions().unwrap().len(), 2);

    s.init_token(
        "New label that is much longer than thirty-two bytes",
        DEFAULT_PIN,
    )
    .unwrap();
    let m = s.meta().unwrap();
    assert_eq!(m.label, "New label that is much longer th");
    assert_eq!(m.serial, serial);
    assert!(m.initialized && !m.user_pin_initialized);
    assert!(!m.so_pin_to_be_changed && !m.user_pin_to_be_changed);
    assert_eq!(m.so_failures, 0);
    assert!(s.object_versions().unwrap().is_empty());
    assert!(s.load_all(None).unwrap().is_empty());

    // The old master key is dead; the user PIN is gone.
    assert_eq!(
        pin_err(s.insert_object(true, &attrs(&[(CKA_VALUE, b"x")]), Some(&mk))),
        CKR_USER_NOT_LOGGED_IN
    );
    assert_eq!(
        pin_err(s.login(CKU_USER, DEFAULT_PIN)),
        CKR_USER_PIN_NOT_INITIALIZED
    );
    let so_mk = s.login(CKU_SO, DEFAULT_PIN).unwrap();
    assert_ne!(so_mk.bytes(), mk.bytes());
    assert_eq!(
        pin_err(s.init_user_pin(&mk, b"userpin1")),
        CKR_USER_NOT_LOGGED_IN
    );
    s.init_user_pin(&so_mk, b"userpin1").unwrap();
    let umk = s.login(CKU_USER, b"userpin1").unwrap();
    let id = s
        .insert_object(true, &attrs(&[(CKA_VALUE, b"y")]), Some(&umk))
        .unwrap();
    assert!(s.load_object(id, Some(&umk)).unwrap().is_some());

    // init_token on a token that was never initialized needs no SO PIN.
    let dir2 = TempDir::new();
    let s2 = TokenStore::open(&dir2.db()).unwrap();
    assert_eq!(pin_err(s2.init_token("T", b"123")), CKR_PIN_LEN_RANGE);
    s2.init_token("T", b"so-pin-1").unwrap();
    s2.login(CKU_SO, b"so-pin-1").unwrap();
}

#[test]
fn private_objects_are_encrypted() {
    let dir = TempDir::new();
    let s = fresh(&dir);
    let mk = s.login(CKU_USER, DEFAULT_PIN).unwrap();
    let plain = b"PLAINTEXT-SECRET-KEY-MATERIAL";
    let label = b"my-private-label";
    let priv_attrs = attrs(&[(CKA_VALUE, plain), (CKA_LABEL, label), (CKA_ID, b"")]);
    let pub_attrs = attrs(&[(CKA_LABEL, b"public-label"), (CKA_CLASS, &[1, 0, 0, 0])]);
    assert_eq!(
        pin_err(s.insert_object(true, &priv_attrs, None)),
        CKR_USER_NOT_LOGGED_IN
    );
    let pid = s.insert_object(true, &priv_attrs, Some(&mk)).unwrap();
    let qid = s.insert_object(false, &pub_attrs, None).unwrap();

    assert_eq!(s.load_object(pid, None).unwrap(), None);
    assert_eq!(
        s.load_object(pid, Some(&mk)).unwrap(),
        Some(priv_attrs.clone())
    );
    assert_eq!(s.load_object(qid, None).unwrap(), Some(pub_attrs.clone()));
    assert_eq!(s.load_object(9999, Some(&mk)).unwrap(), None);

    let public_only = s.load_all(None).unwrap();
    assert_eq!(public_only, vec![(qid, 1, false, pub_attrs.clone())]);
    let everything = s.load_all(Some(&mk)).unwrap();
    assert_eq!(
        everything,
        vec![
            (pid, 1, true, priv_attrs.clone()),
            (qid, 1, false, pub_attrs.clone())
        ]
    );

    // Raw rows: no plaintext, each value = nonce + ciphertext + tag.
    let raw = Connection::open(dir.db()).unwrap();
    let mut stmt = raw
        .prepare("SELECT type, value FROM attributes WHERE object_id = ?1")
        .unwrap();
    let rows: Vec<(i64, Vec<u8>)> = stmt
        .query_map([pid], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(rows.len(), 3);
    for (ty, value) in &rows {
        let pt = &priv_attrs[&(*ty as CK_ATTRIBUTE_TYPE)];
        assert_eq!(value.len(), pt.len() + 28);
        assert!(pt.is_empty() || !contains(value, pt));
    }
    let mut whole = Vec::new();
    for suffix in ["", "-wal"] {
        let mut p = dir.db().into_os_string();
        p.push(suffix);
        if let Ok(b) = std::fs::read(&p) {
            whole.extend(b);
        }
    }
    assert!(!contains(&whole, plain), "plaintext found in the files");
    assert!(!contains(&whole, label), "plaintext found in the files");
    assert!(
        contains(&whole, b"public-label"),
        "public objects are clear"
    );
}

/// Swaps the `value` of two attribute rows directly in SQLite.
fn swap_values(db: &Path, a: (i64, CK_ATTRIBUTE_TYPE), b: (i64, CK_ATTRIBUTE_TYPE)) {
    let raw = Connection::open(db).unwrap();
    let get = |(id, ty): (i64, CK_ATTRIBUTE_TYPE)| -> Vec<u8> {
        raw.query_row(
            "SELECT value FROM attributes WHERE object_id = ?1 AND type = ?2",
            rusqlite::params![id, ty as i64],
            |r| r.get(0),
        )
        .unwrap()
    };
    let (va, vb) = (get(a), get(b));
    let set = |(id, ty): (i64, CK_ATTRIBUTE_TYPE), v: &Vec<u8>| {
        raw.execute(
            "UPDATE attributes SET value = ?3 WHERE object_id = ?1 AND type = ?2",
            rusqlite::params![id, ty as i64, v],
        )
        .unwrap();
    };
    set(a, &vb);
    set(b, &va);
}

#[test]
fn swapped_encrypted_rows_are_detected() {
    let dir = TempDir::new();
    let s = fresh(&dir);
    let mk = s.login(CKU_USER, DEFAULT_PIN).unwrap();
    let a = s
        .insert_object(
            true,
            &attrs(&[(CKA_LABEL, b"label-a"), (CKA_VALUE, b"value-a")]),
            Some(&mk),
        )
        .unwrap();
    let b = s
        .insert_object(
            true,
            &attrs(&[(CKA_LABEL, b"label-b"), (CKA_VALUE, b"value-b")]),
            Some(&mk),
        )
        .unwrap();

    // Between two attributes of one object.
    swap_values(&dir.db(), (a, CKA_LABEL), (a, CKA_VALUE));
    assert!(matches!(
        s.load_object(a, Some(&mk)),
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(s.load_all(Some(&mk)), Err(StoreError::Corrupt(_))));
    assert_eq!(
        s.load_object(a, Some(&mk)).unwrap_err().rv(),
        CKR_DEVICE_ERROR
    );
    swap_values(&dir.db(), (a, CKA_LABEL), (a, CKA_VALUE));
    assert!(s.load_object(a, Some(&mk)).unwrap().is_some());

    // The same attribute between two objects.
    swap_values(&dir.db(), (a, CKA_VALUE), (b, CKA_VALUE));
    assert!(matches!(
        s.load_object(a, Some(&mk)),
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        s.load_object(b, Some(&mk)),
        Err(StoreError::Corrupt(_))
    ));

    // A flipped bit.
    let raw = Connection::open(dir.db()).unwrap();
    raw.execute(
        "UPDATE attributes SET value = CAST(zeroblob(length(value)) AS BLOB) WHERE object_id = ?1",
        [b],
    )
    .unwrap();
    assert!(matches!(
        s.load_object(b, Some(&mk)),
        Err(StoreError::Corrupt(_))
    ));
}

#[test]
fn object_updates_versions_and_deletes() {
    let dir = TempDir::new();
    let s = TokenStore::open(&dir.db()).unwrap();
    let before = s.data_version().unwrap();
    let id = s
        .insert_object(false, &attrs(&[(CKA_LABEL, b"one")]), None)
        .unwrap();
    let other = TokenStore::open(&dir.db()).unwrap();
    assert_eq!(
        s.data_version().unwrap(),
        before,
        "own commits do not count"
    );
    let seen = other.data_version().unwrap();
    assert_eq!(
        s.update_object(id, 1, false, &attrs(&[(CKA_ID, b"2")]), None)
            .unwrap(),
        2
    );
    assert_ne!(other.data_version().unwrap(), seen, "other commits do");
    // The shared change counter: each write bumps it for every opener; reads do not.
    let counted = other.changes().expect("the change counter file");
    assert_eq!(s.changes(), Some(counted), "one counter for both");
    other.load_object(id, None).unwrap();
    other.object_versions().unwrap();
    assert_eq!(s.changes(), Some(counted), "reads do not bump it");
    // An update made from a version another writer has changed since writes nothing.
    assert!(matches!(
        other.update_object(id, 1, false, &attrs(&[(CKA_LABEL, b"lost")]), None),
        Err(StoreError::Stale)
    ));
    assert_eq!(
        other.changes(),
        Some(counted),
        "a refused update does not count"
    );
    s.update_object(id, 2, false, &attrs(&[(CKA_ID, b"2")]), None)
        .unwrap();
    assert_eq!(other.changes(), Some(counted + 1), "a write does");
    assert!(crate::store::changes_path(&dir.db()).exists());
    assert_eq!(s.object_versions().unwrap(), vec![(id, 3, false)]);
    assert_eq!(
        other.load_object(id, None).unwrap(),
        Some(attrs(&[(CKA_ID, b"2")]))
    );
    // An object with no attributes still shows up.
    let empty = s.insert_object(false, &AttrMap::new(), None).unwrap();
    assert_eq!(
        s.load_all(None).unwrap(),
        vec![
            (id, 3, false, attrs(&[(CKA_ID, b"2")])),
            (empty, 1, false, AttrMap::new())
        ]
    );
    assert_eq!(
        pin_err(s.update_object(12345, 1, false, &AttrMap::new(), None)),
        CKR_OBJECT_HANDLE_INVALID
    );
    assert!(s.delete_object(id).unwrap());
    assert!(!s.delete_object(id).unwrap());
    assert_eq!(s.object_versions().unwrap(), vec![(empty, 1, false)]);
    // Ids are not reused.
    let next = s.insert_object(false, &AttrMap::new(), None).unwrap();
    assert!(next > empty);
    // Vendor-defined attribute types (high bit set) round-trip.
    let vendor: CK_ATTRIBUTE_TYPE = 0x8000_0000_0000_0001u64 as CK_ATTRIBUTE_TYPE;
    s.update_object(next, 1, false, &attrs(&[(vendor, b"v")]), None)
        .unwrap();
    assert_eq!(
        s.load_object(next, None).unwrap(),
        Some(attrs(&[(vendor, b"v")]))
    );
}

#[test]
fn two_stores_two_threads_lose_nothing() {
    let dir = TempDir::new();
    let s1 = Arc::new(fresh(&dir));
    let s2 = Arc::new(TokenStore::open(&dir.db()).unwrap());
    let mk = s1.login(CKU_USER, DEFAULT_PIN).unwrap();
    const N: usize = 200;
    let spawn = |s: Arc<TokenStore>, tag: u8, mk: Option<MasterKey>| {
        std::thread::spawn(move || {
            let mut ids = Vec::new();
            for i in 0..N {
                let a = attrs(&[
                    (CKA_LABEL, format!("t{tag}-{i}").as_bytes()),
                    (CKA_VALUE, &[tag; 40]),
                ]);
                ids.push(s.insert_object(mk.is_some(), &a, mk.as_ref()).unwrap());
            }
            ids
        })
    };
    let h1 = spawn(s1.clone(), 1, Some(mk.clone()));
    let h2 = spawn(s2.clone(), 2, None);
    let mut ids: Vec<i64> = h1.join().unwrap();
    ids.extend(h2.join().unwrap());
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 2 * N);

    let all = s2.load_all(Some(&mk)).unwrap();
    assert_eq!(all.len(), 2 * N);
    assert_eq!(all.iter().filter(|o| o.2).count(), N);
    for (_, _, private, a) in &all {
        let tag = if *private { 1 } else { 2 };
        assert_eq!(a[&CKA_VALUE], vec![tag; 40]);
        assert!(a[&CKA_LABEL].starts_with(format!("t{tag}-").as_bytes()));
    }
    assert_eq!(s1.load_all(None).unwrap().len(), N);
}

#[test]
fn garbage_file_is_corrupt() {
    let dir = TempDir::new();
    let mut junk = b"this is certainly not an SQLite database\n".repeat(200);
    junk.extend((0..4096u32).map(|i| (i * 7919 % 251) as u8));
    std::fs::write(dir.db(), &junk).unwrap();
    match TokenStore::open(&dir.db()) {
        Err(e @ StoreError::Corrupt(_)) => {
            assert_eq!(e.rv(), CKR_DEVICE_ERROR);
            assert!(e.to_string().contains("not"), "{e}");
        }
        Err(e) => panic!("expected Corrupt, got {e:?}"),
        Ok(_) => panic!("expected Corrupt, got a store"),
    }
    assert_eq!(std::fs::read(dir.db()).unwrap(), junk, "file left alone");

    // A valid SQLite database that is someone else's.
    let other = dir.0.join("other.db");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    assert!(matches!(
        TokenStore::open(&other),
        Err(StoreError::Corrupt(_))
    ));

    // A newer schema version.
    let newer = dir.0.join("newer.db");
    drop(TokenStore::open(&newer).unwrap());
    Connection::open(&newer)
        .unwrap()
        .execute("UPDATE schema_info SET version = 99", [])
        .unwrap();
    match TokenStore::open(&newer) {
        Err(StoreError::Corrupt(m)) => assert!(m.contains("99"), "{m}"),
        Err(e) => panic!("expected Corrupt, got {e:?}"),
        Ok(_) => panic!("expected Corrupt, got a store"),
    }
}

#[test]
fn tampered_pin_record_is_not_a_panic() {
    let dir = TempDir::new();
    let s = fresh(&dir);
    let raw = Connection::open(dir.db()).unwrap();
    // Absurd scrypt cost: refused as Corrupt, not run.
    raw.execute(
        "UPDATE pins SET kdf_n = 1099511627776 WHERE user_type = 1",
        [],
    )
    .unwrap();
    assert!(matches!(
        s.login(CKU_USER, DEFAULT_PIN),
        Err(StoreError::Corrupt(_))
    ));
    raw.execute("UPDATE pins SET kdf = 'argon9' WHERE user_type = 0", [])
        .unwrap();
    assert!(matches!(
        s.login(CKU_SO, DEFAULT_PIN),
        Err(StoreError::Corrupt(_))
    ));
    raw.execute("UPDATE token SET user_failures = 'many'", [])
        .unwrap();
    assert!(matches!(s.meta(), Err(StoreError::Corrupt(_))));
}

/// A damaged PIN record is told from a wrong PIN: with its check value, a byte changed in the
/// salt, the wrapped key or a KDF parameter is `Corrupt` (`CKR_DEVICE_ERROR`) before the PIN
/// is tried, and no try is counted; the other record still logs in.
#[test]
fn damaged_pin_record_is_not_a_wrong_pin() {
    for (column, change) in [
        (
            "salt",
            "UPDATE pins SET salt = zeroblob(16) WHERE user_type = 1",
        ),
        (
            "wrapped_key",
            "UPDATE pins SET wrapped_key = zeroblob(60) WHERE user_type = 1",
        ),
        (
            "kdf_n",
            "UPDATE pins SET kdf_n = kdf_n * 2 WHERE user_type = 1",
        ),
        (
            "row_check",
            "UPDATE pins SET row_check = zeroblob(32) WHERE user_type = 1",
        ),
    ] {
        let dir = TempDir::new();
        let s = fresh(&dir);
        let raw = Connection::open(dir.db()).unwrap();
        raw.execute(change, []).unwrap();
        match s.login(CKU_USER, DEFAULT_PIN) {
            Err(StoreError::Corrupt(m)) => assert!(m.contains("user PIN record is damaged"), "{m}"),
            other => panic!("{column}: expected Corrupt, got {other:?}"),
        }
        assert_eq!(
            s.meta().unwrap().user_failures,
            0,
            "{column}: no try counted"
        );
        s.login(CKU_SO, DEFAULT_PIN).unwrap();
    }
}

/// A record written before the check column existed (NULL there, or a database without the
/// column): opening adds the column, a wrong PIN is still `CKR_PIN_INCORRECT`, and a login
/// that proves the record intact writes its check value, which then guards it.
#[test]
fn pin_record_of_an_older_build_gets_its_check() {
    let dir = TempDir::new();
    drop(fresh(&dir));
    let raw = Connection::open(dir.db()).unwrap();
    raw.execute_batch("ALTER TABLE pins DROP COLUMN row_check")
        .unwrap();
    let s = TokenStore::open(&dir.db()).unwrap();
    let count_checked = || -> i64 {
        raw.query_row(
            "SELECT count(*) FROM pins WHERE row_check IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(count_checked(), 0, "the column is added empty");
    assert_eq!(pin_err(s.login(CKU_USER, b"wrong-pin")), CKR_PIN_INCORRECT);
    assert_eq!(count_checked(), 0);
    s.login(CKU_USER, DEFAULT_PIN).unwrap();
    assert_eq!(
        count_checked(),
        1,
        "the user's record is checked after its login"
    );
    raw.execute(
        "UPDATE pins SET salt = zeroblob(16) WHERE user_type = 1",
        [],
    )
    .unwrap();
    assert!(matches!(
        s.login(CKU_USER, DEFAULT_PIN),
        Err(StoreError::Corrupt(_))
    ));
    // A PIN change through the checked record keeps it checked.
    s.login(CKU_SO, DEFAULT_PIN).unwrap();
    s.set_pin(CKU_SO, DEFAULT_PIN, b"new-so-pin").unwrap();
    assert_eq!(count_checked(), 2);
    s.login(CKU_SO, b"new-so-pin").unwrap();
}

/// The keystore path is never followed through a link nor used to change a file that is not
/// a token database: a link to a file elsewhere (the file keeps its mode and content), a
/// dangling link (nothing is made where it points), a FIFO (refused at once), and another
/// program's SQLite database (not switched to WAL, not chmod'ed: its bytes stay the same).
#[test]
fn the_keystore_file_is_never_followed_or_changed() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let dir = TempDir::new();
    let outside = dir.0.join("outside.txt");
    std::fs::write(&outside, b"important text").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;

    let link = dir.0.join("link.sqlite");
    symlink(&outside, &link).unwrap();
    match TokenStore::open(&link) {
        Err(StoreError::Corrupt(m)) => assert!(m.contains("is a symbolic link"), "{m}"),
        other => panic!("a link: {:?}", other.map(|_| ())),
    }
    assert_eq!(
        mode(&outside),
        0o644,
        "the file the link names keeps its mode"
    );
    assert_eq!(std::fs::read(&outside).unwrap(), b"important text");

    let dangling = dir.0.join("dangling.sqlite");
    let target = dir.0.join("made-elsewhere.sqlite");
    symlink(&target, &dangling).unwrap();
    assert!(TokenStore::open(&dangling).is_err());
    assert!(
        !target.exists(),
        "no keystore is made where a dangling link points"
    );

    let fifo = dir.0.join("fifo.sqlite");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    match TokenStore::open(&fifo) {
        Err(StoreError::Corrupt(m)) => assert!(m.contains("not a regular file"), "{m}"),
        other => panic!("a FIFO: {:?}", other.map(|_| ())),
    }

    let foreign = dir.0.join("other-program.sqlite");
    {
        let c = Connection::open(&foreign).unwrap();
        c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = std::fs::read(&foreign).unwrap();
    match TokenStore::open(&foreign) {
        Err(StoreError::Corrupt(m)) => assert!(m.contains("not an OpenCF token database"), "{m}"),
        other => panic!("another program's database: {:?}", other.map(|_| ())),
    }
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "its bytes are unchanged"
    );
    assert_eq!(mode(&foreign), 0o644, "its mode is unchanged");
}

#[test]
fn files_and_dirs_are_private() {
    let dir = TempDir::new();
    let nested = dir.0.join("a").join("b");
    let db = nested.join("token.db");
    let s = TokenStore::open(&db).unwrap();
    s.insert_object(false, &attrs(&[(CKA_LABEL, b"x")]), None)
        .unwrap();
    {
        let c = s.lock();
        let q = |pragma: &str| -> String {
            c.query_row(&format!("PRAGMA {pragma}"), [], |r| {
                r.get::<_, rusqlite::types::Value>(0)
            })
            .map(|v| format!("{v:?}"))
            .unwrap()
        };
        assert_eq!(q("journal_mode"), "Text(\"wal\")");
        assert_eq!(q("synchronous"), "Integer(2)"); // FULL
        assert_eq!(q("foreign_keys"), "Integer(1)");
        assert_eq!(q("busy_timeout"), "Integer(10000)");
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.0.join("a")), 0o700);
    assert_eq!(mode(&nested), 0o700);
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.clone().into_os_string();
        p.push(suffix);
        let p = PathBuf::from(p);
        assert!(p.exists(), "{} missing", p.display());
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    // An existing file with loose permissions is tightened on open.
    drop(s);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _s = TokenStore::open(&db).unwrap();
    assert_eq!(mode(&db), 0o600);
}

#[test]
fn production_kdf_parameters_work() {
    let p = ScryptParams::production();
    p.validate().unwrap();
    let t = Instant::now();
    let k1 = scrypt_kek(b"changeme", &[7u8; 16], &p).unwrap();
    eprintln!("scrypt N=2^15 r=8 p=1: {:?}", t.elapsed());
    let k2 = scrypt_kek(b"changeme", &[7u8; 16], &p).unwrap();
    assert_eq!(*k1, *k2);
    assert_ne!(*k1, *scrypt_kek(b"changemf", &[7u8; 16], &p).unwrap());
    // A record made with other parameters than the current ones still opens:
    // parameters are read from the record.
    let mk = MasterKey::generate().unwrap();
    let mut rec = PinRecord::create(Who::User, b"1234", &mk).unwrap();
    assert_eq!(rec.params, ScryptParams::current());
    rec.params = ScryptParams {
        n: 1 << 11,
        r: 4,
        p: 2,
    };
    assert_eq!(
        rec.unwrap_key(Who::User, b"1234")
            .unwrap()
            .map(|k| *k.bytes()),
        None
    );
    let good = PinRecord::create(Who::User, b"1234", &mk).unwrap();
    // The SO record cannot stand in for the user record (AAD names the user).
    assert!(good.unwrap_key(Who::So, b"1234").unwrap().is_none());
    assert_eq!(
        good.unwrap_key(Who::User, b"1234")
            .unwrap()
            .map(|k| *k.bytes()),
        Some(*mk.bytes())
    );
}

#[test]
fn load_all_is_fast() {
    let dir = TempDir::new();
    let s = fresh(&dir);
    let mk = s.login(CKU_USER, DEFAULT_PIN).unwrap();
    const OBJECTS: usize = 10_000;
    const ATTRS: u64 = 20;
    let objs: Vec<(bool, AttrMap)> = (0..OBJECTS)
        .map(|i| {
            let a = (0..ATTRS)
                .map(|t| {
                    (
                        t as CK_ATTRIBUTE_TYPE,
                        format!("value {i} {t} padding....").into_bytes(),
                    )
                })
                .collect();
            (i % 2 == 0, a)
        })
        .collect();
    s.insert_many_for_test(&objs, Some(&mk)).unwrap();
    let t = Instant::now();
    let all = s.load_all(Some(&mk)).unwrap();
    let took = t.elapsed();
    eprintln!("load_all of {OBJECTS} objects x {ATTRS} attributes: {took:?}");
    assert_eq!(all.len(), OBJECTS);
    assert!(all.iter().all(|o| o.3.len() == ATTRS as usize));
    assert_eq!(all[1].3[&3], b"value 1 3 padding....".to_vec());
    // Generous bound: unoptimized test builds are several times slower than
    // release builds.
    assert!(took.as_secs_f64() < 5.0, "load_all took {took:?}");
    // What another process's write costs a process at its next object lookup.
    let t = Instant::now();
    let versions = s.object_versions().unwrap();
    eprintln!("object_versions of {OBJECTS} objects: {:?}", t.elapsed());
    assert_eq!(versions.len(), OBJECTS);
}

/// A database that cannot grow (SQLite's `SQLITE_FULL`, as on a full disk; here its page
/// count is capped) is `Full`, `CKR_DEVICE_MEMORY`, not a device error: nothing is written,
/// and the objects stored before stay readable.
#[test]
fn a_full_database_is_device_memory() {
    let dir = TempDir::new();
    let s = fresh(&dir);
    s.insert_object(false, &attrs(&[(CKA_LABEL, b"before")]), None)
        .unwrap();
    {
        let conn = s.lock();
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        conn.pragma_update(None, "max_page_count", pages).unwrap();
    }
    let big = vec![7u8; 64 * 1024];
    let r = s.insert_object(false, &attrs(&[(CKA_VALUE, &big)]), None);
    match r {
        Err(e @ StoreError::Full(_)) => {
            assert_eq!(e.rv(), opencf_abi::sys::CKR_DEVICE_MEMORY);
            assert!(e.to_string().contains("no space left"), "{e}");
        }
        other => panic!("expected Full, got {other:?}"),
    }
    let all = s.load_all(None).unwrap();
    assert_eq!(all.len(), 1, "only the object stored before");
}
