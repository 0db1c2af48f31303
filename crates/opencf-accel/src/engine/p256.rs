//! The P-256 ECDSA engine's host side: the curve's constants and fixed-base table (computed
//! once with OpenSSL), a key's engine form, and [`ecdsa_sign`], which runs any number of
//! signatures eight lanes a pass (`p256_lanes.rs`) on the IFMA or the portable engine.
//!
//! The nonce `k` is the caller's (the provider draws it from OpenSSL's generator, tests
//! choose it to compare with OpenSSL's arithmetic). A lane whose result fails the pass's own
//! check (point on the curve, `s·k = e + r·d`), or whose `r` or `s` is zero, comes back as
//! `None`; the caller signs that one with OpenSSL.

use super::{
    be_from_words, interleave, neg_inv64, repack, words, words_from_be, Kind, LANES, MASK52,
};
use openssl::bn::{BigNum, BigNumContext, BigNumRef};
use openssl::ec::{EcGroup, EcPoint};
use openssl::error::ErrorStack;
use openssl::nid::Nid;
use std::sync::OnceLock;
use zeroize::{Zeroize, Zeroizing};

/// 52-bit limbs of a field element or scalar.
pub const FE: usize = 5;
/// 4-bit digits of a scalar.
pub const DIGITS: usize = 64;

/// A modulus (`p` or `n`) and its Montgomery constants, `R = 2^260`.
pub struct Modulus {
    /// The modulus.
    pub m: [u64; FE],
    /// Twice the modulus.
    pub m2: [u64; FE],
    /// `−m⁻¹ mod 2^52`.
    pub k0: u64,
    /// `R mod m` (one in Montgomery form).
    pub one: [u64; FE],
}

/// The curve's constants.
pub struct Curve {
    /// The field.
    pub p: Modulus,
    /// The group order.
    pub n: Modulus,
    /// `b·R mod p`.
    pub b_mont: [u64; FE],
    /// `R² mod n`.
    pub n_rr: [u64; FE],
    /// `p − 2` and `n − 2` (Fermat's inverses), little-endian words.
    pub p_minus_2: [u64; 4],
    /// See `p_minus_2`.
    pub n_minus_2: [u64; 4],
    /// `64 × 16` entries `(x, y)·R mod p` of `j·16^i·G` (entry `16i + j`); `j = 0` holds
    /// `(0, R mod p)`.
    pub table: Vec<[[u64; FE]; 2]>,
    /// The group (for keys and the tests).
    pub group: EcGroup,
}

/// One pass: eight signatures, lane-interleaved rows (`[lane]` inside).
pub struct EcPass<'a> {
    /// The curve.
    pub curve: &'a Curve,
    /// `k`'s digits, least significant first ([`DIGITS`] rows).
    pub digits: Vec<[u64; 8]>,
    /// `k` ([`FE`] rows).
    pub k: Vec<[u64; 8]>,
    /// The message's integer `e` (below 2^256).
    pub e: Vec<[u64; 8]>,
    /// `d·R mod n`.
    pub d_mont: Vec<[u64; 8]>,
    /// The fault switch: every lane's point is knocked off the curve.
    pub fault: bool,
}

impl Drop for EcPass<'_> {
    fn drop(&mut self) {
        for v in [&mut self.digits, &mut self.k, &mut self.d_mont] {
            for x in v.iter_mut() {
                x.zeroize();
            }
        }
    }
}

/// What a pass returns: `r`, `s` (fully reduced, [`FE`] rows) and each lane's check.
pub struct EcOut {
    /// `r`.
    pub r: Vec<[u64; 8]>,
    /// `s`.
    pub s: Vec<[u64; 8]>,
    /// 1 where the lane's result passed its check.
    pub ok: [u64; 8],
}

fn limbs(x: &BigNumRef) -> Result<[u64; FE], ErrorStack> {
    let w = words(x, 5)?;
    let l = repack(&w, 64, 52, FE);
    Ok(std::array::from_fn(|i| l[i]))
}

fn words4(x: &BigNumRef) -> Result<[u64; 4], ErrorStack> {
    let w = words(x, 4)?;
    Ok([w[0], w[1], w[2], w[3]])
}

/// `2^(260·e) mod m`.
fn r_pow(m: &BigNumRef, e: i32, ctx: &mut BigNumContext) -> Result<BigNum, ErrorStack> {
    let mut big = BigNum::new()?;
    big.lshift(&*BigNum::from_u32(1)?, 260 * e)?;
    let mut r = BigNum::new()?;
    r.nnmod(&big, m, ctx)?;
    Ok(r)
}

