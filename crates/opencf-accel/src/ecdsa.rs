//! `CKM_ECDSA` with P-256 keys: OpenSSL in the caller's thread for ordinary sessions, the
//! multi-buffer engine (`engine::p256`) for asynchronous ones.
//!
//! A blocking caller would have to hand its request to another thread and wait for a wakeup,
//! which costs more than OpenSSL's whole signature (docs/ACCEL.md, "ECDSA P-256"), so
//! ordinary sessions sign with OpenSSL here, as the software token does. In an asynchronous
//! session nobody waits: a `C_Sign` joins the requests gathered in [`Gather`] and answers
//! `CKR_PENDING`; the call that brings the eighth request runs the pass for all eight in its
//! own thread (and answers its own result at once), and a `C_AsyncComplete` that finds its
//! request still waiting runs a pass on the waiting requests (up to eight, oldest first).
//! There is no worker thread and no wakeup. A lane whose result fails the pass's check is
//! signed again with OpenSSL.

use crate::counters;
use crate::engine::p256::{self, EcJob, EcScalarKey};
use crate::engine::{Kind, LANES};
use crate::fault::{self, Fault};
use crate::mech::no_param;
use opencf_abi::sys::*;
use opencf_abi::{CkResult, Mechanism};
use openssl::bn::{BigNum, BigNumContext};
use openssl::ec::{EcKey, EcPoint};
use openssl::ecdsa::EcdsaSig;
use openssl::pkey::Private;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use zeroize::Zeroizing;

/// `CKA_EC_PARAMS` of P-256: the DER OID 1.2.840.10045.3.1.7.
pub const P256_OID: [u8; 10] = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// `CKA_EC_PARAMS` of P-256 as a DER PrintableString curve name ("prime256v1").
const P256_NAME: &[u8] = b"\x13\x0aprime256v1";

/// Whether `CKA_EC_PARAMS` names P-256.
pub fn is_p256(params: &[u8]) -> bool {
    params == P256_OID || params == P256_NAME
}

/// Length of `r` and of `s`.
pub const N_LEN: usize = 32;

/// A P-256 private key: OpenSSL's form and the engine's.
pub struct EcdsaKey {
    openssl: EcKey<Private>,
    engine: EcScalarKey,
}

fn ossl(_: openssl::error::ErrorStack) -> CK_RV {
    CKR_FUNCTION_FAILED
}

impl EcdsaKey {
    /// The key with private value `d` (big-endian). A value that is not in `[1, n)` answers
    /// `CKR_KEY_SIZE_RANGE`: the framework then signs on the next provider, whose own
    /// checks answer the caller.
    pub fn new(d: &[u8]) -> CkResult<EcdsaKey> {
        let curve = p256::Curve::get();
        let group = &curve.group;
        let mut ctx = BigNumContext::new().map_err(ossl)?;
        let d = BigNum::from_slice(d).map_err(ossl)?;
        let n = BigNum::from_slice(&curve.order_be()).map_err(ossl)?;
        if d.num_bits() == 0 || d >= n {
            return Err(CKR_KEY_SIZE_RANGE);
        }
        let mut q = EcPoint::new(group).map_err(ossl)?;
        q.mul_generator2(group, &d, &mut ctx).map_err(ossl)?;
        let engine = EcScalarKey::new(&d).map_err(ossl)?;
        let openssl = EcKey::from_private_components(group, &d, &q).map_err(ossl)?;
        Ok(EcdsaKey { openssl, engine })
    }

    /// The DER SubjectPublicKeyInfo of the key's point.
    pub fn public_key_info(&self) -> CkResult<Vec<u8>> {
        let public = EcKey::from_public_key(self.openssl.group(), self.openssl.public_key())
            .map_err(ossl)?;
        openssl::pkey::PKey::from_ec_key(public)
            .and_then(|k| k.public_key_to_der())
            .map_err(ossl)
    }

    /// OpenSSL's signature of `hash` (its leftmost 256 bits), as `r || s`.
    pub fn sign_openssl(&self, hash: &[u8]) -> CkResult<Vec<u8>> {
        let sig = EcdsaSig::sign(hash, &self.openssl).map_err(ossl)?;
        let mut out = sig.r().to_vec_padded(N_LEN as i32).map_err(ossl)?;
        out.extend(sig.s().to_vec_padded(N_LEN as i32).map_err(ossl)?);
        Ok(out)
    }
}

