//! An RSA private key in the engine's form, and the raw private operation around the
//! engine: blinding, the two CRT halves, recombination, the check with the public exponent,
//! unblinding.
//!
//! The form is computed once per key object ([`RsaKey::new`]) with OpenSSL: the primes'
//! Montgomery constants, the CRT exponents, `qInv` in Montgomery form, and blinding factors.
//! An operation is split in three so that the scheduler's worker runs only the engine:
//! [`RsaKey::begin`] (caller's thread: blind), the half-exponentiations (a worker, batched),
//! [`RsaKey::finish`] (caller's thread: recombine, verify, unblind).

use crate::counters;
use crate::ct::{self, Mont};
use crate::engine::{
    self, be_from_words, repack, words, words_from_be, Job, Kind, Prime, PublicJob,
};
use opencf_abi::sys::*;
use opencf_abi::CkResult;
use openssl::bn::{BigNum, BigNumContext, BigNumRef};
use openssl::pkey::{PKey, Private};
use openssl::pkey_ctx::PkeyCtx;
use openssl::rsa::{Padding, Rsa, RsaPrivateKeyBuilder};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use zeroize::Zeroizing;

/// A secret number in 64-bit limbs.
type Limbs = Zeroizing<Vec<u64>>;

/// Modulus sizes the engine serves.
pub const SIZES: [usize; 3] = [2048, 3072, 4096];

/// Blinding factors are squared after each use and drawn afresh after this many uses (as
/// OpenSSL does).
const BLINDING_USES: u32 = 32;
/// Independent blinding states per key, so that threads using one key rarely wait.
const BLINDING_SLOTS: usize = 4;
/// Fresh blinding states drawn at once, sharing one inversion.
const FRESH_BATCH: usize = 8;

/// `(A·R, r⁻¹·R) mod n` with `A = r^e` for a random `r`: the input is multiplied by `A`, the
/// result (`(c·A)^d = c^d·r`) by `r⁻¹`. After each use both are squared.
struct Blinding {
    a: Zeroizing<Vec<u64>>,
    ai: Zeroizing<Vec<u64>>,
    uses: u32,
}

/// The values of an RSA private key, as big-endian bytes.
pub struct RsaParts<'a> {
    /// `n`.
    pub n: &'a [u8],
    /// `e`.
    pub e: &'a [u8],
    /// `p`.
    pub p: &'a [u8],
    /// `q`.
    pub q: &'a [u8],
    /// `d mod (p−1)`.
    pub dp: &'a [u8],
    /// `d mod (q−1)`.
    pub dq: &'a [u8],
    /// `q⁻¹ mod p`.
    pub qinv: &'a [u8],
}

impl<'a> RsaParts<'a> {
    /// The parts in the order `n, e, p, q, dP, dQ, qInv`.
    pub fn from_array<T: AsRef<[u8]>>(a: &'a [T; 7]) -> RsaParts<'a> {
        let [n, e, p, q, dp, dq, qinv] = a.each_ref().map(|x| x.as_ref());
        RsaParts {
            n,
            e,
            p,
            q,
            dp,
            dq,
            qinv,
        }
    }
}

/// An RSA private key ready for the engine.
pub struct RsaKey {
    /// Modulus bits.
    pub bits: usize,
    /// Modulus bytes (`k`).
    pub k: usize,
    n_be: Vec<u8>,
    /// The CRT halves in the engine's form.
    pub p: Prime,
    /// The second prime.
    pub q: Prime,
    pm: Mont,
    qm: Mont,
    /// The public exponent (at most 64 bits).
    e: u64,
    qinv_r: Zeroizing<Vec<u64>>,
    nm: Mont,
    n_bn: BigNum,
    blinding: Vec<Mutex<Option<Blinding>>>,
    /// Fresh blinding states not used yet ([`RsaKey::fresh_blinding`]).
    fresh: Mutex<Vec<Blinding>>,
    next: AtomicUsize,
    /// The modulus with exponents 1 (no primes): OpenSSL's padding code applied to a value
    /// without exponentiation (see `mech.rs`).
    pub identity: PKey<Private>,
    /// The key itself for OpenSSL's own RSA code ([`RsaKey::private_openssl`]).
    openssl: PKey<Private>,
    /// The same key as an `RSA` object, for the public operation ([`RsaKey::public_op`]):
    /// OpenSSL keeps its Montgomery context for `n` there after the first use.
    public: Rsa<Private>,
}

/// An operation between [`RsaKey::begin`] and [`RsaKey::finish`].
pub struct Pending {
    ai: Zeroizing<Vec<u64>>,
    /// The engine's base for `p`.
    pub base_p: Zeroizing<Vec<u64>>,
    /// The engine's base for `q`.
    pub base_q: Zeroizing<Vec<u64>>,
    /// The blinded input modulo `p` and modulo `q` (52-bit limbs): what each half raised to
    /// `e` must give back ([`check_halves`]).
    pub expect: [Zeroizing<Vec<u64>>; 2],
}

/// A half-exponentiation's result (`c'^dP mod p` or `c'^dQ mod q`, 52-bit limbs) that passed
/// the public-exponent check of [`check_halves`]: the only form in which [`RsaKey::finish`]
/// takes one.
pub struct CheckedHalf(Zeroizing<Vec<u64>>);

#[cfg(test)]
impl CheckedHalf {
    /// A stand-in for the scheduler's own tests, which move halves without checking them.
    pub(crate) fn unchecked(v: Vec<u64>) -> CheckedHalf {
        CheckedHalf(Zeroizing::new(v))
    }