fn modulus(m: &BigNumRef, ctx: &mut BigNumContext) -> Result<Modulus, ErrorStack> {
    let l = limbs(m)?;
    let mut two = BigNum::new()?;
    two.lshift1(m)?;
    Ok(Modulus {
        m: l,
        m2: limbs(&two)?,
        k0: neg_inv64(l[0] | (l[1] << 52)) & MASK52,
        one: limbs(&*r_pow(m, 1, ctx)?)?,
    })
}

fn minus_2(m: &BigNumRef) -> Result<[u64; 4], ErrorStack> {
    let mut x = m.to_owned()?;
    x.sub_word(2)?;
    words4(&x)
}

impl Curve {
    fn new() -> Result<Curve, ErrorStack> {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
        let mut ctx = BigNumContext::new()?;
        let (mut p, mut a, mut b, mut n) = (
            BigNum::new()?,
            BigNum::new()?,
            BigNum::new()?,
            BigNum::new()?,
        );
        group.components_gfp(&mut p, &mut a, &mut b, &mut ctx)?;
        group.order(&mut n, &mut ctx)?;
        let r = r_pow(&p, 1, &mut ctx)?;
        let mont = |x: &BigNumRef, ctx: &mut BigNumContext| -> Result<[u64; FE], ErrorStack> {
            let mut t = BigNum::new()?;
            t.mod_mul(x, &r, &p, ctx)?;
            limbs(&t)
        };
        let b_mont = mont(&b, &mut ctx)?;
        let one_p = limbs(&r)?;
        // table[16i + j] = j·16^i·G, affine, Montgomery form.
        let mut table = Vec::with_capacity(DIGITS * 16);
        let mut base = group
            .generator_opt()
            .ok_or_else(ErrorStack::get)?
            .to_owned(&group)?;
        let (mut x, mut y) = (BigNum::new()?, BigNum::new()?);
        for _ in 0..DIGITS {
            table.push([[0; FE], one_p]);
            let mut pt = base.to_owned(&group)?;
            for j in 1..16 {
                if j > 1 {
                    let mut next = EcPoint::new(&group)?;
                    next.add(&group, &pt, &base, &mut ctx)?;
                    pt = next;
                }
                pt.affine_coordinates(&group, &mut x, &mut y, &mut ctx)?;
                table.push([mont(&x, &mut ctx)?, mont(&y, &mut ctx)?]);
            }
            // The next base: 16 times this one.
            let mut next = EcPoint::new(&group)?;
            next.add(&group, &pt, &base, &mut ctx)?;
            base = next;
        }
        Ok(Curve {
            p: modulus(&p, &mut ctx)?,
            n: modulus(&n, &mut ctx)?,
            b_mont,
            n_rr: limbs(&*r_pow(&n, 2, &mut ctx)?)?,
            p_minus_2: minus_2(&p)?,
            n_minus_2: minus_2(&n)?,
            table,
            group,
        })
    }

    /// The curve, built on first use.
    pub fn get() -> &'static Curve {
        static CURVE: OnceLock<Curve> = OnceLock::new();
        CURVE.get_or_init(|| Curve::new().expect("P-256 constants from OpenSSL"))
    }

    /// The group order as 32 big-endian bytes.
    pub fn order_be(&self) -> [u8; 32] {
        let w = repack(&self.n.m, 52, 64, 4);
        let be = be_from_words(&w, 32);
        std::array::from_fn(|i| be[i])
    }
}

/// A private key's engine form: `d·R mod n` in limbs (secret: wiped on drop).
pub struct EcScalarKey {
    d_mont: Zeroizing<Vec<u64>>,
}

impl EcScalarKey {
    /// The engine form of `d` (below `n`).
    pub fn new(d: &BigNumRef) -> Result<EcScalarKey, ErrorStack> {
        let curve = Curve::get();
        let mut ctx = BigNumContext::new()?;
        let mut n = BigNum::new()?;
        curve.group.order(&mut n, &mut ctx)?;
        let r = r_pow(&n, 1, &mut ctx)?;
        let mut t = BigNum::new()?;
        t.mod_mul(d, &r, &n, &mut ctx)?;
        let w = words(&t, 5)?;
        t.clear();
        Ok(EcScalarKey {
            d_mont: Zeroizing::new(repack(&w, 64, 52, FE)),
        })
    }
}

