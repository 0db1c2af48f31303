//! The lane engine in plain Rust: eight `u64` lanes, 52-bit limbs, products through `u128`.
//! Runs on every CPU. It is the reference the IFMA engine is checked against (both are
//! checked against OpenSSL), not a provider engine: it is slower than OpenSSL's own RSA.

type V = [u64; 8];
type Mask = [u64; 8];

#[inline(always)]
fn zero() -> V {
    [0; 8]
}

#[inline(always)]
fn splat(x: u64) -> V {
    [x; 8]
}

#[inline(always)]
fn lanes(a: [u64; 8]) -> V {
    a
}

#[inline(always)]
fn unlanes(v: V) -> [u64; 8] {
    v
}

#[inline(always)]
fn add(a: V, b: V) -> V {
    std::array::from_fn(|i| a[i].wrapping_add(b[i]))
}

#[inline(always)]
fn and(a: V, b: V) -> V {
    std::array::from_fn(|i| a[i] & b[i])
}

#[inline(always)]
fn srl52(a: V) -> V {
    std::array::from_fn(|i| a[i] >> 52)
}

#[inline(always)]
fn product(b: u64, c: u64) -> u128 {
    u128::from(b & MASK52) * u128::from(c & MASK52)
}

#[inline(always)]
fn madd_lo(a: V, b: V, c: V) -> V {
    std::array::from_fn(|i| a[i].wrapping_add(product(b[i], c[i]) as u64 & MASK52))
}

#[inline(always)]
fn madd_hi(a: V, b: V, c: V) -> V {
    std::array::from_fn(|i| a[i].wrapping_add((product(b[i], c[i]) >> 52) as u64))
}

/// All ones in the lanes where `idx == t`, without a branch.
#[inline(always)]
fn eq_mask(idx: V, t: u64) -> Mask {
    std::array::from_fn(|i| {
        let x = idx[i] ^ t;
        ((x | x.wrapping_neg()) >> 63).wrapping_sub(1)
    })
}

#[inline(always)]
fn blend(m: Mask, a: V, b: V) -> V {
    std::array::from_fn(|i| (a[i] & !m[i]) | (b[i] & m[i]))
}

#[inline(always)]
fn sub(a: V, b: V) -> V {
    std::array::from_fn(|i| a[i].wrapping_sub(b[i]))
}

#[inline(always)]
fn sra52(a: V) -> V {
    std::array::from_fn(|i| ((a[i] as i64) >> 52) as u64)
}

/// All ones in the lanes whose value is negative as a signed number.
#[inline(always)]
fn neg_mask(a: V) -> Mask {
    std::array::from_fn(|i| ((a[i] as i64) >> 63) as u64)
}

super::lanes::lane_engine!();
super::p256_lanes::p256_engine!();