    pub(crate) fn limbs(&self) -> &[u64] {
        &self.0
    }
}

/// One half's result to check: of `key`'s prime `which` (0: `p`, 1: `q`), against `expect`
/// (the request's [`Pending::expect`] for that prime).
pub struct HalfResult<'a> {
    /// The key.
    pub key: &'a RsaKey,
    /// 0: the `p` half, 1: the `q` half.
    pub which: usize,
    /// `c' mod` the prime, 52-bit limbs.
    pub expect: &'a [u64],
    /// The engine's result, 52-bit limbs.
    pub result: Zeroizing<Vec<u64>>,
}

/// Checks half results with the public exponent, eight lanes a pass of the lane engine
/// (whatever requests and keys they belong to): `m = c'^d mod p` must satisfy `m^e mod p =
/// c' mod p`, since `e·d ≡ 1 (mod p − 1)`. A half that fails (a fault in the engine) is
/// `None` and is never released. The exponent is public, the pass and the comparison are
/// constant time in the secret values. Together with the recombination check of
/// [`RsaKey::finish`] this is the check OpenSSL applies to its own CRT result (`s^e mod n =
/// c'`), split so that a worker checks the halves of a whole pass at once: one pass of the
/// public exponent per eight halves instead of one per request.
pub fn check_halves(kind: Kind, halves: Vec<HalfResult<'_>>) -> Vec<Option<CheckedHalf>> {
    let jobs: Vec<PublicJob> = halves
        .iter()
        .map(|h| PublicJob {
            prime: if h.which == 0 { &h.key.p } else { &h.key.q },
            x: &h.result,
            e: h.key.e,
        })
        .collect();
    let powers = engine::public_exps(kind, &jobs);
    halves
        .into_iter()
        .zip(powers)
        .map(|(h, v)| ct::equal(&v, h.expect).then_some(CheckedHalf(h.result)))
        .collect()
}

fn bn(b: &[u8]) -> CkResult<BigNum> {
    BigNum::from_slice(b).map_err(|_| CKR_HOST_MEMORY)
}

/// A secret value: OpenSSL's divisions and inversions take their constant-time paths with it.
fn secret(b: &[u8]) -> CkResult<BigNum> {
    let mut x = bn(b)?;
    x.set_const_time();
    Ok(x)
}