/// One signature: the key, the message's integer (ECDSA's leftmost 256 bits of the hash,
/// [`message_integer`]) and the nonce (`1 ≤ k < n`), both as four little-endian words.
pub struct EcJob<'a> {
    /// The key.
    pub key: &'a EcScalarKey,
    /// `e`.
    pub e: [u64; 4],
    /// `k` (secret).
    pub k: Zeroizing<[u64; 4]>,
}

/// ECDSA's integer of a hash for P-256: its leftmost 256 bits, as four little-endian words.
pub fn message_integer(hash: &[u8]) -> [u64; 4] {
    let h = &hash[..hash.len().min(32)];
    let w = words_from_be(h, 4);
    [w[0], w[1], w[2], w[3]]
}

/// A random nonce `1 ≤ k < n` from OpenSSL's generator (rejection sampling: a draw is
/// kept or redrawn as a whole, so nothing about the kept value shows).
pub fn random_nonce() -> Result<Zeroizing<[u64; 4]>, ErrorStack> {
    let n = repack(&Curve::get().n.m, 52, 64, 4);
    let mut be = Zeroizing::new([0u8; 32]);
    loop {
        openssl::rand::rand_bytes(&mut be[..])?;
        let k = Zeroizing::new(words_from_be(&be[..], 4));
        // k < n and k ≠ 0, by a subtraction's borrow and an OR of the words.
        let mut borrow = 0u64;
        for i in 0..4 {
            let (d, b1) = k[i].overflowing_sub(n[i]);
            let (_, b2) = d.overflowing_sub(borrow);
            borrow = u64::from(b1 | b2);
        }
        let nonzero = k.iter().fold(0, |a, w| a | w) != 0;
        if borrow == 1 && nonzero {
            return Ok(Zeroizing::new([k[0], k[1], k[2], k[3]]));
        }
    }
}

fn run(kind: Kind, pass: &EcPass) -> EcOut {
    match kind {
        Kind::Portable => super::portable::ecdsa_run(pass),
        #[cfg(target_arch = "x86_64")]
        Kind::Ifma => super::on_ifma(super::ifma::ecdsa_run, pass),
        #[cfg(not(target_arch = "x86_64"))]
        Kind::Ifma => panic!("the IFMA engine exists on x86_64 only"),
    }
}

/// A signature `(r, s)`, each 32 big-endian bytes.
pub type Signature = ([u8; 32], [u8; 32]);

/// Runs `jobs` on `kind`, eight lanes a pass (empty lanes repeat the first job; their
/// results are dropped). `None` for a lane that failed its check or came out with `r = 0`
/// or `s = 0`. `fault` is the test switch (every lane fails its check).
pub fn ecdsa_sign(kind: Kind, jobs: &[EcJob], fault: bool) -> Vec<Option<Signature>> {
    let curve = Curve::get();
    let mut out = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(LANES) {
        let lane = |i: usize| chunk.get(i).unwrap_or(&chunk[0]);
        let k52: Vec<Zeroizing<Vec<u64>>> = (0..LANES)
            .map(|i| Zeroizing::new(repack(&lane(i).k[..], 64, 52, FE)))
            .collect();
        let e52: Vec<Vec<u64>> = (0..LANES).map(|i| repack(&lane(i).e, 64, 52, FE)).collect();
        let pass = EcPass {
            curve,
            digits: interleave(DIGITS, |i, d| (lane(i).k[d / 16] >> (4 * (d % 16))) & 15),
            k: interleave(FE, |i, j| k52[i][j]),
            e: interleave(FE, |i, j| e52[i][j]),
            d_mont: interleave(FE, |i, j| lane(i).key.d_mont[j]),
            fault,
        };
        let res = run(kind, &pass);
        for i in 0..chunk.len() {
            let bytes = |rows: &[[u64; 8]]| -> ([u8; 32], bool) {
                let l: Vec<u64> = rows.iter().map(|v| v[i]).collect();
                let be = be_from_words(&repack(&l, 52, 64, 4), 32);
                (std::array::from_fn(|b| be[b]), l.iter().any(|&x| x != 0))
            };
            let (r, r_nz) = bytes(&res.r);
            let (s, s_nz) = bytes(&res.s);
            out.push((res.ok[i] == 1 && r_nz && s_nz).then_some((r, s)));
        }
    }
    out
}
