//! Asynchronous sessions (PKCS#11 3.2, `CKF_ASYNC_SESSION`) of `libopencf_accel.so`, through
//! its C ABI (loaded as the framework loads providers, `opencf_abi::provider::Provider`):
//! one thread keeps many signatures and decryptions in flight, one per session, and collects
//! them with `C_AsyncComplete`; every result is checked with OpenSSL. Also the answers of
//! `C_AsyncComplete`, `C_AsyncGetID` and `C_AsyncJoin` around a pending call, and the fault
//! switch: a pending operation whose engine result fails its check still completes with a
//! correct result.
//!
//! Build first: `cargo build --release -p opencf-accel` (cargo test builds the library too).

// Of the shared helpers, `library()` and `raw` serve here (the rest drive the module through
// `cryptoki`).
#[allow(dead_code)]
mod common;

use common::raw::{create_rsa_key, engine_here, verifies};
use opencf_abi::provider::AsyncOut;
use opencf_abi::sys::*;
use opencf_abi::{MechParam, Mechanism};
use openssl::pkey::{PKey, Private};
use openssl::rsa::{Padding, Rsa};
use std::time::{Duration, Instant};

use common::raw::{lock, provider as module, provider_slot as slot};

fn async_session() -> CK_SESSION_HANDLE {
    (module().open_session(slot(), CKF_SERIAL_SESSION | CKF_ASYNC_SESSION))
        .expect("C_OpenSession with CKF_ASYNC_SESSION")
}

/// A key pair in OpenSSL and the same private key in a new session of the module.
fn key() -> (Rsa<Private>, CK_SESSION_HANDLE, CK_OBJECT_HANDLE) {
    let rsa = Rsa::generate(2048).unwrap();
    let owner = async_session();
    let h = create_rsa_key(module(), owner, &rsa);
    (rsa, owner, h)
}

/// Polls every pending call until all are done (10 s at most); returns their outputs (or
/// errors) by index.
fn collect(pending: &mut [(usize, AsyncOut)]) -> Vec<(usize, Result<Vec<u8>, CK_RV>)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut done = Vec::new();
    let mut left: Vec<usize> = (0..pending.len()).collect();
    while !left.is_empty() {
        assert!(Instant::now() < deadline, "pending calls never completed");
        left.retain(|&k| {
            let (i, out) = &mut pending[k];
            match module().async_complete_out(out) {
                Ok(None) => true,
                Ok(Some(v)) => {
                    done.push((*i, Ok(v)));
                    false
                }
                Err(rv) => {
                    done.push((*i, Err(rv)));
                    false
                }
            }
        });
        std::thread::sleep(Duration::from_micros(50));
    }
    done
}

/// `C_SignInit` and `C_Sign` of `msg(i)` on each session `i` with `h`: the pending calls (by
/// index), after checking those answered at once.
fn sign_each(
    sessions: &[CK_SESSION_HANDLE],
    key: &Rsa<Private>,
    h: CK_OBJECT_HANDLE,
    msg: impl Fn(usize) -> Vec<u8>,
) -> Vec<(usize, AsyncOut)> {
    let p = module();
    let mut pending = Vec::new();
    for (i, &s) in sessions.iter().enumerate() {
        p.sign_init(s, &Mechanism::new(CKM_SHA256_RSA_PKCS), h)
            .unwrap();
        match p.sign_async(s, &msg(i), 256).expect("C_Sign") {
            Ok(sig) => assert!(verifies(key, &msg(i), &sig), "signature {i} verifies"),
            Err(out) => pending.push((i, out)),
        }
    }
    pending
}

/// Collects `pending` signatures of `msg(i)` and checks each.
fn check_signatures(
    pending: &mut [(usize, AsyncOut)],
    key: &Rsa<Private>,
    msg: impl Fn(usize) -> Vec<u8>,
) {
    let n = pending.len();
    let done = collect(pending);
    assert_eq!(done.len(), n);
    for (i, r) in done {
        let sig = r.unwrap_or_else(|rv| panic!("signature {i}: {rv:#x}"));
        assert!(verifies(key, &msg(i), &sig), "signature {i} verifies");
    }
}

/// More sessions than the number in flight from which the scheduler batches synchronous
/// callers; asynchronous calls go to the engine whatever the number.
fn many() -> usize {
    opencf_accel::sched::batch_threshold(2048) + 8
}