impl RsaKey {
    /// Converts a key. A key the engine cannot serve (size other than 2048/3072/4096 bits,
    /// primes not of half the modulus size, inconsistent values) is `CKR_KEY_SIZE_RANGE`, a
    /// recoverable error: the framework moves to the next provider.
    pub fn new(parts: &RsaParts) -> CkResult<RsaKey> {
        let err = |_| CKR_KEY_SIZE_RANGE;
        let n = bn(parts.n)?;
        let e = bn(parts.e)?;
        let p = secret(parts.p)?;
        let q = secret(parts.q)?;
        let dp = secret(parts.dp)?;
        let dq = secret(parts.dq)?;
        let qinv = secret(parts.qinv)?;
        let bits = n.num_bits() as usize;
        let half = bits / 2;
        if !SIZES.contains(&bits)
            || p.num_bits() as usize != half
            || q.num_bits() as usize != half
            || !p.is_bit_set(0)
            || !q.is_bit_set(0)
            || e.num_bits() < 2
            || e.num_bits() > 64
            || dp.ucmp(&p).is_ge()
            || dq.ucmp(&q).is_ge()
            || qinv.ucmp(&p).is_ge()
        {
            return Err(CKR_KEY_SIZE_RANGE);
        }
        let mut ctx = BigNumContext::new().map_err(|_| CKR_HOST_MEMORY)?;
        let mut prod = BigNum::new().map_err(|_| CKR_HOST_MEMORY)?;
        prod.checked_mul(&p, &q, &mut ctx).map_err(err)?;
        if prod != n {
            return Err(CKR_KEY_SIZE_RANGE);
        }
        let hp = half.div_ceil(64);
        let pm = Mont::new(&p, hp).map_err(err)?;
        let qm = Mont::new(&q, hp).map_err(err)?;
        let qinv_r = pm.to_mont_bn(&qinv).map_err(err)?;
        let one = BigNum::from_u32(1).map_err(err)?;
        // Modulus and exponents only, no primes: OpenSSL's private operation then computes
        // `x^1 mod n` in one step. With the primes it would take its CRT path, whose
        // constant-time exponentiation runs over the full width of the CRT exponents whatever
        // their value: a whole RSA operation spent on padding.
        let identity = (|| {
            let rsa =
                RsaPrivateKeyBuilder::new(n.to_owned()?, one.to_owned()?, one.to_owned()?)?.build();
            PKey::from_rsa(rsa)
        })()
        .map_err(|_| CKR_FUNCTION_FAILED)?;
        let openssl = Self::openssl_key(&n, &e, &p, &q, &dp, &dq, &qinv, &mut ctx)
            .map_err(|_| CKR_FUNCTION_FAILED)?;
        Ok(RsaKey {
            bits,
            k: bits / 8,
            n_be: n.to_vec(),
            p: Prime::new(&p, &dp).map_err(err)?,
            q: Prime::new(&q, &dq).map_err(err)?,
            pm,
            qm,
            e: words(&e, 1).map_err(err)?[0],
            qinv_r,
            nm: Mont::new(&n, bits / 64).map_err(err)?,
            n_bn: n,
            blinding: (0..BLINDING_SLOTS).map(|_| Mutex::new(None)).collect(),
            fresh: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            identity,
            public: openssl.rsa().map_err(|_| CKR_FUNCTION_FAILED)?,
            openssl,
        })
    }

    /// The OpenSSL form of the key. The private exponent is not among the parts:
    /// `d = e⁻¹ mod (p−1)(q−1)` serves wherever OpenSSL uses it (its fallback when a CRT
    /// result fails its own check with `e`).
    #[allow(clippy::too_many_arguments)]
    fn openssl_key(
        n: &BigNumRef,
        e: &BigNumRef,
        p: &BigNumRef,
        q: &BigNumRef,
        dp: &BigNumRef,
        dq: &BigNumRef,
        qinv: &BigNumRef,
        ctx: &mut BigNumContext,
    ) -> Result<PKey<Private>, openssl::error::ErrorStack> {
        let (mut p1, mut q1) = (p.to_owned()?, q.to_owned()?);
        p1.sub_word(1)?;
        q1.sub_word(1)?;
        let mut phi = BigNum::new()?;
        phi.set_const_time();
        phi.checked_mul(&p1, &q1, ctx)?;
        let mut d = BigNum::new()?;
        d.mod_inverse(e, &phi, ctx)?;
        let rsa = Rsa::from_private_components(
            n.to_owned()?,
            e.to_owned()?,
            d,
            p.to_owned()?,
            q.to_owned()?,
            dp.to_owned()?,
            dq.to_owned()?,
            qinv.to_owned()?,
        )?;
        PKey::from_rsa(rsa)
    }

    /// The raw private operation `c^d mod n` (`c`: `k` big-endian bytes below `n`) with
    /// OpenSSL's own RSA code, as the software token runs it: blinding on, both CRT halves
    /// together (OpenSSL 3 runs them as one two-lane AVX-512 IFMA exponentiation where the CPU
    /// has it), the CRT result checked with `e` (recomputed without CRT on a mismatch). The
    /// scheduler's path for a request that would run nearly alone on the engine.
    pub fn private_openssl(&self, c: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
        let fail = |_| CKR_FUNCTION_FAILED;
        let mut ctx = PkeyCtx::new(&self.openssl).map_err(fail)?;
        ctx.decrypt_init().map_err(fail)?;
        ctx.set_rsa_padding(Padding::NONE).map_err(fail)?;
        let mut out = Zeroizing::new(vec![0u8; self.k]);
        let n = ctx.decrypt(c, Some(&mut out)).map_err(fail)?;
        if n != self.k {
            return Err(CKR_FUNCTION_FAILED);
        }
        Ok(out)
    }

