//! RSA engines: eight CRT half-exponentiations `c^d mod p` at once, constant-time in the
//! base, the exponent and the modulus.
//!
//! * [`Kind::Ifma`]: AVX-512 IFMA (`ifma.rs`), chosen at run time when the CPU has
//!   `avx512f` and `avx512ifma` and `$OPENCF_ACCEL_DISABLE` does not name `ifma`;
//! * [`Kind::Portable`]: the same algorithm in plain Rust (`portable.rs`), the reference that
//!   tests check the IFMA engine against; the provider does not serve with it.
//!
//! A prime's engine form ([`Prime`]: 52-bit limbs, Montgomery constants, the exponent) is
//! computed once per key. [`half_exps`] takes any number of jobs of one shape (prime size),
//! runs them eight lanes at a time and returns each result fully reduced.

mod lanes;
pub mod p256;
mod p256_lanes;
mod portable;

#[cfg(target_arch = "x86_64")]
mod ifma;

use openssl::bn::{BigNum, BigNumContext, BigNumRef};
use openssl::error::ErrorStack;
use zeroize::{Zeroize, Zeroizing};

/// Lanes per pass.
pub const LANES: usize = 8;
/// The low 52 bits.
pub const MASK52: u64 = (1 << 52) - 1;
/// The widest window of the fixed-window exponentiation (a table of 32 powers per lane).
pub const MAX_WINDOW: usize = 5;

/// The first-level data cache of this CPU in bytes (`/sys/devices/system/cpu/cpu0/cache`),
/// read once; `None` where Linux does not say.
fn l1d_bytes() -> Option<usize> {
    static L1D: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *L1D.get_or_init(|| {
        let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
        dir.flatten().find_map(|e| {
            let read = |f: &str| std::fs::read_to_string(e.path().join(f)).ok();
            let (level, kind) = (read("level")?, read("type")?);
            if level.trim() != "1" || kind.trim() != "Data" {
                return None;
            }
            let size = read("size")?;
            let kib: usize = size.trim().strip_suffix('K')?.parse().ok()?;
            Some(kib * 1024)
        })
    })
}

/// The window width for primes of `limbs` 52-bit limbs on this CPU: 5 bits (32 powers per
/// lane), or 4 (16 powers) where the 5-bit table (`32·limbs` vectors of 64 bytes) does not fit
/// the first-level data cache and the 4-bit one does. The constant-time lookup reads the
/// whole table at every window, so a table that spills to the second-level cache costs more
/// than the 4-bit windows' extra multiplications (docs/ACCEL.md, "The window and the first
/// cache"). `$OPENCF_ACCEL_WINDOW` (`4` or `5`, read once) sets it for every size, for
/// measurements.
pub fn window_bits(limbs: usize) -> usize {
    static FORCED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let forced = *FORCED.get_or_init(|| {
        let v = std::env::var("OPENCF_ACCEL_WINDOW").ok()?;
        v.trim().parse().ok().filter(|w| [4, 5].contains(w))
    });
    forced.unwrap_or_else(|| window_for(limbs, l1d_bytes()))
}

/// [`window_bits`] for a first-level data cache of `l1d` bytes (`None`: unknown, 5 bits).
pub fn window_for(limbs: usize, l1d: Option<usize>) -> usize {
    let table = |bits: usize| (1usize << bits) * limbs * 64;
    match l1d {
        Some(l1d) if table(MAX_WINDOW) > l1d && table(4) <= l1d => 4,
        _ => MAX_WINDOW,
    }
}

/// An engine implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// AVX-512 IFMA.
    Ifma,
    /// Plain Rust.
    Portable,
}

/// Whether this CPU has the IFMA engine's instructions.
pub fn ifma_present() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512ifma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The engine the provider serves RSA with: IFMA when present and not disabled by
/// `$OPENCF_ACCEL_DISABLE` (a comma-separated list; `ifma` turns it off), else none.
pub fn provider_engine() -> Option<Kind> {
    let disabled = std::env::var("OPENCF_ACCEL_DISABLE").unwrap_or_default();
    if disabled.split(',').any(|w| w.trim() == "ifma") {
        return None;
    }
    ifma_present().then_some(Kind::Ifma)
}

