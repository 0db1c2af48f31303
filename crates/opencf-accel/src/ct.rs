//! Constant-time arithmetic on 64-bit limbs around the engine: RSA blinding and unblinding
//! modulo `n`, the CRT recombination, and the check of the result with the public exponent.
//!
//! Loops run over the full limb count; selections use masks, never branches on values.

use crate::engine::{neg_inv64, words};
use openssl::bn::{BigNum, BigNumContext, BigNumRef};
use openssl::error::ErrorStack;
use zeroize::Zeroizing;

/// All ones when `bit` is 1, zero when 0.
#[inline(always)]
fn mask(bit: u64) -> u64 {
    bit.wrapping_neg()
}

/// `a − b` into `out` (equal lengths); returns the borrow (0 or 1).
pub fn sub(a: &[u64], b: &[u64], out: &mut [u64]) -> u64 {
    let mut borrow = 0u64;
    for i in 0..a.len() {
        let (d1, b1) = a[i].overflowing_sub(b[i]);
        let (d2, b2) = d1.overflowing_sub(borrow);
        out[i] = d2;
        borrow = u64::from(b1) | u64::from(b2);
    }
    borrow
}

/// `a + b` into `out` (equal lengths); returns the carry.
pub fn add(a: &[u64], b: &[u64], out: &mut [u64]) -> u64 {
    let mut carry = 0u64;
    for i in 0..a.len() {
        let s = u128::from(a[i]) + u128::from(b[i]) + u128::from(carry);
        out[i] = s as u64;
        carry = (s >> 64) as u64;
    }
    carry
}

/// `out = if bit { b } else { a }`.
pub fn select(bit: u64, a: &[u64], b: &[u64], out: &mut [u64]) {
    let m = mask(bit);
    for i in 0..out.len() {
        out[i] = (a[i] & !m) | (b[i] & m);
    }
}

/// Whether `a == b`, looking at every limb.
pub fn equal(a: &[u64], b: &[u64]) -> bool {
    let mut diff = 0u64;
    for i in 0..a.len() {
        diff |= a[i] ^ b[i];
    }
    diff == 0
}

/// `a·b` (schoolbook) into `out` of `a.len() + b.len()` limbs.
pub fn mul(a: &[u64], b: &[u64], out: &mut [u64]) {
    out.iter_mut().for_each(|x| *x = 0);
    for i in 0..b.len() {
        let mut carry = 0u64;
        for j in 0..a.len() {
            let t =
                u128::from(a[j]) * u128::from(b[i]) + u128::from(out[i + j]) + u128::from(carry);
            out[i + j] = t as u64;
            carry = (t >> 64) as u64;
        }
        out[i + a.len()] = carry;
    }
}

/// Montgomery arithmetic modulo an odd `m` of `n` 64-bit limbs, `R = 2^(64·n)`.
pub struct Mont {
    /// The modulus (a secret prime for the CRT halves: wiped on drop).
    pub m: Zeroizing<Vec<u64>>,
    m0: u64,
    /// `R² mod m`.
    rr: Zeroizing<Vec<u64>>,
}

/// The largest modulus [`Mont`] takes, in 64-bit limbs (4096 bits).
pub const MAX_LIMBS: usize = 64;

impl Mont {
    /// The context of `m` in `n` limbs (at most [`MAX_LIMBS`]).
    pub fn new(m: &BigNumRef, n: usize) -> Result<Mont, ErrorStack> {
        assert!(n <= MAX_LIMBS, "a modulus of {n} limbs");
        let mut ctx = BigNumContext::new()?;
        let mut big = BigNum::new()?;
        big.lshift(&*BigNum::from_u32(1)?, (128 * n) as i32)?;
        let mut rr = BigNum::new()?;
        rr.nnmod(&big, m, &mut ctx)?;
        let mw = words(m, n)?;
        Ok(Mont {
            m0: neg_inv64(mw[0]),
            m: mw,
            rr: words(&rr, n)?,
        })
    }

    /// Limbs.
    pub fn limbs(&self) -> usize {
        self.m.len()
    }

