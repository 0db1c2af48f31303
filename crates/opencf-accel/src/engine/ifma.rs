//! The lane engine on AVX-512 IFMA: one 512-bit register holds limb `j` of eight numbers;
//! `vpmadd52luq`/`vpmadd52huq` do eight 52×52-bit multiply-adds at once.
//!
//! The RSA exponentiation (`lanes.rs`) and the P-256 signatures (`p256_lanes.rs`) are
//! instantiated here. Every function here is compiled with `avx512f,avx512ifma` enabled; calling [`run`] is
//! sound only on a CPU that has both (see `super::run`, the one caller, which checks).
//! Vectors are built from and read back into arrays with value intrinsics only (no pointer
//! loads or stores), so the module has no `unsafe` code.

use core::arch::x86_64::*;

type V = __m512i;
type Mask = __mmask8;

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn zero() -> V {
    _mm512_setzero_si512()
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn splat(x: u64) -> V {
    _mm512_set1_epi64(x as i64)
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn lanes(a: [u64; 8]) -> V {
    _mm512_set_epi64(
        a[7] as i64,
        a[6] as i64,
        a[5] as i64,
        a[4] as i64,
        a[3] as i64,
        a[2] as i64,
        a[1] as i64,
        a[0] as i64,
    )
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn unlanes(v: V) -> [u64; 8] {
    let lo = _mm512_castsi512_si256(v);
    let hi = _mm512_extracti64x4_epi64::<1>(v);
    [
        _mm256_extract_epi64::<0>(lo) as u64,
        _mm256_extract_epi64::<1>(lo) as u64,
        _mm256_extract_epi64::<2>(lo) as u64,
        _mm256_extract_epi64::<3>(lo) as u64,
        _mm256_extract_epi64::<0>(hi) as u64,
        _mm256_extract_epi64::<1>(hi) as u64,
        _mm256_extract_epi64::<2>(hi) as u64,
        _mm256_extract_epi64::<3>(hi) as u64,
    ]
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn add(a: V, b: V) -> V {
    _mm512_add_epi64(a, b)
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn and(a: V, b: V) -> V {
    _mm512_and_si512(a, b)
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn srl52(a: V) -> V {
    _mm512_srli_epi64::<52>(a)
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn madd_lo(a: V, b: V, c: V) -> V {
    _mm512_madd52lo_epu64(a, b, c)
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn madd_hi(a: V, b: V, c: V) -> V {
    _mm512_madd52hi_epu64(a, b, c)
}

/// The lanes where `idx == t`, as a mask register (no branch).
#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn eq_mask(idx: V, t: u64) -> Mask {
    _mm512_cmpeq_epi64_mask(idx, splat(t))
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn blend(m: Mask, a: V, b: V) -> V {
    _mm512_mask_blend_epi64(m, a, b)
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn sub(a: V, b: V) -> V {
    _mm512_sub_epi64(a, b)
}

#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn sra52(a: V) -> V {
    _mm512_srai_epi64::<52>(a)
}

/// The lanes whose value is negative as a signed number.
#[target_feature(enable = "avx512f,avx512ifma")]
#[inline]
fn neg_mask(a: V) -> Mask {
    _mm512_cmplt_epi64_mask(a, zero())
}

super::lanes::lane_engine!(#[target_feature(enable = "avx512f,avx512ifma")]);
super::p256_lanes::p256_engine!(#[target_feature(enable = "avx512f,avx512ifma")]);
