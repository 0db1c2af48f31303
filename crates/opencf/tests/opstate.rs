//! The state of an operation through slot 0: the metaslot keeps the PKCS#11 rules of an
//! active operation, on the first (routed) call of a mechanism and on the repeated ones that
//! take the session's direct binding to the keystore. Slot 0 over the software token alone.
//! Results equal those of the first call; a second init is `CKR_OPERATION_ACTIVE`; a size
//! query and a buffer too small leave the operation active; multi-part calls continue an
//! operation begun by an init; a `C_DigestKey` refused for its key leaves the digest going; closing a session with one active is clean; one session used by
//! several threads at once (which the specification leaves to the application to avoid) gives
//! answers, never a crash.
//!
//! Build first: `cargo build --release -p opencf-softtoken -p opencf`.

mod common;
use common::{framework_lib, fresh_dir, hex, provider, release, slot0};

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::aead::GcmParams;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, ObjectHandle};
use cryptoki::session::Session;
use std::sync::Mutex;

static LOCK: Mutex<()> = Mutex::new(());

/// libopencf.so over the software token alone, initialized.
fn load(tag: &str) -> Pkcs11 {
    load_with(tag, "")
}

/// [`load`] with `extra` lines in the software token's section of the configuration.
fn load_with(tag: &str, extra: &str) -> Pkcs11 {
    let dir = fresh_dir(&format!("opstate-{tag}"));
    let conf = dir.join("opencf.toml");
    std::fs::write(
        &conf,
        provider("softtoken", &release("libopencf_softtoken.so")) + extra,
    )
    .unwrap();
    std::env::set_var("OPENCF_CONF", &conf);
    std::env::set_var("OPENCF_SOFTTOKEN_DIR", &dir);
    std::env::remove_var("OPENCF_METASLOT_ENABLED");
    std::env::remove_var("OPENCF_METASLOT_KEYSTORE");
    let p = Pkcs11::new(framework_lib()).expect("load libopencf.so");
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .expect("C_Initialize");
    p
}

fn slot0_session(p: &Pkcs11) -> Session {
    p.open_rw_session(slot0(p)).unwrap()
}

/// A session AES-128 key with a known value.
fn aes_key(s: &Session) -> ObjectHandle {
    s.create_object(&[
        Attribute::Class(cryptoki::object::ObjectClass::SECRET_KEY),
        Attribute::KeyType(cryptoki::object::KeyType::AES),
        Attribute::Value(b"0123456789abcdef".to_vec()),
        Attribute::Private(false),
        Attribute::Encrypt(true),
        Attribute::Decrypt(true),
    ])
    .unwrap()
}

/// AES-GCM with a 12-byte IV, AAD "aad" and a 16-byte tag.
fn gcm(iv: &mut [u8; 12]) -> Mechanism<'_> {
    Mechanism::AesGcm(GcmParams::new(iv, b"aad", 128.into()).unwrap())
}

/// The same AES-GCM as [`gcm`], as `opencf_abi` passes it.
fn raw_gcm(iv: &[u8; 12]) -> opencf_abi::Mechanism {
    opencf_abi::Mechanism {
        mechanism: opencf_abi::sys::CKM_AES_GCM,
        param: opencf_abi::MechParam::Gcm {
            iv: iv.to_vec(),
            iv_bits: 96,
            aad: b"aad".to_vec(),
            tag_bits: 128,
        },
    }
}

/// Slot 0 loaded (tag `tag`), a session with a key, and the same library's function list
/// (`opencf_abi::provider::Provider` over the library `cryptoki` has initialized) for the calls
/// `cryptoki` cannot make.
fn raw_setup(
    tag: &str,
) -> (
    Pkcs11,
    Session,
    ObjectHandle,
    opencf_abi::provider::Provider,
) {
    let p = load(tag);
    let s = slot0_session(&p);
    let key = aes_key(&s);
    let m = opencf_abi::provider::Provider::load(&framework_lib()).unwrap();
    (p, s, key, m)
}

fn rv(e: Error) -> RvError {
    match e {
        Error::Pkcs11(rv, _) => rv,
        other => panic!("not a PKCS#11 error: {other}"),
    }
}