    /// `x·R mod m` of a `BigNum` below `m` (OpenSSL, for values computed once: blinding
    /// factors, key constants).
    pub fn to_mont_bn(&self, x: &BigNumRef) -> Result<Zeroizing<Vec<u64>>, ErrorStack> {
        let w = words(x, self.limbs())?;
        Ok(self.mul(&w, &self.rr))
    }

    /// `x mod m` of `x` below `R²` (`2n` limbs), for a modulus with its top bit set
    /// (`m > R/2`): `x = lo + hi·R`, `hi·R mod m` by one multiplication with `R² mod m`, and
    /// `lo < R < 2m` by one conditional subtraction.
    pub fn reduce_wide(&self, x: &[u64]) -> Zeroizing<Vec<u64>> {
        let n = self.limbs();
        assert!(
            self.m[n - 1] >> 63 == 1,
            "the modulus must fill its top limb"
        );
        let hi = self.mul(&x[n..2 * n], &self.rr);
        let lo = self.sub_if_ge(&x[..n], 0);
        let mut sum = Zeroizing::new(vec![0u64; n]);
        let carry = add(&lo, &hi, &mut sum);
        self.sub_if_ge(&sum, carry)
    }

    /// `x − m` if `top·R + x ≥ m`, else `x` (`top` is 0 or 1; the value is below `2m`).
    pub fn sub_if_ge(&self, x: &[u64], top: u64) -> Zeroizing<Vec<u64>> {
        let n = self.limbs();
        let mut diff = Zeroizing::new([0u64; MAX_LIMBS]);
        let d = &mut diff[..n];
        let borrow = sub(x, &self.m, d);
        let (_, under) = top.overflowing_sub(borrow);
        let mut out = Zeroizing::new(vec![0u64; n]);
        select(u64::from(under), d, x, &mut out);
        out
    }

    /// `x·R⁻¹ mod m` for `x < R`: a value out of Montgomery form.
    pub fn out_of_mont(&self, x: &[u64]) -> Zeroizing<Vec<u64>> {
        let mut one = vec![0u64; self.limbs()];
        one[0] = 1;
        self.mul(x, &one)
    }

