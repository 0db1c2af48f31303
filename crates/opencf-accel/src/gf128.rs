//! Arithmetic in GF(2^128) as GCM defines it (NIST SP 800-38D, 6.3): a block is a
//! polynomial whose first bit (the most significant bit of its first byte) is the
//! coefficient of `x^0`, reduced modulo `x^128 + x^7 + x^2 + x + 1`. A block is held as the
//! `u128` of its bytes read big-endian ([`block`]).
//!
//! Constant time: [`mul`] is a bitwise carry-less multiplication whose 128 rounds always run
//! and whose conditional additions are masks, not branches or table lookups, so its time does
//! not depend on its operands. [`pow`] branches on its exponent, which must be public (the
//! bulk engine raises `H` to powers given by data lengths); [`inverse`] uses a fixed exponent.
//! Speed hardly matters here: the bulk engine needs a few multiplications per part of an
//! operation and a few hundred per key.

/// The reduction constant: `x^128 = x^7 + x^2 + x + 1`, as the bits `11100001` followed by
/// 120 zero bits.
const R: u128 = 0xe1 << 120;

/// The `u128` of a 16-byte block.
pub fn block(b: &[u8; 16]) -> u128 {
    u128::from_be_bytes(*b)
}

/// `x · y` (SP 800-38D, Algorithm 1), in constant time.
pub fn mul(x: u128, y: u128) -> u128 {
    let mut z = 0u128;
    let mut v = y;
    for i in 0..128 {
        // Bit i of x, counted from the most significant end, as a mask of all ones or zeros.
        let bit = (x >> (127 - i)) & 1;
        z ^= v & bit.wrapping_neg();
        let carry = v & 1;
        v = (v >> 1) ^ (R & carry.wrapping_neg());
    }
    z
}

/// The multiplicative identity (the polynomial 1: the first bit set).
pub const ONE: u128 = 1 << 127;

/// `h^n` by square-and-multiply. `n` is public: the loop branches on its bits.
pub fn pow(h: u128, n: u64) -> u128 {
    let mut r = ONE;
    for i in (0..64 - n.leading_zeros()).rev() {
        r = mul(r, r);
        if (n >> i) & 1 == 1 {
            r = mul(r, h);
        }
    }
    r
}

/// `h^(2^i)` for `i` below `N`: raising `h` to an `N`-bit public exponent then takes one
/// multiplication per set bit ([`Powers::pow`]).
pub struct Powers<const N: usize>([u128; N]);

impl<const N: usize> Powers<N> {
    /// The table for `h` (`N − 1` squarings).
    pub fn new(h: u128) -> Self {
        let mut t = [0u128; N];
        let mut p = h;
        for e in t.iter_mut() {
            *e = p;
            p = mul(p, p);
        }
        Powers(t)
    }

    /// `h^n` for public `n < 2^N` (the loop branches on the bits of `n`).
    pub fn pow(&self, n: u64) -> u128 {
        let mut r = ONE;
        for (i, p) in self.0.iter().enumerate() {
            if (n >> i) & 1 == 1 {
                r = mul(r, *p);
            }
        }
        assert!(N >= 64 || n >> N == 0, "exponent below 2^N");
        r
    }
}

impl<const N: usize> Drop for Powers<N> {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

/// `h⁻¹ = h^(2^128 − 2)` (0 for 0), with a fixed sequence of 254 multiplications.
pub fn inverse(h: u128) -> u128 {
    // 2^128 − 2 = 2 + 4 + … + 2^127: the product of h^(2^k) for k = 1 … 127.
    let mut p = h;
    let mut r = ONE;
    for _ in 1..128 {
        p = mul(p, p);
        r = mul(r, p);
    }
    r
}

/// GHASH of `data` (padded with zeros to whole blocks) continuing from `y`:
/// `y ← (y ⊕ Xᵢ) · h` for each block.
pub fn ghash(h: u128, mut y: u128, data: &[u8]) -> u128 {
    for c in data.chunks(16) {
        let mut b = [0u8; 16];
        b[..c.len()].copy_from_slice(c);
        y = mul(y ^ block(&b), h);
    }
    y
}

/// The length block of GCM: `[bits of a]₆₄ ‖ [bits of c]₆₄`.
pub fn lengths(a_bytes: u64, c_bytes: u64) -> u128 {
    (u128::from(a_bytes.wrapping_mul(8)) << 64) | u128::from(c_bytes.wrapping_mul(8))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slow, obviously-correct multiplication on byte arrays, bit by bit as the standard
    /// writes it (with branches: test only).
    fn mul_reference(x: [u8; 16], y: [u8; 16]) -> [u8; 16] {
        let mut z = [0u8; 16];
        let mut v = y;
        for i in 0..128 {
            if x[i / 8] >> (7 - i % 8) & 1 == 1 {
                for k in 0..16 {
                    z[k] ^= v[k];
                }
            }
            let lsb = v[15] & 1;
            for k in (1..16).rev() {
                v[k] = (v[k] >> 1) | (v[k - 1] << 7);
            }
            v[0] >>= 1;
            if lsb == 1 {
                v[0] ^= 0xe1;
            }
        }
        z
    }

    fn random() -> u128 {
        let mut b = [0u8; 16];
        openssl::rand::rand_bytes(&mut b).unwrap();
        block(&b)
    }

    #[test]
    fn mul_matches_the_reference() {
        for _ in 0..200 {
            let (x, y) = (random(), random());
            assert_eq!(
                mul(x, y).to_be_bytes(),
                mul_reference(x.to_be_bytes(), y.to_be_bytes())
            );
            assert_eq!(mul(x, y), mul(y, x));
            assert_eq!(mul(x, ONE), x);
        }
    }

    #[test]
    fn powers_and_inverse() {
        for _ in 0..20 {
            let h = random();
            assert_eq!(pow(h, 0), ONE);
            assert_eq!(pow(h, 1), h);
            let mut p = ONE;
            for n in 0..40u64 {
                assert_eq!(pow(h, n), p, "h^{n}");
                p = mul(p, h);
            }
            assert_eq!(pow(h, 1000), mul(pow(h, 600), pow(h, 400)));
            let t = Powers::<34>::new(h);
            for n in [
                0,
                1,
                2,
                3,
                1000,
                65_535,
                1 << 20,
                (1 << 32) - 2,
                (1 << 34) - 1,
            ] {
                assert_eq!(t.pow(n), pow(h, n), "table power {n}");
            }
            assert_eq!(mul(h, inverse(h)), ONE);
        }
        assert_eq!(inverse(0), 0);
    }

    /// The GHASH test vector of SP 800-38D's companion document (AES-GCM test case 2:
    /// key 0, one zero block of plaintext).
    #[test]
    fn ghash_of_test_case_2() {
        let h = 0x66e94bd4ef8a2c3b884cfa59ca342b2e_u128;
        let c = 0x0388dace60b6a392f328c2b971b2fe78_u128.to_be_bytes();
        let y = ghash(h, 0, &c);
        let y = mul(y ^ lengths(0, 16), h);
        assert_eq!(y, 0xf38cbb1ad69223dcc3457ae5b6b0f885);
    }
}