#[test]
fn slot0_keeps_the_rules_of_an_active_operation() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let p = load("rules");
    let s = slot0_session(&p);
    let key = aes_key(&s);
    let data = b"sixteen byte msg and then some more";

    // The first call is routed; the next ones take the session's direct binding. Same IV,
    // same key: the same ciphertext every time, and it decrypts.
    let mut iv = [9u8; 12];
    let first = s.encrypt(&gcm(&mut iv), key, data).unwrap();
    assert_eq!(first.len(), data.len() + 16);
    for _ in 0..5 {
        assert_eq!(s.encrypt(&gcm(&mut iv), key, data).unwrap(), first);
    }
    for _ in 0..3 {
        assert_eq!(s.decrypt(&gcm(&mut iv), key, &first).unwrap(), data);
    }

    // An init makes the operation active: a second init is refused, and the operation goes on
    // with the multi-part calls.
    s.encrypt_init(&gcm(&mut iv), key).unwrap();
    assert_eq!(
        rv(s.encrypt_init(&gcm(&mut iv), key).unwrap_err()),
        RvError::OperationActive
    );
    let mut multi = s.encrypt_update(&data[..10]).unwrap();
    multi.extend(s.encrypt_update(&data[10..]).unwrap());
    multi.extend(s.encrypt_final().unwrap());
    assert_eq!(multi, first, "a single-part init, continued in parts");
    assert_eq!(
        rv(s.encrypt_update(data).unwrap_err()),
        RvError::OperationNotInitialized
    );

    // Both kinds active at once.
    s.encrypt_init(&gcm(&mut iv), key).unwrap();
    s.decrypt_init(&gcm(&mut iv), key).unwrap();
    let mut plain = s.decrypt_update(&first).unwrap();
    plain.extend(s.decrypt_final().unwrap());
    assert_eq!(plain, data);
    let mut again = s.encrypt_update(data).unwrap();
    again.extend(s.encrypt_final().unwrap());
    assert_eq!(again, first);

    // A one-shot and a multi-part digest agree, and a second digest init is refused.
    let sha = Mechanism::Sha256;
    let d1 = s.digest(&sha, data).unwrap();
    let d2 = s.digest(&sha, data).unwrap();
    assert_eq!(d1, d2);
    s.digest_init(&sha).unwrap();
    assert_eq!(
        rv(s.digest_init(&sha).unwrap_err()),
        RvError::OperationActive
    );
    s.digest_update(&data[..7]).unwrap();
    s.digest_update(&data[7..]).unwrap();
    assert_eq!(s.digest_final().unwrap(), d1);

    // C_DigestKey with a handle that names no object (any more): refused, and the digest goes
    // on, as in the software token alone (the metaslot once ended its half only, and the
    // session then refused every digest: CKR_OPERATION_ACTIVE at init, NOT_INITIALIZED at
    // every other call).
    let nothing = aes_key(&s);
    s.destroy_object(nothing).unwrap();
    s.digest_init(&sha).unwrap();
    s.digest_update(&data[..7]).unwrap();
    assert_eq!(
        rv(s.digest_key(nothing).unwrap_err()),
        RvError::KeyHandleInvalid
    );
    s.digest_update(&data[7..]).unwrap();
    assert_eq!(
        s.digest_final().unwrap(),
        d1,
        "the digest went on after the error"
    );
    s.digest_init(&sha).unwrap();
    s.digest_key(key).unwrap();
    let keyed = s.digest_final().unwrap();
    assert_eq!(
        keyed,
        s.digest(&sha, b"0123456789abcdef").unwrap(),
        "the key's value"
    );

    // A session closed with an operation active: a new session starts clean.
    s.encrypt_init(&gcm(&mut iv), key).unwrap();
    drop(s);
    let s = slot0_session(&p);
    let key = aes_key(&s);
    assert_eq!(s.encrypt(&gcm(&mut iv), key, data).unwrap(), first);
    assert_eq!(s.encrypt(&gcm(&mut iv), key, data).unwrap(), first);
    drop(s);
    p.finalize().unwrap();
}