#[test]
fn the_token_offers_asynchronous_sessions() {
    let _g = lock();
    let info = module().get_token_info(slot()).unwrap();
    assert_ne!(
        info.flags & CKF_ASYNC_SESSION_SUPPORTED,
        0,
        "CKF_ASYNC_SESSION_SUPPORTED"
    );
    let s = async_session();
    let p = module();
    assert_eq!(
        p.get_session_info(s).unwrap().flags,
        CKF_SERIAL_SESSION | CKF_ASYNC_SESSION,
        "C_GetSessionInfo says the session is asynchronous"
    );
    assert_eq!(
        p.async_complete(s, "C_Sign"),
        Err(CKR_OPERATION_NOT_INITIALIZED),
        "nothing pending"
    );
    assert_eq!(
        p.async_get_id(s, "C_Sign"),
        Err(CKR_OPERATION_NOT_INITIALIZED)
    );
    assert_eq!(p.async_join(s, "C_Sign", 7), Err(CKR_SAVED_STATE_INVALID));
    assert_eq!(
        p.async_complete(0xdead, "C_Sign"),
        Err(CKR_SESSION_HANDLE_INVALID)
    );
    p.close_session(s).unwrap();
}

#[test]
fn one_thread_keeps_many_signatures_in_flight() {
    let _g = lock();
    if !engine_here() {
        return;
    }
    let p = module();
    let (key, owner, h) = key();
    let n = many();
    let sessions: Vec<_> = (0..n).map(|_| async_session()).collect();
    let msg = |i: usize| format!("message {i}").into_bytes();
    let mut pending = sign_each(&sessions, &key, h, msg);
    assert_eq!(pending.len(), n, "every call answers CKR_PENDING");
    // While one is pending: its operation is still active, and it cannot outlive C_Finalize.
    let s0 = sessions[pending[0].0];
    assert_eq!(
        p.sign_init(s0, &Mechanism::new(CKM_SHA256_RSA_PKCS), h),
        Err(CKR_OPERATION_ACTIVE)
    );
    assert_eq!(p.async_get_id(s0, "C_Sign"), Err(CKR_STATE_UNSAVEABLE));
    assert_eq!(
        p.async_complete(s0, "C_Decrypt"),
        Err(CKR_OPERATION_NOT_INITIALIZED),
        "another function has nothing pending"
    );
    check_signatures(&mut pending, &key, msg);
    // Completed: nothing pending, and the session signs again.
    assert_eq!(
        p.async_complete(s0, "C_Sign"),
        Err(CKR_OPERATION_NOT_INITIALIZED)
    );
    p.sign_init(s0, &Mechanism::new(CKM_SHA256_RSA_PKCS), h)
        .unwrap();
    // A session closed with a call pending: the others are not disturbed.
    let mut pending = sign_each(&sessions[1..], &key, h, |_| b"m".to_vec());
    let closed = sessions[1];
    p.close_session(closed).unwrap();
    pending.retain(|(i, _)| *i != 0);
    check_signatures(&mut pending, &key, |_| b"m".to_vec());
    for s in sessions.into_iter().filter(|&s| s != closed) {
        p.close_session(s).unwrap();
    }
    p.close_session(owner).unwrap();
}