/// The moduli of a pass and their Montgomery constants, lane-interleaved (`[lane]` inside).
pub struct Moduli {
    /// 52-bit limbs per number (`l`).
    pub limbs: usize,
    /// The moduli.
    pub m: Vec<[u64; 8]>,
    /// `−m⁻¹ mod 2^52`.
    pub k0: [u64; 8],
    /// `R² mod m`, `R = 2^(52·l)`.
    pub rr: Vec<[u64; 8]>,
}

/// One pass: eight half-exponentiations of one shape.
pub struct Pass {
    /// The moduli.
    pub moduli: Moduli,
    /// `R³ mod m`.
    pub rrr: Vec<[u64; 8]>,
    /// The base modulo `R`.
    pub lo: Vec<[u64; 8]>,
    /// The base divided by `R` (the base is below `R²`).
    pub hi: Vec<[u64; 8]>,
    /// Bits per window ([`window_bits`]).
    pub window: usize,
    /// The exponent's windows of `window` bits, most significant first.
    pub windows: Vec<[u64; 8]>,
}

/// Wipes lane-interleaved rows (moduli of secret primes, bases, exponents).
fn wipe(rows: &mut [[u64; 8]]) {
    for x in rows.iter_mut() {
        x.zeroize();
    }
}

impl Drop for Moduli {
    fn drop(&mut self) {
        wipe(&mut self.m);
        wipe(&mut self.rr);
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        for v in [&mut self.rrr, &mut self.lo, &mut self.hi, &mut self.windows] {
            wipe(v);
        }
    }
}

/// One pass of eight exponentiations with public exponents of at most 64 bits (the check of
/// a result with `e`).
pub struct PublicPass {
    /// The moduli.
    pub moduli: Moduli,
    /// The bases, below `m`.
    pub x: Vec<[u64; 8]>,
    /// The exponents.
    pub e: [u64; 8],
}

impl Drop for PublicPass {
    fn drop(&mut self) {
        wipe(&mut self.x);
    }
}