/// A size query (NULL output) and a buffer too small leave the operation active; the call
/// with room ends it. Through the module's function list, as a C caller makes them.
#[test]
fn slot0_size_query_and_short_buffer() {
    use opencf_abi::sys::*;
    use opencf_abi::OutBuf;
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let data = b"sixteen byte msg";
    let mut iv = [1u8; 12];
    let (p, s, key, m) = raw_setup("query");
    let reference = s.encrypt(&gcm(&mut iv), key, data).unwrap();
    let (h, k) = (s.handle(), key.handle());
    let mech = raw_gcm(&iv);
    for round in 0..3 {
        m.encrypt_init(h, &mech, k).unwrap();
        let mut q = OutBuf::new(None);
        m.encrypt(h, data, &mut q).unwrap();
        assert_eq!(q.len(), reference.len(), "size query, round {round}");
        let mut small = [0u8; 4];
        let mut o = OutBuf::new(Some(&mut small));
        assert_eq!(m.encrypt(h, data, &mut o), Err(CKR_BUFFER_TOO_SMALL));
        let mut out = vec![0u8; reference.len()];
        let mut o = OutBuf::new(Some(&mut out));
        m.encrypt(h, data, &mut o).unwrap();
        assert_eq!(o.len(), reference.len());
        assert_eq!(out, reference, "round {round}");
        // Ended: a further call has no operation.
        let mut o = OutBuf::new(Some(&mut out));
        assert_eq!(
            m.encrypt(h, data, &mut o),
            Err(CKR_OPERATION_NOT_INITIALIZED)
        );
    }
    drop((m, s));
    p.finalize().unwrap();
}