    /// The modulus, big-endian, `k` bytes.
    pub fn modulus(&self) -> &[u8] {
        &self.n_be
    }

    /// The key itself in OpenSSL's form (blinding on), for requests the scheduler does not
    /// batch.
    pub fn openssl(&self) -> &PKey<Private> {
        &self.openssl
    }

    /// A fresh blinding state, from the key's pool; an empty pool is refilled with
    /// [`FRESH_BATCH`] states at once.
    fn fresh_blinding(&self) -> CkResult<Blinding> {
        let mut pool = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        if pool.is_empty() {
            *pool = self.fresh_blindings(FRESH_BATCH)?;
        }
        pool.pop().ok_or(CKR_FUNCTION_FAILED)
    }

    /// `count` fresh blinding states `(A·R, r⁻¹·R)`, `A = r^e`, for random `r`.
    ///
    /// The inverses come from one inversion (Montgomery's trick): the product of all the
    /// `r` and of one more random factor `s` is inverted, then each `r⁻¹` is the inverse of
    /// the product times the product of the others. OpenSSL's inversion takes a time that
    /// depends on its input; the number it inverts is uniformly random and independent of
    /// each `r` (the factor `s` is never used again), so that time tells nothing about them.
    fn fresh_blindings(&self, count: usize) -> CkResult<Vec<Blinding>> {
        let fail = |_| CKR_FUNCTION_FAILED;
        let nm = &self.nm;
        let mut ctx = BigNumContext::new().map_err(fail)?;
        let random = || -> CkResult<BigNum> {
            loop {
                let mut r = BigNum::new().map_err(fail)?;
                self.n_bn.rand_range(&mut r).map_err(fail)?;
                if r.num_bits() >= 2 {
                    return Ok(r);
                }
            }
        };
        loop {
            let mut rs = Vec::with_capacity(count);
            let mut rm = Vec::with_capacity(count);
            for _ in 0..count {
                let mut r = random()?;
                rm.push(nm.to_mont_bn(&r).map_err(fail)?);
                rs.push(Zeroizing::new(
                    r.to_vec_padded(self.k as i32).map_err(fail)?,
                ));
                r.clear();
            }
            // prefix[i] = s·r_0⋯r_(i−1)·R.
            let mut s = random()?;
            let mut prefix = vec![nm.to_mont_bn(&s).map_err(fail)?];
            s.clear();
            for r in &rm {
                let next = nm.mul(&prefix[prefix.len() - 1], r);
                prefix.push(next);
            }
            let total = Zeroizing::new(be_from_words(&nm.out_of_mont(&prefix[count]), self.k));
            let mut total = bn(&total)?;
            let mut inv = BigNum::new().map_err(fail)?;
            let inverted = inv.mod_inverse(&total, &self.n_bn, &mut ctx).is_ok();
            total.clear();
            if !inverted {
                // A factor shares a prime with n: draw again (probability about 2^-1000).
                continue;
            }
            // w = (s·r_0⋯r_(i))⁻¹·R, from i = count − 1 down.
            let mut w = nm.to_mont_bn(&inv).map_err(fail)?;
            inv.clear();
            let mut out = Vec::with_capacity(count);
            for i in (0..count).rev() {
                let ai = nm.mul(&w, &prefix[i]);
                w = nm.mul(&w, &rm[i]);
                let mut a = bn(&self.public_op(&rs[i])?)?;
                out.push(Blinding {
                    a: nm.to_mont_bn(&a).map_err(fail)?,
                    ai,
                    uses: 0,
                });
                a.clear();
            }
            return Ok(out);
        }
    }

