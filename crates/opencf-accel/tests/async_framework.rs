//! Asynchronous sessions through the framework, `libopencf.so` over [accel, softtoken]: on
//! the metaslot (slot 0), whose sessions in the accelerator are then asynchronous too, and on
//! the accelerator's own slot (passed through). One thread keeps many signatures in flight
//! and collects them with `C_AsyncComplete`; every signature is checked with OpenSSL.
//!
//! Build first: `cargo build --release -p opencf-accel -p opencf -p opencf-softtoken`.

// Of the shared helpers, `raw` serves here.
#[allow(dead_code)]
mod common;

use common::raw::{complete_all, create_rsa_key, engine_counters, framework, verifies};
use opencf_abi::provider::{AsyncOut, Provider};
use opencf_abi::sys::*;
use opencf_abi::Mechanism;
use openssl::rsa::Rsa;

/// Signs `n` messages on `n` asynchronous sessions of `slot` with `key` (created in the first
/// session), collects the pending ones, checks every signature; returns how many pended.
fn sign_many(p: &Provider, slot: CK_SLOT_ID, n: usize) -> usize {
    let rsa = Rsa::generate(2048).unwrap();
    let open = || {
        p.open_session(slot, CKF_SERIAL_SESSION | CKF_ASYNC_SESSION)
            .expect("C_OpenSession with CKF_ASYNC_SESSION")
    };
    let sessions: Vec<_> = (0..n).map(|_| open()).collect();
    let key = create_rsa_key(p, sessions[0], &rsa);
    let mut pending: Vec<(usize, AsyncOut)> = Vec::new();
    for (i, &s) in sessions.iter().enumerate() {
        p.sign_init(s, &Mechanism::new(CKM_SHA256_RSA_PKCS), key)
            .unwrap();
        let msg = format!("message {i}");
        match p.sign_async(s, msg.as_bytes(), 256).expect("C_Sign") {
            Ok(sig) => assert!(verifies(&rsa, msg.as_bytes(), &sig)),
            Err(out) => pending.push((i, out)),
        }
    }
    let pended = pending.len();
    complete_all(p, &mut pending, |i, sig| {
        verifies(&rsa, format!("message {i}").as_bytes(), sig)
    });
    for s in sessions {
        p.close_session(s).unwrap();
    }
    pended
}

/// Slot 0 with a `C_Sign` pending in the accelerator: the signature is still the session's
/// active operation (`C_SignInit` answers `CKR_OPERATION_ACTIVE`) until `C_SessionCancel`
/// ends it where it runs; after that `C_AsyncComplete` has nothing to report and a new
/// signature starts.
fn cancel_a_pending_signature(p: &Provider, n: usize) {
    let rsa = Rsa::generate(2048).unwrap();
    let open = || {
        p.open_session(0, CKF_SERIAL_SESSION | CKF_ASYNC_SESSION)
            .unwrap()
    };
    let sessions: Vec<_> = (0..n).map(|_| open()).collect();
    let key = create_rsa_key(p, sessions[0], &rsa);
    let sha256 = Mechanism::new(CKM_SHA256_RSA_PKCS);
    let mut pending: Vec<(usize, AsyncOut)> = Vec::new();
    for (i, &s) in sessions.iter().enumerate() {
        p.sign_init(s, &sha256, key).unwrap();
        if let Err(out) = p.sign_async(s, b"to be cancelled", 256).unwrap() {
            pending.push((i, out));
        }
    }
    let (i, _cancelled) = pending.pop().expect("a signature pended on slot 0");
    let s = sessions[i];
    assert_eq!(
        p.sign_init(s, &sha256, key),
        Err(CKR_OPERATION_ACTIVE),
        "the pending signature is the session's active one"
    );
    p.session_cancel(s, CKF_SIGN).unwrap();
    assert_eq!(
        p.async_complete(s, "C_Sign"),
        Err(CKR_OPERATION_NOT_INITIALIZED),
        "nothing left to complete"
    );
    p.sign_init(s, &sha256, key)
        .expect("a new signature after the cancel");
    p.session_cancel(s, CKF_SIGN).unwrap();
    complete_all(p, &mut pending, |_, sig| {
        verifies(&rsa, b"to be cancelled", sig)
    });
    for s in sessions {
        p.close_session(s).unwrap();
    }
}

#[test]
fn asynchronous_sessions_through_the_framework() {
    let (p, stat) = framework("accel-async", "");
    if opencf_accel::engine::provider_engine().is_none() {
        eprintln!("SKIP: no RSA engine on this CPU; asynchronous sessions not exercised");
        return;
    }
    let meta = p.get_token_info(0).unwrap();
    assert_ne!(
        meta.flags & CKF_ASYNC_SESSION_SUPPORTED,
        0,
        "the metaslot offers asynchronous sessions when a provider does"
    );
    let n = opencf_accel::sched::batch_threshold(2048) + 8;
    let pended = sign_many(&p, 0, n);
    // The first request measured the engine against OpenSSL on this CPU.
    let [break_even] = engine_counters(&stat, ["rsa_break_even_2048"]);
    assert!(break_even > 0, "RSA-2048 measured");
    if break_even >= 400 {
        eprintln!(
            "SKIP: the engine never wins for RSA-2048 on this CPU (break-even {break_even}/100 \
             requests per pass); every signature answered at once"
        );
        assert_eq!(pended, 0);
        return;
    }
    assert!(pended >= 8, "slot 0: {pended} of {n} pended");
    let accel = (p.get_slot_list(true).unwrap().into_iter())
        .find(|&s| {
            let l = p.get_token_info(s).unwrap().label;
            String::from_utf8_lossy(&l).trim_end() == opencf_accel::LABEL
        })
        .expect("the accelerator's own slot");
    let pended_here = sign_many(&p, accel, n);
    assert!(
        pended_here >= 8,
        "the accelerator's slot: {pended_here} of {n} pended"
    );
    // Every pending signature ran on the engine: two halves each, at most eight a pass, none
    // failed its check.
    let [passes, halves, faults] =
        engine_counters(&stat, ["rsa_passes", "rsa_halves", "rsa_faults"]);
    eprintln!("accel: {passes} passes of {halves} halves, {faults} faults");
    assert_eq!(halves, 2 * (pended + pended_here) as u64);
    assert!(
        passes >= halves.div_ceil(8) && passes <= halves,
        "{passes} passes"
    );
    assert_eq!(faults, 0);
    cancel_a_pending_signature(&p, n);
    // Nothing pending: the framework's answers.
    let s = p
        .open_session(0, CKF_SERIAL_SESSION | CKF_ASYNC_SESSION)
        .unwrap();
    assert_eq!(
        p.async_complete(s, "C_Sign"),
        Err(CKR_OPERATION_NOT_INITIALIZED)
    );
    assert_eq!(
        p.async_get_id(s, "C_Sign"),
        Err(CKR_OPERATION_NOT_INITIALIZED)
    );
    assert_eq!(p.async_join(s, "C_Sign", 1), Err(CKR_SAVED_STATE_INVALID));
    p.close_session(s).unwrap();
    p.finalize().unwrap();
}