/// What a pass computes.
pub enum Work<'a> {
    /// Secret exponents ([`half_exps`]).
    Private(&'a Pass),
    /// Public exponents ([`public_exps`]).
    Public(&'a PublicPass),
}

/// Calls `entry`, an entry point of `ifma.rs` (`ifma::run`, `ifma::ecdsa_run`), with `arg`.
/// The crate's one `unsafe` block.
#[cfg(target_arch = "x86_64")]
fn on_ifma<A, R>(entry: unsafe fn(A) -> R, arg: A) -> R {
    assert!(
        ifma_present(),
        "the IFMA engine needs avx512f and avx512ifma"
    );
    // SAFETY: the entry points of `ifma.rs` are compiled with `avx512f,avx512ifma` enabled;
    // executing one is sound exactly when the CPU has both features, which the assertion
    // above has just checked. They have no other precondition (they take safe references
    // only).
    #[allow(unsafe_code)]
    unsafe {
        entry(arg)
    }
}

/// Runs one pass on `kind`.
fn run(kind: Kind, pass: Work) -> Vec<[u64; 8]> {
    match kind {
        Kind::Portable => portable::run(pass),
        #[cfg(target_arch = "x86_64")]
        Kind::Ifma => on_ifma(ifma::run, pass),
        #[cfg(not(target_arch = "x86_64"))]
        Kind::Ifma => panic!("the IFMA engine exists on x86_64 only"),
    }
}

/// A prime with its exponent in the engine's form.
pub struct Prime {
    /// Bits of the prime (the shape: primes of equal size share passes).
    pub bits: usize,
    limbs: usize,
    /// The prime in 52-bit limbs (secret, like the values derived from it: wiped on drop).
    m: Zeroizing<Vec<u64>>,
    k0: u64,
    rr: Zeroizing<Vec<u64>>,
    rrr: Zeroizing<Vec<u64>>,
    /// The exponent in 64-bit words, one zero word above.
    exp: Zeroizing<Vec<u64>>,
}

/// 52-bit limbs for `bits`-bit moduli: `2^(52·l) ≥ 16·m`, as the engine's bounds need.
pub fn limbs_for(bits: usize) -> usize {
    (bits + 4).div_ceil(52)
}

/// `x` (below `2^(64·n)`) as `n` little-endian 64-bit words.
pub fn words(x: &BigNumRef, n: usize) -> Result<Zeroizing<Vec<u64>>, ErrorStack> {
    let be = Zeroizing::new(x.to_vec_padded((n * 8) as i32)?);
    Ok(Zeroizing::new(words_from_be(&be, n)))
}

/// Big-endian bytes as `n` little-endian 64-bit words (the bytes must fit).
pub fn words_from_be(be: &[u8], n: usize) -> Vec<u64> {
    let mut out = vec![0u64; n];
    for (i, b) in be.iter().rev().enumerate() {
        out[i / 8] |= u64::from(*b) << (8 * (i % 8));
    }
    out
}

/// `n` words back into `len` big-endian bytes (the value must fit).
pub fn be_from_words(w: &[u64], len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    for i in 0..len {
        out[len - 1 - i] = (w[i / 8] >> (8 * (i % 8))) as u8;
    }
    out
}

/// Re-cuts little-endian limbs of `from` bits into `n` limbs of `to` bits (bits above
/// `n·to` are dropped). The work depends on the lengths only.
pub fn repack(src: &[u64], from: u32, to: u32, n: usize) -> Vec<u64> {
    let mask = |b: u32| if b == 64 { u64::MAX } else { (1u64 << b) - 1 };
    let mut out = vec![0u64; n];
    let mut acc: u128 = 0;
    let mut have = 0u32;
    let mut k = 0;
    for &s in src {
        acc |= u128::from(s & mask(from)) << have;
        have += from;
        while have >= to {
            if k < n {
                out[k] = acc as u64 & mask(to);
            }
            acc >>= to;
            have -= to;
            k += 1;
        }
    }
    if k < n {
        out[k] = acc as u64 & mask(to);
    }
    acc.zeroize();
    out
}

/// `−m⁻¹ mod 2^64` for odd `m0`.
pub fn neg_inv64(m0: u64) -> u64 {
    let mut inv: u64 = 1;
    for _ in 0..6 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(m0.wrapping_mul(inv)));
    }
    inv.wrapping_neg()
}

impl Prime {
    /// The engine form of `p` (odd, `bits` bits) with exponent `d < p`. Computed with
    /// OpenSSL once per key.
    pub fn new(p: &BigNumRef, d: &BigNumRef) -> Result<Prime, ErrorStack> {
        let bits = p.num_bits() as usize;
        let limbs = limbs_for(bits);
        let mut ctx = BigNumContext::new()?;
        let pow = |e: usize, ctx: &mut BigNumContext| -> Result<BigNum, ErrorStack> {
            let mut big = BigNum::new()?;
            big.lshift(&*BigNum::from_u32(1)?, (52 * limbs * e) as i32)?;
            let mut r = BigNum::new()?;
            r.nnmod(&big, p, ctx)?;
            Ok(r)
        };
        let to52 = |x: &BigNumRef| -> Result<Zeroizing<Vec<u64>>, ErrorStack> {
            let w = words(x, (52 * limbs).div_ceil(64))?;
            Ok(Zeroizing::new(repack(&w, 64, 52, limbs)))
        };
        let m = to52(p)?;
        let rr = to52(&*pow(2, &mut ctx)?)?;
        let rrr = to52(&*pow(3, &mut ctx)?)?;
        let k0 = neg_inv64(m[0] | (m[1] << 52)) & MASK52;
        let exp = words(d, bits.div_ceil(64) + 1)?;
        Ok(Prime {
            bits,
            limbs,
            m,
            k0,
            rr,
            rrr,
            exp,
        })
    }