    /// A pair of blinding factors `(A·R, r⁻¹·R)` ([`Blinding`]), each used once.
    fn blinding_pair(&self) -> CkResult<(Limbs, Limbs)> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = (0..BLINDING_SLOTS)
            .find_map(|i| self.blinding[(start + i) % BLINDING_SLOTS].try_lock().ok())
            .map_or_else(|| self.blinding[start % BLINDING_SLOTS].lock(), Ok);
        let mut g = slot.unwrap_or_else(|e| e.into_inner());
        if g.as_ref().is_none_or(|b| b.uses >= BLINDING_USES) {
            *g = Some(self.fresh_blinding()?);
        }
        let b = g.as_mut().expect("set above");
        let pair = (b.a.clone(), b.ai.clone());
        // (A·R)² / R = A²·R: the next pair is (A², r⁻²).
        b.a = self.nm.mul(&b.a, &b.a);
        b.ai = self.nm.mul(&b.ai, &b.ai);
        b.uses += 1;
        Ok(pair)
    }

    /// Blinds the input `c` (`k` big-endian bytes, below `n`: the caller checks).
    pub fn begin(&self, c: &[u8]) -> CkResult<Pending> {
        let cw = Zeroizing::new(words_from_be(c, self.nm.limbs()));
        let (a, ai) = self.blinding_pair()?;
        let blinded = self.nm.mul(&cw, &a);
        Ok(Pending {
            base_p: self.p.base(&blinded),
            base_q: self.q.base(&blinded),
            expect: [
                self.p.limbs52(&self.pm.reduce_wide(&blinded)),
                self.q.limbs52(&self.qm.reduce_wide(&blinded)),
            ],
            ai,
        })
    }

    /// Checks the two halves of one request ([`check_halves`]); `None` when either fails.
    pub fn check(
        &self,
        kind: Kind,
        pend: &Pending,
        [m1, m2]: [Zeroizing<Vec<u64>>; 2],
    ) -> Option<[CheckedHalf; 2]> {
        let halves = [m1, m2]
            .into_iter()
            .enumerate()
            .map(|(which, result)| HalfResult {
                key: self,
                which,
                expect: &pend.expect[which],
                result,
            })
            .collect();
        let [a, b]: [Option<CheckedHalf>; 2] = check_halves(kind, halves).try_into().ok()?;
        Some([a?, b?])
    }

    /// Recombines the checked halves `m1 = c'^dP mod p`, `m2 = c'^dQ mod q`, checks the
    /// recombination (`s mod p = m1`, `s mod q = m2`: with the halves' own check, `s^e mod n =
    /// c'`) and unblinds it. A result that does not check (a fault) is `CKR_DEVICE_ERROR` and
    /// is never released.
    pub fn finish(
        &self,
        pend: &Pending,
        [m1, m2]: [CheckedHalf; 2],
    ) -> CkResult<Zeroizing<Vec<u8>>> {
        let hp = self.pm.limbs();
        let m1 = Zeroizing::new(repack(&m1.0, 52, 64, hp));
        let m2 = Zeroizing::new(repack(&m2.0, 52, 64, hp));
        // m2 mod p: q < 2p (equal sizes), so one conditional subtraction.
        let m2p = self.pm.sub_if_ge(&m2, 0);
        // (m1 − m2) mod p.
        let mut t = Zeroizing::new(vec![0u64; hp]);
        let borrow = ct::sub(&m1, &m2p, &mut t);
        let pmask: Zeroizing<Vec<u64>> = Zeroizing::new(
            self.pm
                .m
                .iter()
                .map(|x| x & borrow.wrapping_neg())
                .collect(),
        );
        let mut d = Zeroizing::new(vec![0u64; hp]);
        ct::add(&t, &pmask, &mut d);
        // h = (m1 − m2)·qInv mod p; m = m2 + h·q.
        let h = self.pm.mul(&d, &self.qinv_r);
        let mut m = Zeroizing::new(vec![0u64; 2 * hp]);
        ct::mul(&h, &self.qm.m, &mut m);
        let mut m2x = Zeroizing::new(vec![0u64; 2 * hp]);
        m2x[..hp].copy_from_slice(&m2);
        let mut sum = Zeroizing::new(vec![0u64; 2 * hp]);
        ct::add(&m, &m2x, &mut sum);
        // The halves are fully reduced (below their primes).
        let recombined =
            ct::equal(&self.pm.reduce_wide(&sum), &m1) & ct::equal(&self.qm.reduce_wide(&sum), &m2);
        if !recombined {
            counters::add(counters::get().rsa_faults, 1);
            return Err(CKR_DEVICE_ERROR);
        }
        let out = self.nm.mul(&sum, &pend.ai);
        Ok(Zeroizing::new(be_from_words(&out, self.k)))
    }

    /// `x^e mod n` of `x` (`k` big-endian bytes, below `n`), `k` bytes: OpenSSL's raw public
    /// operation on the key's `RSA` object, whose Montgomery context of `n` is built once.
    fn public_op(&self, x: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
        let mut v = Zeroizing::new(vec![0u8; self.k]);
        let n = (self.public)
            .public_encrypt(x, &mut v, Padding::NONE)
            .map_err(|_| CKR_FUNCTION_FAILED)?;
        if n != self.k {
            return Err(CKR_FUNCTION_FAILED);
        }
        Ok(v)
    }

    /// The raw private operation `c^d mod n` on `kind`, without the scheduler.
    pub fn private_raw(&self, kind: Kind, c: &[u8]) -> CkResult<Zeroizing<Vec<u8>>> {
        let pend = self.begin(c)?;
        let [m1, m2]: [Zeroizing<Vec<u64>>; 2] = engine::half_exps(kind, &self.jobs(&pend))
            .try_into()
            .map_err(|_| CKR_DEVICE_ERROR)?;
        let halves = self.check(kind, &pend, [m1, m2]).ok_or(CKR_DEVICE_ERROR)?;
        self.finish(&pend, halves)
    }

    /// The two half-exponentiations of an operation begun with [`RsaKey::begin`].
    pub fn jobs<'a>(&'a self, pend: &'a Pending) -> [Job<'a>; 2] {
        [
            Job {
                prime: &self.p,
                base: &pend.base_p,
            },
            Job {
                prime: &self.q,
                base: &pend.base_q,
            },
        ]
    }

    /// Whether `c` (`k` big-endian bytes) is below the modulus (public data).
    pub fn below_modulus(&self, c: &[u8]) -> bool {
        c.len() == self.k && c < self.n_be.as_slice()
    }
}