/// One slot-0 session used from four threads at once, against the rules: every call answers
/// with a result or a PKCS#11 error; every result that comes back is correct.
#[test]
fn slot0_survives_one_session_shared_by_threads() {
    use opencf_abi::sys::*;
    use opencf_abi::OutBuf;
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let data = b"shared session!!";
    let mut iv = [3u8; 12];
    let (p, s, key, m) = raw_setup("shared");
    let reference = s.encrypt(&gcm(&mut iv), key, data).unwrap();
    let (h, k) = (s.handle(), key.handle());
    let mech = raw_gcm(&iv);
    let allowed = [
        CKR_OPERATION_ACTIVE,
        CKR_OPERATION_NOT_INITIALIZED,
        CKR_BUFFER_TOO_SMALL,
    ];
    let (ok, refused) = std::thread::scope(|t| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                t.spawn(|| {
                    let (mut ok, mut refused) = (0usize, 0usize);
                    for _ in 0..2000 {
                        let mut out = vec![0u8; reference.len()];
                        let r = m.encrypt_init(h, &mech, k).and_then(|()| {
                            let mut o = OutBuf::new(Some(&mut out));
                            m.encrypt(h, data, &mut o).map(|()| o.len())
                        });
                        match r {
                            Ok(n) => {
                                assert_eq!(&out[..n], &reference[..]);
                                ok += 1;
                            }
                            Err(rv) => {
                                assert!(allowed.contains(&rv), "unexpected {rv:#x}");
                                refused += 1;
                            }
                        }
                    }
                    (ok, refused)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    assert_eq!(ok + refused, 8000);
    assert!(ok > 0, "no call succeeded");
    // Whatever the threads left active ends with a call that has room; then the session
    // works as before.
    let mut out = vec![0u8; reference.len()];
    let _ = m.encrypt(h, data, &mut OutBuf::new(Some(&mut out)));
    assert_eq!(s.encrypt(&gcm(&mut iv), key, data).unwrap(), reference);
    drop((m, s));
    p.finalize().unwrap();
}

/// Runs a two-call output function with a buffer of `cap` bytes; the bytes written.
fn out_of(
    cap: usize,
    f: impl FnOnce(&mut opencf_abi::OutBuf) -> opencf_abi::CkResult<()>,
) -> opencf_abi::CkResult<Vec<u8>> {
    let mut buf = vec![0u8; cap];
    let mut o = opencf_abi::OutBuf::new(Some(&mut buf));
    f(&mut o)?;
    let n = o.len();
    buf.truncate(n);
    Ok(buf)
}

/// The saved state of a digest through slot 0: restored in another session it goes on where
/// it stopped; restored in the same session it replaces the digest under way; a state that is
/// not one slot 0 saved, or was damaged, is `CKR_SAVED_STATE_INVALID`; with another operation
/// active, or a digest the token cannot save (SHA-3), it is `CKR_STATE_UNSAVEABLE`.
#[test]
fn slot0_saves_and_restores_a_digest() {
    use opencf_abi::sys::*;
    use opencf_abi::{MechParam, OutBuf};
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let data = b"a message digested in two sessions";
    let (p, s, key, m) = raw_setup("state");
    let s2 = slot0_session(&p);
    let (h, h2) = (s.handle(), s2.handle());
    let whole = s.digest(&Mechanism::Sha256, data).unwrap();
    let sha = |t| opencf_abi::Mechanism::new(t);
    let state_of = |h| {
        let mut q = OutBuf::new(None);
        m.get_operation_state(h, &mut q)?;
        let n = q.len();
        let st = out_of(n, |o| m.get_operation_state(h, o))?;
        assert_eq!(st.len(), n, "the size query's length");
        Ok::<_, CK_RV>(st)
    };

    assert_eq!(state_of(h), Err(CKR_OPERATION_NOT_INITIALIZED));
    m.digest_init(h, &sha(CKM_SHA256)).unwrap();
    m.digest_update(h, &data[..9]).unwrap();
    let state = state_of(h).unwrap();
    assert_eq!(&state[..4], b"OCFM");
    assert_eq!(
        &state[6..6 + state[5] as usize],
        b"softtoken",
        "the provider's name"
    );
    let mut small = [0u8; 8];
    assert_eq!(
        m.get_operation_state(h, &mut OutBuf::new(Some(&mut small))),
        Err(CKR_BUFFER_TOO_SMALL)
    );

    // Another session goes on from the saved state; the first one too, on its own.
    m.set_operation_state(h2, &state, 0, 0).unwrap();
    m.digest_update(h2, &data[9..]).unwrap();
    assert_eq!(out_of(64, |o| m.digest_final(h2, o)).unwrap(), whole);
    m.digest_update(h, &data[9..]).unwrap();
    assert_eq!(out_of(64, |o| m.digest_final(h, o)).unwrap(), whole);

    // Restored over a digest under way: it replaces it. C_Digest may not follow (a digest
    // under way), as after C_DigestUpdate.
    m.digest_init(h, &sha(CKM_SHA512)).unwrap();
    m.digest_update(h, b"something else").unwrap();
    m.set_operation_state(h, &state, 0, 0).unwrap();
    m.digest_update(h, &data[9..]).unwrap();
    assert_eq!(out_of(64, |o| m.digest_final(h, o)).unwrap(), whole);
    m.set_operation_state(h, &state, 0, 0).unwrap();
    assert_eq!(
        out_of(64, |o| m.digest(h, &data[9..], o)),
        Err(CKR_OPERATION_ACTIVE)
    );

    // Damaged or foreign states; the session keeps no digest from them.
    let mut flipped = state.clone();
    flipped[0] ^= 1;
    let mut renamed = state.clone();
    renamed[6] = b'S';
    let token_only = state[6 + state[5] as usize + 8..].to_vec();
    for (what, bad) in [
        ("empty", Vec::new()),
        ("truncated", state[..state.len() - 3].to_vec()),
        ("header only", state[..6].to_vec()),
        ("magic", flipped),
        ("provider name", renamed),
        ("the token's own state", token_only),
    ] {
        assert_eq!(
            m.set_operation_state(h2, &bad, 0, 0),
            Err(CKR_SAVED_STATE_INVALID),
            "{what}"
        );
        assert_eq!(
            m.digest_update(h2, b"x"),
            Err(CKR_OPERATION_NOT_INITIALIZED),
            "{what}"
        );
    }

    // Not saveable: another operation active, or SHA-3.
    m.digest_init(h2, &sha(CKM_SHA256)).unwrap();
    let cbc = opencf_abi::Mechanism {
        mechanism: CKM_AES_CBC,
        param: MechParam::Bytes(vec![0; 16]),
    };
    m.encrypt_init(h2, &cbc, key.handle()).unwrap();
    assert_eq!(state_of(h2), Err(CKR_STATE_UNSAVEABLE));
    out_of(64, |o| m.encrypt(h2, &[0; 16], o)).unwrap();
    assert!(state_of(h2).is_ok(), "the digest alone again");
    out_of(64, |o| m.digest_final(h2, o)).unwrap();
    m.digest_init(h2, &sha(CKM_SHA3_256)).unwrap();
    assert_eq!(state_of(h2), Err(CKR_STATE_UNSAVEABLE));
    drop((m, s, s2));
    p.finalize().unwrap();
}

/// `C_DigestEncryptUpdate`, `C_DecryptDigestUpdate`, `C_SignEncryptUpdate` and
/// `C_DecryptVerifyUpdate` through slot 0 give what the two operations give one after the
/// other; a size query and a buffer too small leave both operations as they were; without both
/// operations active the call is `CKR_OPERATION_NOT_INITIALIZED`.
#[test]
fn slot0_dual_function_updates() {
    use cryptoki::object::{KeyType, ObjectClass};
    use opencf_abi::sys::*;
    use opencf_abi::{MechParam, OutBuf};
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let data = b"thirty-two bytes of plain text!!";
    let iv = [7u8; 16];
    let (p, s, key, m) = raw_setup("dual");
    let mac_key = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::GENERIC_SECRET),
            Attribute::Value(vec![5; 32]),
            Attribute::Private(false),
            Attribute::Sign(true),
            Attribute::Verify(true),
        ])
        .unwrap();
    let cipher = s.encrypt(&Mechanism::AesCbc(iv), key, data).unwrap();
    let digest = s.digest(&Mechanism::Sha256, data).unwrap();
    let mac = s.sign(&Mechanism::Sha256Hmac, mac_key, data).unwrap();
    let (h, k, mk) = (s.handle(), key.handle(), mac_key.handle());
    let cbc = opencf_abi::Mechanism {
        mechanism: CKM_AES_CBC,
        param: MechParam::Bytes(iv.to_vec()),
    };
    let sha = opencf_abi::Mechanism::new(CKM_SHA256);
    let hmac = opencf_abi::Mechanism::new(CKM_SHA256_HMAC);

    // Neither, then only one of the two operations.
    assert_eq!(
        out_of(64, |o| m.digest_encrypt_update(h, data, o)),
        Err(CKR_OPERATION_NOT_INITIALIZED)
    );
    m.digest_init(h, &sha).unwrap();
    assert_eq!(
        out_of(64, |o| m.digest_encrypt_update(h, data, o)),
        Err(CKR_OPERATION_NOT_INITIALIZED)
    );

    // Digest and encrypt, in two parts, after a size query and a buffer too small.
    m.encrypt_init(h, &cbc, k).unwrap();
    let mut q = OutBuf::new(None);
    m.digest_encrypt_update(h, &data[..16], &mut q).unwrap();
    assert_eq!(q.len(), 16, "size query");
    assert_eq!(
        out_of(4, |o| m.digest_encrypt_update(h, &data[..16], o)),
        Err(CKR_BUFFER_TOO_SMALL)
    );
    let mut got = out_of(64, |o| m.digest_encrypt_update(h, &data[..16], o)).unwrap();
    got.extend(out_of(64, |o| m.digest_encrypt_update(h, &data[16..], o)).unwrap());
    got.extend(out_of(64, |o| m.encrypt_final(h, o)).unwrap());
    assert_eq!(got, cipher, "C_DigestEncryptUpdate: the ciphertext");
    assert_eq!(
        out_of(64, |o| m.digest_final(h, o)).unwrap(),
        digest,
        "C_DigestEncryptUpdate: the digest of the plaintext"
    );

    // Decrypt and digest.
    m.decrypt_init(h, &cbc, k).unwrap();
    m.digest_init(h, &sha).unwrap();
    let mut plain = out_of(64, |o| m.decrypt_digest_update(h, &cipher[..20], o)).unwrap();
    plain.extend(out_of(64, |o| m.decrypt_digest_update(h, &cipher[20..], o)).unwrap());
    plain.extend(out_of(64, |o| m.decrypt_final(h, o)).unwrap());
    assert_eq!(plain, data);
    assert_eq!(out_of(64, |o| m.digest_final(h, o)).unwrap(), digest);

    // Sign and encrypt.
    m.sign_init(h, &hmac, mk).unwrap();
    m.encrypt_init(h, &cbc, k).unwrap();
    let mut got = out_of(64, |o| m.sign_encrypt_update(h, &data[..5], o)).unwrap();
    got.extend(out_of(64, |o| m.sign_encrypt_update(h, &data[5..], o)).unwrap());
    got.extend(out_of(64, |o| m.encrypt_final(h, o)).unwrap());
    assert_eq!(got, cipher);
    assert_eq!(out_of(64, |o| m.sign_final(h, o)).unwrap(), mac);

    // Decrypt and verify; a wrong MAC is refused.
    for (good, tag) in [(true, mac.clone()), (false, vec![0u8; 32])] {
        m.decrypt_init(h, &cbc, k).unwrap();
        m.verify_init(h, &hmac, mk).unwrap();
        let mut plain = out_of(64, |o| m.decrypt_verify_update(h, &cipher, o)).unwrap();
        plain.extend(out_of(64, |o| m.decrypt_final(h, o)).unwrap());
        assert_eq!(plain, data);
        let r = m.verify_final(h, &tag);
        assert_eq!(r.is_ok(), good, "{r:?}");
    }
    drop((m, s));
    p.finalize().unwrap();
}