/// An active `CKM_ECDSA` signature.
pub struct EcdsaOp {
    key: Arc<EcdsaKey>,
}

impl EcdsaOp {
    /// `C_SignInit` (`CKM_ECDSA` takes no parameter).
    pub fn new(m: &Mechanism, key: Arc<EcdsaKey>) -> CkResult<EcdsaOp> {
        no_param(m)?;
        Ok(EcdsaOp { key })
    }

    /// `r || s`.
    pub fn sig_len(&self) -> usize {
        2 * N_LEN
    }

    /// The key.
    pub fn key(&self) -> &Arc<EcdsaKey> {
        &self.key
    }
}

/// One signature of an asynchronous session.
pub struct Request {
    key: Arc<EcdsaKey>,
    hash: Zeroizing<Vec<u8>>,
    done: Mutex<Option<CkResult<Vec<u8>>>>,
}

impl Request {
    /// The result, once its pass has run (taken once).
    pub fn take(&self) -> Option<CkResult<Vec<u8>>> {
        lock(&self.done).take()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The requests of asynchronous sessions waiting for a pass.
#[derive(Default)]
pub struct Gather {
    waiting: Mutex<VecDeque<Arc<Request>>>,
}

/// Requests that may wait at once; beyond, `C_Sign` answers `CKR_DEVICE_MEMORY` (the
/// framework then signs on the next provider).
pub const CAPACITY: usize = 1024;

impl Gather {
    /// Queues a signature of `hash`; when it is the eighth waiting, runs the pass. `Ok` with
    /// the request (done or not); `CKR_DEVICE_MEMORY` when full, or under the fault switch
    /// `busy`.
    pub fn submit(&self, kind: Kind, key: Arc<EcdsaKey>, hash: &[u8]) -> CkResult<Arc<Request>> {
        if fault::current() == Fault::Busy {
            return Err(CKR_DEVICE_MEMORY);
        }
        let req = Arc::new(Request {
            key,
            hash: Zeroizing::new(hash.to_vec()),
            done: Mutex::new(None),
        });
        let batch = {
            let mut w = lock(&self.waiting);
            if w.len() >= CAPACITY {
                return Err(CKR_DEVICE_MEMORY);
            }
            w.push_back(req.clone());
            if w.len() < LANES {
                return Ok(req);
            }
            w.drain(..LANES).collect::<Vec<_>>()
        };
        run_pass(kind, &batch);
        Ok(req)
    }

    /// The result of `req` once done; if it is still waiting, runs a pass on the oldest
    /// waiting requests first. `None` while another thread's pass holds it.
    pub fn poll(&self, kind: Kind, req: &Arc<Request>) -> Option<CkResult<Vec<u8>>> {
        if let Some(r) = req.take() {
            return Some(r);
        }
        loop {
            let batch = {
                let mut w = lock(&self.waiting);
                if !w.iter().any(|x| Arc::ptr_eq(x, req)) {
                    break;
                }
                let n = w.len().min(LANES);
                w.drain(..n).collect::<Vec<_>>()
            };
            run_pass(kind, &batch);
        }
        req.take()
    }
}

/// Signs `batch` in one pass; a lane that fails its check, and every lane when the nonces
/// cannot be drawn, is signed with OpenSSL.
fn run_pass(kind: Kind, batch: &[Arc<Request>]) {
    let fault = fault::current() == Fault::EngineError;
    let jobs: Option<Vec<EcJob>> = batch
        .iter()
        .map(|r| {
            Some(EcJob {
                key: &r.key.engine,
                e: p256::message_integer(&r.hash),
                k: p256::random_nonce().ok()?,
            })
        })
        .collect();
    let sigs = match &jobs {
        Some(jobs) => {
            let sigs = p256::ecdsa_sign(kind, jobs, fault);
            let counted = counters::get();
            counters::add(counted.ecdsa_passes, jobs.len().div_ceil(LANES));
            counters::add(counted.ecdsa_signatures, jobs.len());
            counters::add(
                counted.ecdsa_faults,
                sigs.iter().filter(|s| s.is_none()).count(),
            );
            sigs
        }
        None => vec![None; batch.len()],
    };
    for (r, sig) in batch.iter().zip(sigs) {
        let out = match sig {
            Some((rr, ss)) => Ok([rr, ss].concat()),
            None => r.key.sign_openssl(&r.hash),
        };
        *lock(&r.done) = Some(out);
    }
}
