//! The P-256 ECDSA engine against OpenSSL: for random keys, messages and nonces, the
//! engine's `(r, s)` must equal the values OpenSSL's arithmetic gives for the same nonce
//! (`r = x(k·G) mod n`, `s = k⁻¹·(e + r·d) mod n`), and OpenSSL must verify the signature;
//! on the portable engine always, on the IFMA engine where the CPU has it.
//!
//! 10,000 keys, each with its own message and nonce, in every run (about 2 s here);
//! `OPENCF_ACCEL_EC_KEYS` sets the count. Edge nonces (1, 2, n − 1, n − 2, 2^255) and messages (all zero, all ones,
//! shorter and longer than 32 bytes) are among them.

use opencf_accel::engine::p256::{self, Curve, EcJob, EcScalarKey};
use opencf_accel::engine::{self, Kind};
use openssl::bn::{BigNum, BigNumContext};
use openssl::ec::{EcKey, EcPoint};
use openssl::ecdsa::EcdsaSig;
use zeroize::Zeroizing;

fn count() -> usize {
    if let Some(v) = std::env::var("OPENCF_ACCEL_EC_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return v;
    }
    10_000
}

fn kinds() -> Vec<Kind> {
    let mut k = vec![Kind::Portable];
    if engine::ifma_present() {
        k.push(Kind::Ifma);
    } else {
        eprintln!("SKIP the IFMA engine: this CPU lacks avx512f/avx512ifma");
    }
    k
}

fn words4(x: &BigNum) -> [u64; 4] {
    let w = engine::words(x, 4).unwrap();
    [w[0], w[1], w[2], w[3]]
}

/// Nonce `i`: edge values first, then random.
fn nonce(i: usize, n: &BigNum) -> BigNum {
    let mut k = BigNum::new().unwrap();
    match i {
        0 => k = BigNum::from_u32(1).unwrap(),
        1 => k = BigNum::from_u32(2).unwrap(),
        2 | 3 => {
            k = n.as_ref().to_owned().unwrap();
            k.sub_word(i as u32 - 1).unwrap();
        }
        4 => k.lshift(&BigNum::from_u32(1).unwrap(), 255).unwrap(),
        _ => loop {
            n.rand_range(&mut k).unwrap();
            if k.num_bits() > 0 {
                break;
            }
        },
    }
    k
}

/// Message `i`: edge values first, then random 32-byte hashes.
fn message(i: usize) -> Vec<u8> {
    match i % 7 {
        0 => vec![0; 32],
        1 => vec![0xff; 32],
        2 => vec![0x5a; 20],
        3 => {
            let mut v = vec![0; 64];
            openssl::rand::rand_bytes(&mut v).unwrap();
            v
        }
        _ => {
            let mut v = vec![0; 32];
            openssl::rand::rand_bytes(&mut v).unwrap();
            v
        }
    }
}

#[test]
fn engine_signatures_equal_openssl() {
    let curve = Curve::get();
    let group = &curve.group;
    let mut ctx = BigNumContext::new().unwrap();
    let mut n = BigNum::new().unwrap();
    group.order(&mut n, &mut ctx).unwrap();
    assert_eq!(
        BigNum::from_slice(&curve.order_be()).unwrap(),
        n,
        "the order's limbs"
    );
    let total = count();
    let mut keys = Vec::new();
    let mut expected = Vec::new();
    let mut inputs = Vec::new();
    for i in 0..total {
        let key = EcKey::generate(group).unwrap();
        let k = nonce(i, &n);
        let msg = message(i);
        // OpenSSL's arithmetic: r = x(k·G) mod n, s = k⁻¹(e + r·d) mod n.
        let mut pt = EcPoint::new(group).unwrap();
        pt.mul_generator2(group, &k, &mut ctx).unwrap();
        let (mut x, mut y) = (BigNum::new().unwrap(), BigNum::new().unwrap());
        pt.affine_coordinates(group, &mut x, &mut y, &mut ctx)
            .unwrap();
        let mut r = BigNum::new().unwrap();
        r.nnmod(&x, &n, &mut ctx).unwrap();
        let e = BigNum::from_slice(&msg[..msg.len().min(32)]).unwrap();
        let mut rd = BigNum::new().unwrap();
        rd.mod_mul(&r, key.private_key(), &n, &mut ctx).unwrap();
        let mut u = BigNum::new().unwrap();
        u.mod_add(&rd, &e, &n, &mut ctx).unwrap();
        let mut kinv = BigNum::new().unwrap();
        kinv.mod_inverse(&k, &n, &mut ctx).unwrap();
        let mut s = BigNum::new().unwrap();
        s.mod_mul(&kinv, &u, &n, &mut ctx).unwrap();
        expected.push((r.to_vec_padded(32).unwrap(), s.to_vec_padded(32).unwrap()));
        inputs.push((p256::message_integer(&msg), Zeroizing::new(words4(&k)), msg));
        keys.push(key);
    }
    let forms: Vec<EcScalarKey> = keys
        .iter()
        .map(|k| EcScalarKey::new(k.private_key()).unwrap())
        .collect();
    for kind in kinds() {
        let t = std::time::Instant::now();
        let jobs: Vec<EcJob> = (0..total)
            .map(|i| EcJob {
                key: &forms[i],
                e: inputs[i].0,
                k: inputs[i].1.clone(),
            })
            .collect();
        let sigs = p256::ecdsa_sign(kind, &jobs, false);
        let signing = t.elapsed().as_secs_f64();
        assert_eq!(sigs.len(), total);
        for (i, sig) in sigs.iter().enumerate() {
            let (r, s) = sig.unwrap_or_else(|| panic!("{kind:?}: signature {i} failed its check"));
            assert_eq!(
                (r.to_vec(), s.to_vec()),
                expected[i],
                "{kind:?}: signature {i} differs from OpenSSL's"
            );
            let sig = EcdsaSig::from_private_components(
                BigNum::from_slice(&r).unwrap(),
                BigNum::from_slice(&s).unwrap(),
            )
            .unwrap();
            let msg = &inputs[i].2;
            assert!(
                sig.verify(&msg[..msg.len().min(32)], &keys[i]).unwrap(),
                "{kind:?}: signature {i} does not verify"
            );
        }
        eprintln!(
            "{kind:?}: P-256: {total} keys × 1 message and nonce equal OpenSSL's \
             (signing {:.1} µs each, checking {:.1} s)",
            signing * 1e6 / total as f64,
            t.elapsed().as_secs_f64() - signing
        );
    }
}

#[test]
fn the_check_catches_a_faulty_pass() {
    let key = EcKey::generate(&Curve::get().group).unwrap();
    let form = EcScalarKey::new(key.private_key()).unwrap();
    for kind in kinds() {
        let jobs: Vec<EcJob> = (0..3)
            .map(|_| EcJob {
                key: &form,
                e: p256::message_integer(&[7; 32]),
                k: p256::random_nonce().unwrap(),
            })
            .collect();
        assert!(p256::ecdsa_sign(kind, &jobs, true)
            .iter()
            .all(|s| s.is_none()));
        assert!(p256::ecdsa_sign(kind, &jobs, false)
            .iter()
            .all(|s| s.is_some()));
    }
}