    /// `a·b·R⁻¹ mod m`, fully reduced, for `a < R` and `b < m` (word-by-word Montgomery
    /// multiplication, the product and the reduction of each word in one loop with two
    /// independent carry chains). The scratch lives on the stack (moduli of up to
    /// [`MAX_LIMBS`] limbs) and is wiped on return.
    #[allow(clippy::needless_range_loop)] // the limb loops are clearest with indices
    pub fn mul(&self, a: &[u64], b: &[u64]) -> Zeroizing<Vec<u64>> {
        let n = self.limbs();
        let (a, b, m) = (&a[..n], &b[..n], &self.m[..n]);
        let mut scratch = Zeroizing::new([0u64; MAX_LIMBS + 1]);
        let t = &mut scratch[..n + 1];
        for i in 0..n {
            let bi = u128::from(b[i]);
            let s = u128::from(t[0]) + u128::from(a[0]) * bi;
            let y = (s as u64).wrapping_mul(self.m0);
            let yy = u128::from(y);
            // The low word of s + y·m_0 is zero by the choice of y.
            let r = u128::from(s as u64) + yy * u128::from(m[0]);
            let (mut c1, mut c2) = ((s >> 64) as u64, (r >> 64) as u64);
            for j in 1..n {
                let s = u128::from(t[j]) + u128::from(a[j]) * bi + u128::from(c1);
                let r = u128::from(s as u64) + yy * u128::from(m[j]) + u128::from(c2);
                c1 = (s >> 64) as u64;
                c2 = (r >> 64) as u64;
                t[j - 1] = r as u64;
            }
            let s = u128::from(t[n]) + u128::from(c1) + u128::from(c2);
            t[n - 1] = s as u64;
            t[n] = (s >> 64) as u64;
        }
        // t < 2m: subtract m once unless that borrows out of the top limb.
        self.sub_if_ge(&t[..n], t[n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Mont {
        /// `x·R mod m` for `x < m`.
        fn to_mont(&self, x: &[u64]) -> Zeroizing<Vec<u64>> {
            self.mul(x, &self.rr)
        }
    }

    /// `2^bits`.
    fn pow2(bits: usize) -> BigNum {
        let mut x = BigNum::new().unwrap();
        x.lshift(&BigNum::from_u32(1).unwrap(), bits as i32)
            .unwrap();
        x
    }

    /// A random `bits`-bit prime, its limb count and its context.
    fn random_modulus(bits: i32) -> (BigNum, usize, Mont) {
        let mut m = BigNum::new().unwrap();
        m.generate_prime(bits, false, None, None).unwrap();
        let n = (bits as usize).div_ceil(64);
        let mont = Mont::new(&m, n).unwrap();
        (m, n, mont)
    }

    #[test]
    fn reduce_wide_matches_openssl() {
        let mut ctx = BigNumContext::new().unwrap();
        for bits in [1024, 1536] {
            let (m, n, mont) = random_modulus(bits);
            let mut square = BigNum::new().unwrap();
            square.sqr(&m, &mut ctx).unwrap();
            let mut top = pow2(128 * n);
            top.sub_word(1).unwrap();
            let mut values = vec![BigNum::new().unwrap(), m.to_owned().unwrap(), top];
            for _ in 0..40 {
                let mut x = BigNum::new().unwrap();
                square.rand_range(&mut x).unwrap();
                values.push(x);
            }
            for x in &values {
                let got = mont.reduce_wide(&words(x, 2 * n).unwrap());
                let mut want = BigNum::new().unwrap();
                want.nnmod(x, &m, &mut ctx).unwrap();
                assert_eq!(&got[..], &words(&want, n).unwrap()[..], "{x}");
            }
        }
    }

    /// `mul(a, b) = a·b·R⁻¹ mod m` at the edges of its bounds: `a` anywhere below `R`
    /// (including `R − 1`), `b` below `m` (including `m − 1`), for moduli with and without
    /// their top bit set.
    #[test]
    fn montgomery_edges_match_openssl() {
        let mut ctx = BigNumContext::new().unwrap();
        for bits in [1024, 1000, 2048] {
            let (m, n, mont) = random_modulus(bits);
            let big = |x: &BigNumRef| x.to_owned().unwrap();
            let r = pow2(64 * n);
            let mut r_inv = BigNum::new().unwrap();
            r_inv.mod_inverse(&r, &m, &mut ctx).unwrap();
            let mut r1 = big(&r);
            r1.sub_word(1).unwrap();
            let mut m1 = big(&m);
            m1.sub_word(1).unwrap();
            let mut mid = BigNum::new().unwrap();
            m.rand_range(&mut mid).unwrap();
            let small = [
                BigNum::new().unwrap(),
                BigNum::from_u32(1).unwrap(),
                big(&m1),
                mid,
            ];
            let mut wide = small.iter().map(|x| big(x)).collect::<Vec<_>>();
            wide.extend([big(&m), big(&r1)]);
            for a in &wide {
                for b in &small {
                    let got = mont.mul(&words(a, n).unwrap(), &words(b, n).unwrap());
                    let mut ab = BigNum::new().unwrap();
                    ab.checked_mul(a, b, &mut ctx).unwrap();
                    let mut want = BigNum::new().unwrap();
                    want.mod_mul(&ab, &r_inv, &m, &mut ctx).unwrap();
                    assert_eq!(&got[..], &words(&want, n).unwrap()[..], "{bits}: {a} · {b}");
                }
            }
        }
    }

    #[test]
    fn montgomery_matches_openssl() {
        let mut ctx = BigNumContext::new().unwrap();
        for bits in [128, 1024, 2048] {
            let (m, n, mont) = random_modulus(bits);
            for _ in 0..20 {
                let mut a = BigNum::new().unwrap();
                let mut b = BigNum::new().unwrap();
                m.rand_range(&mut a).unwrap();
                m.rand_range(&mut b).unwrap();
                let aw = words(&a, n).unwrap();
                let bw = words(&b, n).unwrap();
                let got = mont.out_of_mont(&mont.mul(&mont.to_mont(&aw), &mont.to_mont(&bw)));
                let mut want = BigNum::new().unwrap();
                want.mod_mul(&a, &b, &m, &mut ctx).unwrap();
                assert_eq!(&got[..], &words(&want, n).unwrap()[..]);
            }
        }
    }
}