/// The parts of an OpenSSL RSA key (tests, and keys given by value or unwrapped).
pub fn parts_of(rsa: &Rsa<Private>) -> Option<[Vec<u8>; 7]> {
    let v = |b: Option<&BigNumRef>| b.map(|x| x.to_vec());
    Some([
        rsa.n().to_vec(),
        rsa.e().to_vec(),
        v(rsa.p())?,
        v(rsa.q())?,
        v(rsa.dmp1())?,
        v(rsa.dmq1())?,
        v(rsa.iqmp())?,
    ])
}

/// Builds the engine form of an OpenSSL key.
pub fn from_openssl(rsa: &Rsa<Private>) -> CkResult<RsaKey> {
    let p = parts_of(rsa).ok_or(CKR_KEY_SIZE_RANGE)?;
    RsaKey::new(&RsaParts::from_array(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every fresh state is a matching pair `(r^e·R, r⁻¹·R)`: `A·(r⁻¹)^e = 1 mod n`, and no
    /// two states of a batch are alike.
    #[test]
    fn fresh_blindings_are_inverse_pairs() {
        let rsa = Rsa::generate(2048).unwrap();
        let key = from_openssl(&rsa).unwrap();
        let mut ctx = BigNumContext::new().unwrap();
        let plain = |x: &[u64]| bn(&be_from_words(&key.nm.out_of_mont(x), key.k)).unwrap();
        for count in [1, 2, FRESH_BATCH] {
            let states = key.fresh_blindings(count).unwrap();
            assert_eq!(states.len(), count);
            for (i, b) in states.iter().enumerate() {
                let mut ai_e = BigNum::new().unwrap();
                ai_e.mod_exp(&plain(&b.ai), rsa.e(), rsa.n(), &mut ctx)
                    .unwrap();
                let mut prod = BigNum::new().unwrap();
                prod.mod_mul(&ai_e, &plain(&b.a), rsa.n(), &mut ctx)
                    .unwrap();
                assert_eq!(prod, BigNum::from_u32(1).unwrap(), "state {i} of {count}");
                assert!(states[..i].iter().all(|o| o.ai[..] != b.ai[..]));
            }
        }
        // The pool hands them out one at a time and refills itself.
        for _ in 0..FRESH_BATCH + 1 {
            key.fresh_blinding().unwrap();
        }
        assert_eq!(key.fresh.lock().unwrap().len(), FRESH_BATCH - 1);
    }
}
