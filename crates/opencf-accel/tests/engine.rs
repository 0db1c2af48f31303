//! The engines against OpenSSL: the raw private operation `c^d mod n` (blinding, both CRT
//! halves in the lanes, recombination, check, unblinding) must equal OpenSSL's for random
//! keys and inputs, on the portable engine always and on the IFMA engine where the CPU has
//! it.
//!
//! Default run: a few keys per size. `OPENCF_ACCEL_FULL=1` runs 10,000 random key/message
//! pairs per size (minutes per size); `OPENCF_ACCEL_KEYS`/`OPENCF_ACCEL_MSGS` set the counts.

use opencf_accel::engine::{self, Job, Kind};
use opencf_accel::rsa;
use openssl::bn::BigNum;
use openssl::pkey::Private;
use openssl::rsa::{Padding, Rsa};

fn count(var: &str, default: usize, full: usize) -> usize {
    if let Some(v) = std::env::var(var).ok().and_then(|v| v.parse().ok()) {
        return v;
    }
    if std::env::var("OPENCF_ACCEL_FULL").is_ok_and(|v| v == "1") {
        full
    } else {
        default
    }
}

fn input(key: &Rsa<Private>, i: usize) -> Vec<u8> {
    let k = key.size() as usize;
    match i {
        // The edge values 0, 1, n − 1, then random values below n.
        0 => vec![0u8; k],
        1 => {
            let mut v = vec![0u8; k];
            v[k - 1] = 1;
            v
        }
        2 => {
            let mut n1 = key.n().to_owned().unwrap();
            n1.sub_word(1).unwrap();
            n1.to_vec_padded(k as i32).unwrap()
        }
        _ => {
            let mut r = BigNum::new().unwrap();
            key.n().rand_range(&mut r).unwrap();
            r.to_vec_padded(k as i32).unwrap()
        }
    }
}

/// For each size: `keys` keys, `msgs` inputs each; every pass fills the eight lanes with
/// the halves of four different keys.
fn check(kind: Kind, keys: usize, msgs: usize, sizes: &[u32]) {
    for &bits in sizes {
        let ks: Vec<(Rsa<Private>, rsa::RsaKey)> = (0..keys)
            .map(|_| {
                let key = Rsa::generate(bits).unwrap();
                let ek = rsa::from_openssl(&key).unwrap();
                (key, ek)
            })
            .collect();
        for i in 0..msgs {
            for group in ks.chunks(4) {
                let cs: Vec<Vec<u8>> = group.iter().map(|(k, _)| input(k, i)).collect();
                let pend: Vec<_> = group
                    .iter()
                    .zip(&cs)
                    .map(|((_, ek), c)| ek.begin(c).unwrap())
                    .collect();
                let jobs: Vec<Job> = group
                    .iter()
                    .zip(&pend)
                    .flat_map(|((_, ek), p)| {
                        [
                            Job {
                                prime: &ek.p,
                                base: &p.base_p,
                            },
                            Job {
                                prime: &ek.q,
                                base: &p.base_q,
                            },
                        ]
                    })
                    .collect();
                let res = engine::half_exps(kind, &jobs);
                for (j, ((key, ek), c)) in group.iter().zip(&cs).enumerate() {
                    let got = ek.finish(&pend[j], &res[2 * j], &res[2 * j + 1]).unwrap();
                    let mut want = vec![0u8; c.len()];
                    key.private_decrypt(c, &mut want, Padding::NONE).unwrap();
                    assert_eq!(&got[..], &want[..], "{kind:?} RSA-{bits} input {i}");
                }
            }
        }
        eprintln!("{kind:?}: RSA-{bits}: {keys} keys × {msgs} inputs equal OpenSSL's");
    }
}

#[test]
fn portable_engine_matches_openssl() {
    let keys = count("OPENCF_ACCEL_KEYS", 4, 10_000);
    let msgs = count("OPENCF_ACCEL_MSGS", 4, 1);
    check(Kind::Portable, keys, msgs, &[2048, 3072, 4096]);
}

#[test]
fn ifma_engine_matches_openssl() {
    if !engine::ifma_present() {
        eprintln!("SKIP: this CPU has no AVX-512 IFMA; the IFMA engine is not tested here");
        return;
    }
    let keys = count("OPENCF_ACCEL_KEYS", 20, 10_000);
    let msgs = count("OPENCF_ACCEL_MSGS", 50, 1);
    check(Kind::Ifma, keys, msgs, &[2048, 3072, 4096]);
}