/// Every damaged form of a saved state — each byte changed, each shorter length, a byte more
/// — is refused with `CKR_SAVED_STATE_INVALID` or taken as a state that works (a changed byte
/// of the hash's running value is a valid state too): never another error, never a crash.
#[test]
fn slot0_refuses_or_takes_every_damaged_state() {
    use opencf_abi::sys::*;
    use opencf_abi::OutBuf;
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (p, s, _key, m) = raw_setup("damaged");
    let h = s.handle();
    for mech in [CKM_SHA_1, CKM_SHA256, CKM_SHA512] {
        m.digest_init(h, &opencf_abi::Mechanism::new(mech)).unwrap();
        m.digest_update(h, b"some data before the state is saved")
            .unwrap();
        let state = out_of(1024, |o| m.get_operation_state(h, o)).unwrap();
        out_of(64, |o| m.digest_final(h, o)).unwrap();
        let (mut taken, mut refused) = (0, 0);
        let mut check = |bad: &[u8], what: &str| match m.set_operation_state(h, bad, 0, 0) {
            Ok(()) => {
                taken += 1;
                m.digest_update(h, b"more").unwrap();
                let mut d = [0u8; 64];
                m.digest_final(h, &mut OutBuf::new(Some(&mut d)))
                    .unwrap_or_else(|e| panic!("{what}: C_DigestFinal {e:#x}"));
            }
            Err(CKR_SAVED_STATE_INVALID) => refused += 1,
            Err(e) => panic!("{what}: {e:#x}"),
        };
        for i in 0..state.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = state.clone();
                bad[i] ^= bit;
                check(&bad, &format!("{mech:#x}: byte {i} ^ {bit:#x}"));
            }
        }
        for n in 0..state.len() {
            check(&state[..n], &format!("{mech:#x}: {n} bytes"));
        }
        let mut longer = state.clone();
        longer.push(0);
        check(&longer, &format!("{mech:#x}: a byte more"));
        // Every change to the header or a length is refused; the running hash value is not
        // checked (it is any value).
        assert!(refused > state.len(), "{mech:#x}: {refused} refused");
        assert!(taken > 0, "{mech:#x}: no changed state was taken");
    }
    drop((m, s));
    p.finalize().unwrap();
}

