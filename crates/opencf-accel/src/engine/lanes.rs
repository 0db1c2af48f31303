//! The multi-buffer Montgomery exponentiation, written once and instantiated per instruction
//! set by [`lane_engine!`]: `portable.rs` (eight `u64` lanes in plain Rust) and `ifma.rs`
//! (one AVX-512 register, `vpmadd52luq`/`vpmadd52huq`).
//!
//! The instantiating module defines the lane vector `V`, the lane mask `Mask` and the
//! operations `zero`, `splat`, `lanes`, `unlanes`, `add`, `and`, `srl52`, `madd_lo`,
//! `madd_hi`, `eq_mask`, `blend`, with the semantics of the IFMA instructions: `madd_lo(a, b,
//! c)` adds the low 52 bits of the 104-bit product of the low 52 bits of `b` and `c` to the
//! 64-bit `a`; `madd_hi` adds the high 52 bits.
//!
//! Numbers are little-endian arrays of 52-bit limbs, one array element per limb position and
//! one lane per exponentiation. All control flow and every memory index depend only on the
//! shape of the pass (limb count, window count), never on the lanes' values: the table lookup
//! reads every entry and keeps the wanted one with a lane mask.

/// Generates `pub(super) fn run(&Pass) -> Vec<[u64; 8]>` and its helpers, each with the
/// given attributes (the target features of the instruction set).
macro_rules! lane_engine {
    ($(#[$attr:meta])*) => {
        use $crate::engine::{Pass, MASK52, WINDOW};

        $(#[$attr])*
        #[inline]
        fn load(a: &[[u64; 8]]) -> Vec<V> {
            let mut out = Vec::with_capacity(a.len());
            for x in a {
                out.push(lanes(*x));
            }
            out
        }

        /// Carry propagation: every limb below 2^52. The carry out of the top limb is zero by
        /// the bounds of the callers (values below 2^(52·limbs)).
        $(#[$attr])*
        #[inline]
        fn normalize(x: &mut [V]) {
            let mask = splat(MASK52);
            let mut carry = zero();
            for v in x.iter_mut() {
                let t = add(*v, carry);
                carry = srl52(t);
                *v = and(t, mask);
            }
        }

        /// Almost Montgomery multiplication: `out = a·b·R⁻¹ mod m`, `R = 2^(52·l)`, with
        /// `out < 2m` for `a, b < 4m` (the limb count gives `R ≥ 16m`). `acc` has `l + 1`
        /// limbs of scratch.
        $(#[$attr])*
        #[inline]
        fn amm(a: &[V], b: &[V], m: &[V], k0: V, acc: &mut [V], out: &mut [V]) {
            let l = m.len();
            for x in acc.iter_mut() {
                *x = zero();
            }
            for i in 0..l {
                let bi = b[i];
                for j in 0..l {
                    acc[j] = madd_lo(acc[j], a[j], bi);
                    acc[j + 1] = madd_hi(acc[j + 1], a[j], bi);
                }
                // y = acc[0]·(−m⁻¹) mod 2^52: adding y·m clears the low limb.
                let y = madd_lo(zero(), acc[0], k0);
                for j in 0..l {
                    acc[j] = madd_lo(acc[j], m[j], y);
                    acc[j + 1] = madd_hi(acc[j + 1], m[j], y);
                }
                acc[1] = add(acc[1], srl52(acc[0]));
                for j in 0..l {
                    acc[j] = acc[j + 1];
                }
                acc[l] = zero();
            }
            out.copy_from_slice(&acc[..l]);
            normalize(out);
        }

        /// Lane-wise constant-time lookup: lane `i` of `out` gets entry `idx_i` of `table`
        /// (entries of `l` limbs). Every entry is read.
        $(#[$attr])*
        #[inline]
        fn select(table: &[V], l: usize, idx: V, out: &mut [V]) {
            for x in out.iter_mut() {
                *x = zero();
            }
            for t in 0..table.len() / l {
                let hit = eq_mask(idx, t as u64);
                for j in 0..l {
                    out[j] = blend(hit, out[j], table[t * l + j]);
                }
            }
        }

        /// Eight modular exponentiations of the same shape: lane `i` computes
        /// `base_i^exp_i mod m_i`, in `[0, m_i]` (the caller subtracts `m_i` once, in
        /// constant time, to reduce fully).
        $(#[$attr])*
        pub(super) fn run(p: &Pass) -> Vec<[u64; 8]> {
            let l = p.limbs;
            let m = load(&p.m);
            let k0 = lanes(p.k0);
            let rr = load(&p.rr);
            let rrr = load(&p.rrr);
            let lo = load(&p.lo);
            let hi = load(&p.hi);
            let mut acc = vec![zero(); l + 1];
            let mut x = vec![zero(); l];
            let mut t = vec![zero(); l];
            let mut s = vec![zero(); l];
            // The base in Montgomery form: (lo + hi·R)·R = amm(lo, R²) + amm(hi, R³) < 4m.
            amm(&lo, &rr, &m, k0, &mut acc, &mut x);
            amm(&hi, &rrr, &m, k0, &mut acc, &mut t);
            for j in 0..l {
                x[j] = add(x[j], t[j]);
            }
            normalize(&mut x);
            let size = 1usize << WINDOW;
            let mut one = vec![zero(); l];
            one[0] = splat(1);
            let mut table = vec![zero(); size * l];
            // table[i] = x^i in Montgomery form; table[0] = R mod m = amm(R², 1).
            amm(&rr, &one, &m, k0, &mut acc, &mut table[..l]);
            table[l..2 * l].copy_from_slice(&x);
            for i in 2..size {
                let (done, rest) = table.split_at_mut(i * l);
                amm(&done[(i - 1) * l..], &x, &m, k0, &mut acc, &mut rest[..l]);
            }
            // Fixed windows, most significant first.
            let mut r = vec![zero(); l];
            select(&table, l, lanes(p.windows[0]), &mut r);
            for w in &p.windows[1..] {
                for _ in 0..WINDOW {
                    amm(&r, &r, &m, k0, &mut acc, &mut s);
                    core::mem::swap(&mut r, &mut s);
                }
                select(&table, l, lanes(*w), &mut t);
                amm(&r, &t, &m, k0, &mut acc, &mut s);
                core::mem::swap(&mut r, &mut s);
            }
            // Out of Montgomery form: amm(r, 1) ≤ m.
            amm(&r, &one, &m, k0, &mut acc, &mut s);
            let mut out = Vec::with_capacity(l);
            for v in &s {
                out.push(unlanes(*v));
            }
            out
        }
    };
}

pub(crate) use lane_engine;