    /// Number of windows of `width` bits of an exponent below `2^bits`.
    fn windows(&self, width: usize) -> usize {
        self.bits.div_ceil(width)
    }

    /// Window `w` of `width` bits (bits `width·w..width·(w+1)`) of the exponent; the position
    /// is public.
    fn window(&self, w: usize, width: usize) -> u64 {
        let b = w * width;
        let pair = u128::from(self.exp[b / 64]) | (u128::from(self.exp[b / 64 + 1]) << 64);
        (pair >> (b % 64)) as u64 & ((1 << width) - 1)
    }

    /// A value below the prime (little-endian 64-bit words) in the engine's `l` 52-bit limbs.
    pub fn limbs52(&self, x: &[u64]) -> Zeroizing<Vec<u64>> {
        Zeroizing::new(repack(x, 64, 52, self.limbs))
    }

    /// The base `x` (below `2^(2·bits)`, little-endian 64-bit words) cut into the engine's
    /// two halves of `l` 52-bit limbs.
    pub fn base(&self, x: &[u64]) -> Zeroizing<Vec<u64>> {
        Zeroizing::new(repack(x, 64, 52, 2 * self.limbs))
    }
}

/// One half-exponentiation: `base^exp mod p` for the [`Prime`] (base from [`Prime::base`]).
pub struct Job<'a> {
    /// The prime and its exponent.
    pub prime: &'a Prime,
    /// `2·l` 52-bit limbs.
    pub base: &'a [u64],
}

/// `n` rows of eight lanes: row `j`, lane `i` is `f(i, j)`.
pub(super) fn interleave(n: usize, f: impl Fn(usize, usize) -> u64) -> Vec<[u64; 8]> {
    (0..n).map(|j| std::array::from_fn(|i| f(i, j))).collect()
}

/// Runs `jobs` (all of one prime size, each with its [`Prime`]) eight lanes a pass: `pass`
/// runs one pass on its eight lanes (empty lanes repeat the first job; their results are
/// dropped) and their moduli; each result comes back fully reduced.
fn by_passes<J>(
    jobs: &[J],
    prime: impl Fn(&J) -> &Prime,
    pass: impl Fn([&J; LANES], Moduli) -> Vec<[u64; 8]>,
) -> Vec<Zeroizing<Vec<u64>>> {
    let mut out = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(LANES) {
        let first = prime(&chunk[0]);
        assert!(chunk.iter().all(|j| prime(j).bits == first.bits));
        let lanes: [&J; LANES] = std::array::from_fn(|i| chunk.get(i).unwrap_or(&chunk[0]));
        let moduli = Moduli {
            limbs: first.limbs,
            m: interleave(first.limbs, |i, j| prime(lanes[i]).m[j]),
            k0: std::array::from_fn(|i| prime(lanes[i]).k0),
            rr: interleave(first.limbs, |i, j| prime(lanes[i]).rr[j]),
        };
        let res = pass(lanes, moduli);
        for (i, job) in chunk.iter().enumerate() {
            let mut r = Zeroizing::new(res.iter().map(|v| v[i]).collect::<Vec<u64>>());
            reduce_once(&mut r, &prime(job).m);
            out.push(r);
        }
    }
    out
}

/// Runs `jobs` (all of one prime size) on `kind`, eight lanes a pass; each result is the
/// fully reduced value in `l` 52-bit limbs.
pub fn half_exps(kind: Kind, jobs: &[Job]) -> Vec<Zeroizing<Vec<u64>>> {
    half_exps_windowed(kind, jobs, None)
}