#[test]
fn asynchronous_decryption_and_a_faulty_engine() {
    let _g = lock();
    if !engine_here() {
        return;
    }
    let p = module();
    let (key, owner, h) = key();
    let oaep = Mechanism {
        mechanism: CKM_RSA_PKCS_OAEP,
        param: MechParam::RsaOaep {
            hash_alg: CKM_SHA256,
            mgf: CKG_MGF1_SHA256,
            source: CKZ_DATA_SPECIFIED,
            source_data: Vec::new(),
        },
    };
    let pkey = PKey::from_rsa(key.clone()).unwrap();
    let encrypt = |m: &[u8]| {
        let mut c = openssl::pkey_ctx::PkeyCtx::new(&pkey).unwrap();
        c.encrypt_init().unwrap();
        c.set_rsa_padding(Padding::PKCS1_OAEP).unwrap();
        c.set_rsa_oaep_md(openssl::md::Md::sha256()).unwrap();
        c.set_rsa_mgf1_md(openssl::md::Md::sha256()).unwrap();
        let mut out = Vec::new();
        c.encrypt_to_vec(m, &mut out).unwrap();
        out
    };
    let n = many();
    for fault in [false, true] {
        if fault {
            std::env::set_var("OPENCF_ACCEL_FAULT", "engine-error");
        }
        let sessions: Vec<_> = (0..n).map(|_| async_session()).collect();
        let plain = |i: usize| format!("secret {i}").into_bytes();
        let mut pending = Vec::new();
        for (i, &s) in sessions.iter().enumerate() {
            p.decrypt_init(s, &oaep, h).unwrap();
            match p
                .decrypt_async(s, &encrypt(&plain(i)), 256)
                .expect("C_Decrypt")
            {
                Ok(m) => panic!("decryption {i} answered at once: {m:?}"),
                Err(out) => pending.push((i, out)),
            }
        }
        for (i, r) in collect(&mut pending) {
            let m = r.unwrap_or_else(|rv| panic!("decryption {i} (fault {fault}): {rv:#x}"));
            assert_eq!(m, plain(i), "plaintext {i} (fault {fault})");
        }
        // A buffer too small for every plaintext: answered at once, never pending; with the
        // fault, that answer is the engine's error (on which the framework falls back).
        let s = sessions[0];
        p.decrypt_init(s, &oaep, h).unwrap();
        let small = p.decrypt_async(s, &encrypt(b"short"), 64);
        if fault {
            assert_eq!(small.err(), Some(CKR_DEVICE_ERROR), "answered at once");
        } else {
            assert_eq!(small.ok().and_then(|r| r.ok()), Some(b"short".to_vec()));
        }
        // Signatures, too, come out right from a faulty engine.
        let msg = |_: usize| b"signed while the engine fails".to_vec();
        let mut sigs = sign_each(&sessions, &key, h, msg);
        assert_eq!(sigs.len(), n, "every call answers CKR_PENDING");
        check_signatures(&mut sigs, &key, msg);
        std::env::remove_var("OPENCF_ACCEL_FAULT");
        for s in sessions {
            p.close_session(s).unwrap();
        }
    }
    p.close_session(owner).unwrap();
}

/// A session may have a signature and a decryption pending at once (one operation of each
/// kind, as PKCS#11 has it): both complete with the right output, and `C_SessionCancel` of
/// one kind drops that one only.
#[test]
fn a_signature_and_a_decryption_pending_in_one_session() {
    let _g = lock();
    if !engine_here() {
        return;
    }
    let p = module();
    let (key, owner, h) = key();
    let pkcs1 = Mechanism::new(CKM_RSA_PKCS);
    let pkey = PKey::from_rsa(key.clone()).unwrap();
    let encrypt = |m: &[u8]| {
        let mut c = openssl::pkey_ctx::PkeyCtx::new(&pkey).unwrap();
        c.encrypt_init().unwrap();
        c.set_rsa_padding(Padding::PKCS1).unwrap();
        let mut out = Vec::new();
        c.encrypt_to_vec(m, &mut out).unwrap();
        out
    };
    let msg = b"signed while a decryption is pending".to_vec();
    for cancel in [None, Some(CKF_DECRYPT), Some(CKF_SIGN)] {
        let s = async_session();
        p.sign_init(s, &Mechanism::new(CKM_SHA256_RSA_PKCS), h)
            .unwrap();
        let sig = p.sign_async(s, &msg, 256).expect("C_Sign");
        p.decrypt_init(s, &pkcs1, h).unwrap();
        let plain = p.decrypt_async(s, &encrypt(b"both at once"), 256);
        let (Err(sig), Err(plain)) = (sig, plain.expect("C_Decrypt")) else {
            panic!("an asynchronous session's calls answer CKR_PENDING");
        };
        let mut pending = vec![(0, sig), (1, plain)];
        if let Some(flag) = cancel {
            p.session_cancel(s, flag).unwrap();
            let gone = if flag == CKF_SIGN {
                "C_Sign"
            } else {
                "C_Decrypt"
            };
            assert_eq!(
                p.async_complete(s, gone),
                Err(CKR_OPERATION_NOT_INITIALIZED),
                "{gone} cancelled"
            );
            // The cancelled call's buffer stays with the module (its `AsyncOut` never frees
            // it); only the other one is collected.
            pending.retain(|(i, _)| (*i == 0) != (flag == CKF_SIGN));
        }
        for (i, r) in collect(&mut pending) {
            let out = r.unwrap_or_else(|rv| panic!("call {i} ({cancel:?}): {rv:#x}"));
            if i == 0 {
                assert!(verifies(&key, &msg, &out), "the signature ({cancel:?})");
            } else {
                assert_eq!(out, b"both at once", "the plaintext ({cancel:?})");
            }
        }
        p.close_session(s).unwrap();
    }
    p.close_session(owner).unwrap();
}