/// A saved state names its digest twice: in slot 0's header and in the software token's own
/// part. With SHA-1 disabled on the software token, a state whose header says SHA-256 and
/// whose token part holds a SHA-1 digest (made by the software token loaded on its own, where
/// no policy applies) is `CKR_SAVED_STATE_INVALID` on slot 0, and the token part alone on the
/// token's own slot: the policy's SHA-1 never runs under another name. The states of allowed
/// digests go back as before.
#[test]
fn a_restored_state_runs_only_what_the_policy_allows() {
    use opencf_abi::sys::{
        CKF_SERIAL_SESSION, CKM_SHA256, CKM_SHA_1, CKR_MECHANISM_INVALID,
        CKR_OPERATION_NOT_INITIALIZED, CKR_SAVED_STATE_INVALID, CK_ULONG,
    };
    use opencf_abi::OutBuf;
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let p = load_with("policy", "disabled = [\"CKM_SHA_1\"]\n");
    let m = opencf_abi::provider::Provider::load(&framework_lib()).unwrap();
    let sha = opencf_abi::Mechanism::new;
    let state_of = |m: &opencf_abi::provider::Provider, h| {
        let st = out_of(1024, |o| m.get_operation_state(h, o)).unwrap();
        let _ = m.digest_final(h, &mut OutBuf::new(Some(&mut [0u8; 64])));
        st
    };

    // SHA-1 and SHA-256 states of the software token loaded on its own.
    let alone = opencf_abi::provider::Provider::load(&release("libopencf_softtoken.so")).unwrap();
    alone.initialize().unwrap();
    let slot = alone.get_slot_list(true).unwrap()[0];
    let ha = alone.open_session(slot, CKF_SERIAL_SESSION).unwrap();
    let token_state = |t| {
        alone.digest_init(ha, &sha(t)).unwrap();
        alone.digest_update(ha, b"a").unwrap();
        state_of(&alone, ha)
    };
    let (sha1_part, sha256_part) = (token_state(CKM_SHA_1), token_state(CKM_SHA256));

    // Slot 0: a SHA-256 state, its header then put before the SHA-1 part.
    let s = slot0_session(&p);
    let h = s.handle();
    assert_eq!(
        m.digest_init(h, &sha(CKM_SHA_1)),
        Err(CKR_MECHANISM_INVALID)
    );
    m.digest_init(h, &sha(CKM_SHA256)).unwrap();
    m.digest_update(h, b"a").unwrap();
    let state = state_of(&m, h);
    let header = 6 + state[5] as usize + std::mem::size_of::<CK_ULONG>();
    assert_eq!(
        &state[header..header + 4],
        b"OCFD",
        "the token's part follows the header"
    );
    let forged = [&state[..header], &sha1_part[..]].concat();
    // `bad` is refused and leaves no digest; `good` goes on to SHA-256("abc").
    let refused_then_goes_on = |h, bad: &[u8], good: &[u8], what: &str| {
        assert_eq!(
            m.set_operation_state(h, bad, 0, 0),
            Err(CKR_SAVED_STATE_INVALID),
            "{what}"
        );
        assert_eq!(
            m.digest_update(h, b"bc"),
            Err(CKR_OPERATION_NOT_INITIALIZED),
            "{what}"
        );
        m.set_operation_state(h, good, 0, 0).unwrap();
        m.digest_update(h, b"bc").unwrap();
        assert_eq!(
            hex(&out_of(64, |o| m.digest_final(h, o)).unwrap()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "{what}: the allowed state goes on"
        );
    };
    refused_then_goes_on(
        h,
        &forged,
        &state,
        "slot 0: a SHA-1 part under a SHA-256 header",
    );

    // The software token's own slot in libopencf.so: the token's part alone.
    let own = p
        .get_slots_with_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == "OpenCF Softtoken")
        .expect("the software token's own slot");
    let so = p.open_ro_session(own).unwrap();
    refused_then_goes_on(
        so.handle(),
        &sha1_part,
        &sha256_part,
        "the token's own slot: a SHA-1 state, SHA-1 disabled there",
    );
    drop((so, s, m));
    alone.close_session(ha).unwrap();
    alone.finalize().unwrap();
    p.finalize().unwrap();
}