/// [`half_exps`] with windows of `width` bits (1 to [`MAX_WINDOW`]) instead of
/// [`window_bits`]' choice, for tests of either width on any CPU.
pub fn half_exps_windowed(
    kind: Kind,
    jobs: &[Job],
    width: Option<usize>,
) -> Vec<Zeroizing<Vec<u64>>> {
    assert!(width.is_none_or(|w| (1..=MAX_WINDOW).contains(&w)));
    let pass = |lanes: [&Job; LANES], moduli: Moduli| {
        let l = moduli.limbs;
        let width = width.unwrap_or_else(|| window_bits(l));
        let nw = lanes[0].prime.windows(width);
        let pass = Pass {
            rrr: interleave(l, |i, j| lanes[i].prime.rrr[j]),
            lo: interleave(l, |i, j| lanes[i].base[j]),
            hi: interleave(l, |i, j| lanes[i].base[l + j]),
            window: width,
            windows: interleave(nw, |i, w| lanes[i].prime.window(nw - 1 - w, width)),
            moduli,
        };
        run(kind, Work::Private(&pass))
    };
    by_passes(jobs, |j| j.prime, pass)
}

/// One exponentiation with a public exponent: `x^e mod p` for the [`Prime`].
pub struct PublicJob<'a> {
    /// The modulus.
    pub prime: &'a Prime,
    /// The base, below the prime, in `l` 52-bit limbs.
    pub x: &'a [u64],
    /// The exponent (public).
    pub e: u64,
}

/// Runs `jobs` (all of one prime size) on `kind`, eight lanes a pass, with square-and-multiply
/// over the exponents' bits; each result is fully reduced, in `l` 52-bit limbs. The cost
/// follows the longest exponent: for `e = 65537`, 17 squarings and two multiplications.
pub fn public_exps(kind: Kind, jobs: &[PublicJob]) -> Vec<Zeroizing<Vec<u64>>> {
    let pass = |lanes: [&PublicJob; LANES], moduli: Moduli| {
        let pass = PublicPass {
            x: interleave(moduli.limbs, |i, j| lanes[i].x[j]),
            e: std::array::from_fn(|i| lanes[i].e),
            moduli,
        };
        run(kind, Work::Public(&pass))
    };
    by_passes(jobs, |j| j.prime, pass)
}

/// `r = r − m` if `r ≥ m` (52-bit limbs, `r ≤ m`… `< 2m`), in constant time.
fn reduce_once(r: &mut [u64], m: &[u64]) {
    let mut t = Zeroizing::new(vec![0u64; r.len()]);
    let mut borrow = 0u64;
    for j in 0..r.len() {
        let d = r[j].wrapping_sub(m[j]).wrapping_sub(borrow);
        borrow = d >> 63;
        t[j] = d & MASK52;
    }
    // borrow = 1: r < m, keep r.
    let keep = borrow.wrapping_neg();
    for j in 0..r.len() {
        r[j] = (r[j] & keep) | (t[j] & !keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_fits_the_first_cache() {
        // RSA-2048 halves: the 5-bit table is 40 KiB, the 4-bit one 20 KiB.
        assert_eq!(window_for(20, Some(32 * 1024)), 4);
        assert_eq!(window_for(20, Some(48 * 1024)), 5);
        // RSA-3072: 60 and 30 KiB.
        assert_eq!(window_for(30, Some(32 * 1024)), 4);
        // RSA-4096: 80 and 40 KiB; neither fits 32 KiB, so the fewer multiplications win.
        assert_eq!(window_for(40, Some(32 * 1024)), 5);
        assert_eq!(window_for(40, Some(48 * 1024)), 4);
        assert_eq!(window_for(40, Some(1 << 20)), 5);
        assert_eq!(window_for(20, None), 5);
        assert!([4, 5].contains(&window_bits(20)));
    }

    #[test]
    fn repack_round_trip() {
        let w = vec![0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210, 0x1111];
        let l = repack(&w, 64, 52, 5);
        assert!(l.iter().all(|x| *x <= MASK52));
        assert_eq!(repack(&l, 52, 64, 3), w);
        let be = be_from_words(&w, 24);
        assert_eq!(words_from_be(&be, 3), w);
    }

    #[test]
    fn inverse() {
        for m in [1u64, 3, 0xffff_ffff_ffff_fff1, 0x1234_5679] {
            assert_eq!(m.wrapping_mul(neg_inv64(m)), u64::MAX);
        }
    }
}
