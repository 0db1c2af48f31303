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
//!
//! The limb count is a constant of each instantiation (`L` = 20, 30 and 40 for the primes of
//! RSA-2048, -3072 and -4096). Up to [`ROWS_MAX_LIMBS`] the multiplication scans operands: the
//! loops over limbs unroll and, for `L = 20`, the running sum stays in registers (20 of the 32
//! vector registers); each step writes the running sum's limbs one place down as it computes
//! them, so the shift of the Montgomery reduction costs no copy. Above it (40 limbs, whose
//! running sum would live in memory, a load and a store around every two multiply-adds) it
//! scans product columns, each summed whole in a few registers. Squarings, most of an
//! exponentiation, compute each cross product once. Every limb of a running sum collects at
//! most `4L` products of 52 bits and stays below 2^60, so no carry is propagated until the
//! end.

/// The largest limb count whose multiplications scan operands (a row of `a·b_i` a step, the
/// running sum in registers); above it they scan product columns, whose running sums are a
/// few registers whatever the limb count. Measured on an AMD Zen 4 (docs/ACCEL.md, "Two ways
/// to multiply"): rows are faster for 20 and 30 limbs, columns for 40, where the rows' running
/// sum no longer fits the 32 vector registers.
pub(super) const ROWS_MAX_LIMBS: usize = 30;

/// Generates `pub(super) fn run(Work) -> Vec<[u64; 8]>` and its helpers, each with the
/// given attributes (the target features of the instruction set).
macro_rules! lane_engine {
    ($(#[$attr:meta])*) => {
        use $crate::engine::lanes::ROWS_MAX_LIMBS;
        use $crate::engine::{Moduli, Pass, PublicPass, Work, MASK52};

        $(#[$attr])*
        #[inline]
        fn load<const L: usize>(a: &[[u64; 8]]) -> [V; L] {
            core::array::from_fn(|j| lanes(a[j]))
        }

        /// The moduli, `−m⁻¹ mod 2^52` and `R² mod m` as lane vectors.
        $(#[$attr])*
        #[inline]
        fn load_moduli<const L: usize>(p: &Moduli) -> ([V; L], V, [V; L]) {
            (load(&p.m), lanes(p.k0), load(&p.rr))
        }

        /// Carry propagation: every limb below 2^52. The carry out of the top limb is zero by
        /// the bounds of the callers (values below 2^(52·limbs)).
        $(#[$attr])*
        #[inline]
        fn normalize<const L: usize>(x: &mut [V; L]) {
            let mask = splat(MASK52);
            let mut carry = zero();
            for v in x.iter_mut() {
                let t = add(*v, carry);
                carry = srl52(t);
                *v = and(t, mask);
            }
        }

        /// `madd_hi` when `HIGH`, else `madd_lo` (a function, not a closure, so that the
        /// compiler inlines it like the rest: an out-of-line closure here costs a third of
        /// the pass).
        $(#[$attr])*
        #[inline]
        fn madd_part<const HIGH: bool>(s: V, x: V, y: V) -> V {
            if HIGH {
                madd_hi(s, x, y)
            } else {
                madd_lo(s, x, y)
            }
        }

        /// The sum of the low (`HIGH = false`) or high halves of the cross products
        /// `a_i·a_j`, `i < j`, `i + j = d`, in two chains (two products a step).
        $(#[$attr])*
        #[inline]
        fn cross<const L: usize, const HIGH: bool>(a: &[V; L], d: usize) -> V {
            let (mut s0, mut s1) = (zero(), zero());
            let (mut i, end) = (d.saturating_sub(L - 1), d.div_ceil(2));
            while i + 1 < end {
                s0 = madd_part::<HIGH>(s0, a[i], a[d - i]);
                s1 = madd_part::<HIGH>(s1, a[i + 1], a[d - i - 1]);
                i += 2;
            }
            if i < end {
                s0 = madd_part::<HIGH>(s0, a[i], a[d - i]);
            }
            add(s0, s1)
        }

        /// Column `c` of the square of `a` (`0 ≤ c < 2L`), not yet carried: the low halves
        /// of the products `a_i·a_j` with `i + j = c` and the high halves of those with
        /// `i + j = c − 1`, each cross product (`i ≠ j`) computed once and doubled. The
        /// products are summed in four chains (two a step, low and high apart), not one.
        $(#[$attr])*
        #[inline]
        fn square_column<const L: usize>(a: &[V; L], c: usize) -> V {
            let high = if c > 0 { cross::<L, true>(a, c - 1) } else { zero() };
            let mut s = add(cross::<L, false>(a, c), high);
            s = add(s, s);
            if c % 2 == 0 {
                s = madd_lo(s, a[c / 2], a[c / 2]);
            } else {
                s = madd_hi(s, a[c / 2], a[c / 2]);
            }
            s
        }

        /// Limb `j` of the running sum at one step of [`reduce_step`]: `x`, plus the limb `j`
        /// of `a·b_i` when `PRODUCT` (low half of `a_j·b_i`, high half of `a_(j−1)·b_i`).
        $(#[$attr])*
        #[inline]
        fn limb<const L: usize, const PRODUCT: bool>(x: V, a: &[V; L], bi: V, j: usize) -> V {
            if !PRODUCT {
                return x;
            }
            let t = madd_lo(x, a[j], bi);
            if j > 0 {
                madd_hi(t, a[j - 1], bi)
            } else {
                t
            }
        }

        /// One step of word-by-word Montgomery reduction on the running sum `acc` (limbs
        /// `i..i+L`): limb `j` becomes [`limb`] (with `PRODUCT`, the step adds `a·b_i`),
        /// plus `y·m` with `y = limb_0·(−m⁻¹) mod 2^52`, which clears the low limb; each new
        /// limb is written one place down as it is computed, so the shift costs no extra
        /// moves, and `top` (the caller's limb `i + L`) enters at the top. No closures: the
        /// compiler does not always inline them into these functions.
        $(#[$attr])*
        #[inline]
        fn reduce_step<const L: usize, const PRODUCT: bool>(
            acc: &mut [V; L],
            m: &[V; L],
            k0: V,
            (a, bi): (&[V; L], V),
            top: V,
        ) {
            let t = limb::<L, PRODUCT>(acc[0], a, bi, 0);
            let y = madd_lo(zero(), t, k0);
            let carry = srl52(madd_lo(t, m[0], y));
            for j in 1..L {
                let x = limb::<L, PRODUCT>(acc[j], a, bi, j);
                let t = madd_hi(madd_lo(x, m[j], y), m[j - 1], y);
                acc[j - 1] = if j == 1 { add(t, carry) } else { t };
            }
            acc[L - 1] = madd_hi(top, m[L - 1], y);
        }

        /// [`amm`] by operand scanning: step `i` adds `a·b_i` to the running sum, which stays
        /// in registers where `L` allows.
        $(#[$attr])*
        #[inline]
        fn amm_rows<const L: usize>(a: &[V; L], b: &[V; L], m: &[V; L], k0: V, out: &mut [V; L]) {
            let mut acc = [zero(); L];
            for &bi in b {
                let top = madd_hi(zero(), a[L - 1], bi);
                reduce_step::<L, true>(&mut acc, m, k0, (a, bi), top);
            }
            normalize(&mut acc);
            *out = acc;
        }

        /// [`ams`] by operand scanning, as [`amm_rows`]: the square's columns
        /// ([`square_column`]) enter the running sum as the reduction reaches them.
        $(#[$attr])*
        #[inline]
        fn ams_rows<const L: usize>(a: &[V; L], m: &[V; L], k0: V, out: &mut [V; L]) {
            let mut acc = [zero(); L];
            for (c, v) in acc.iter_mut().enumerate() {
                *v = square_column(a, c);
            }
            for i in 0..L {
                let top = square_column(a, L + i);
                reduce_step::<L, false>(&mut acc, m, k0, (a, zero()), top);
            }
            normalize(&mut acc);
            *out = acc;
        }

        /// The sums of the low and of the high halves of the products `x_i·z_(d−i)` for `i`
        /// in `start..end` (`d − i` within `z`). Both halves of a product are taken together,
        /// from one pair of operands, and the pairs two at a time: four independent chains of
        /// multiply-adds, enough to keep the multiplier busy while each waits for its last
        /// result, with one operand read per multiply-add. Iterators over the two arrays, not
        /// indices, so that no bound is checked inside the loop; the pairs with the largest
        /// `i` come last (the reduction's newest factor is ready last).
        $(#[$attr])*
        #[inline]
        fn pair_sums<const L: usize>(
            x: &[V; L],
            z: &[V; L],
            d: usize,
            (start, end): (usize, usize),
        ) -> (V, V) {
            // x_i for i in start..end, and z_(d−i) for the same i (in reverse order).
            let (xs, zs) = if start < end {
                (&x[start..end], &z[d + 1 - end..=d - start])
            } else {
                (&x[..0], &z[..0])
            };
            let (mut lo0, mut lo1, mut hi0, mut hi1) = (zero(), zero(), zero(), zero());
            let (mut xs, mut zs) = (xs.chunks_exact(2), zs.rchunks_exact(2));
            for (x, z) in (&mut xs).zip(&mut zs) {
                lo0 = madd_lo(lo0, x[0], z[1]);
                hi0 = madd_hi(hi0, x[0], z[1]);
                lo1 = madd_lo(lo1, x[1], z[0]);
                hi1 = madd_hi(hi1, x[1], z[0]);
            }
            if let ([x], [z]) = (xs.remainder(), zs.remainder()) {
                lo0 = madd_lo(lo0, *x, *z);
                hi0 = madd_hi(hi0, *x, *z);
            }
            (add(lo0, lo1), add(hi0, hi1))
        }

        /// Column `c` of `a·b` (`0 ≤ c < 2L`), not yet carried, and what the next column
        /// needs. Of the products `a_i·b_j`: with `SQUARE` (`b` is `a`), the low halves of
        /// those with `i + j = c` and the high halves of those with `i + j = c − 1`, each
        /// cross product (`i ≠ j`) computed once and doubled; otherwise the same without the
        /// doubling. `high` is the high halves the call for column `c − 1` returned (zero for
        /// column 0); the call returns the column and the high halves of its own products.
        $(#[$attr])*
        #[inline]
        fn product_column<const L: usize, const SQUARE: bool>(
            a: &[V; L],
            b: &[V; L],
            c: usize,
            high: V,
        ) -> (V, V) {
            let start = c.saturating_sub(L - 1);
            if !SQUARE {
                let (low, next) = pair_sums(a, b, c, (start, c.min(L - 1) + 1));
                return (add(low, high), next);
            }
            let (low, next) = pair_sums(a, a, c, (start, c.div_ceil(2)));
            let mut s = add(low, high);
            s = add(s, s);
            if c % 2 == 0 {
                s = madd_lo(s, a[c / 2], a[c / 2]);
            } else {
                s = madd_hi(s, a[c / 2], a[c / 2]);
            }
            (s, next)
        }

        /// Almost Montgomery multiplication (`SQUARE`: squaring, `b` is `a`):
        /// `out = a·b·R⁻¹ mod m`, `R = 2^(52·L)`, below `2m` for `a, b < 4m` (the limb count
        /// gives `R ≥ 16m`), every limb below 2^52.
        ///
        /// Product scanning: column `c` of `a·b + Y·m` is summed whole ([`product_column`],
        /// and [`pair_sums`] of the digits `y_i` of `Y` found so far with `m`), then for `c <
        /// L` the digit `y_c = col·(−m⁻¹) mod 2^52` that clears it, and for `c ≥ L` the
        /// result's limb `c − L`; its carry goes to column `c + 1`. `Y` is the unique
        /// `−a·b·m⁻¹ mod R`, so the result is the one word-by-word reduction gives. A column
        /// is at most `4L` products of 52 bits plus the carry, below 2^60. The running sums
        /// are a handful of registers whatever `L`; the digits of `Y` and the operands are
        /// read from memory, one read per multiply-add.
        $(#[$attr])*
        #[inline]
        fn mont<const L: usize, const SQUARE: bool>(
            a: &[V; L],
            b: &[V; L],
            m: &[V; L],
            k0: V,
            out: &mut [V; L],
        ) {
            let mut y = [zero(); L];
            // The high halves due to the next column, of a·b and of Y·m, and the carry.
            let (mut hp, mut hr, mut carry) = (zero(), zero(), zero());
            for c in 0..L {
                let p;
                (p, hp) = product_column::<L, SQUARE>(a, b, c, hp);
                let (r, next) = pair_sums(&y, m, c, (0, c));
                let t = add(add(p, r), add(hr, carry));
                let yc = madd_lo(zero(), t, k0);
                y[c] = yc;
                carry = srl52(madd_lo(t, yc, m[0]));
                hr = madd_hi(next, yc, m[0]);
            }
            let mask = splat(MASK52);
            for (i, o) in out.iter_mut().enumerate() {
                let c = L + i;
                let p;
                (p, hp) = product_column::<L, SQUARE>(a, b, c, hp);
                let (r, next) = pair_sums(&y, m, c, (c + 1 - L, L));
                let t = add(add(p, r), add(hr, carry));
                hr = next;
                *o = and(t, mask);
                carry = srl52(t);
            }
        }

        /// Almost Montgomery multiplication: `out = a·b·R⁻¹ mod m`, `R = 2^(52·L)`, below
        /// `2m` for `a, b < 4m` (the limb count gives `R ≥ 16m`), every limb below 2^52. By
        /// operand scanning ([`amm_rows`]) up to [`ROWS_MAX_LIMBS`], by product scanning
        /// ([`mont`]) above.
        $(#[$attr])*
        #[inline]
        fn amm<const L: usize>(a: &[V; L], b: &[V; L], m: &[V; L], k0: V, out: &mut [V; L]) {
            if L <= ROWS_MAX_LIMBS {
                amm_rows(a, b, m, k0, out);
            } else {
                mont::<L, false>(a, b, m, k0, out);
            }
        }

        /// Almost Montgomery squaring: `out = a²·R⁻¹ mod m`, as [`amm`]`(a, a)`, each cross
        /// product computed once.
        $(#[$attr])*
        #[inline]
        fn ams<const L: usize>(a: &[V; L], m: &[V; L], k0: V, out: &mut [V; L]) {
            if L <= ROWS_MAX_LIMBS {
                ams_rows(a, m, k0, out);
            } else {
                mont::<L, true>(a, a, m, k0, out);
            }
        }

        /// Lane-wise constant-time lookup: lane `i` of the result gets entry `idx_i` of
        /// `table`. Every entry is read.
        $(#[$attr])*
        #[inline]
        fn select<const L: usize>(table: &[[V; L]], idx: V, out: &mut [V; L]) {
            *out = [zero(); L];
            for (t, entry) in table.iter().enumerate() {
                let hit = eq_mask(idx, t as u64);
                for j in 0..L {
                    out[j] = blend(hit, out[j], entry[j]);
                }
            }
        }

        /// [`run`] for `L` limbs.
        $(#[$attr])*
        #[inline(never)]
        fn run_l<const L: usize>(p: &Pass) -> Vec<[u64; 8]> {
            let (m, k0, rr) = load_moduli::<L>(&p.moduli);
            let rrr: [V; L] = load(&p.rrr);
            let lo: [V; L] = load(&p.lo);
            let hi: [V; L] = load(&p.hi);
            // The base in Montgomery form: (lo + hi·R)·R = amm(lo, R²) + amm(hi, R³) < 4m.
            let mut x = [zero(); L];
            let mut t = [zero(); L];
            amm(&lo, &rr, &m, k0, &mut x);
            amm(&hi, &rrr, &m, k0, &mut t);
            for j in 0..L {
                x[j] = add(x[j], t[j]);
            }
            normalize(&mut x);
            let mut one = [zero(); L];
            one[0] = splat(1);
            // table[i] = x^i in Montgomery form; table[0] = R mod m = amm(R², 1).
            let mut table = vec![[zero(); L]; 1 << p.window];
            amm(&rr, &one, &m, k0, &mut table[0]);
            table[1] = x;
            for i in 2..1 << p.window {
                let (done, rest) = table.split_at_mut(i);
                amm(&done[i - 1], &x, &m, k0, &mut rest[0]);
            }
            // Fixed windows, most significant first; `r` and `s` take turns as the result.
            let (mut r, mut s) = (&mut [zero(); L], &mut [zero(); L]);
            select(&table, lanes(p.windows[0]), r);
            for w in &p.windows[1..] {
                for _ in 0..p.window {
                    ams(r, &m, k0, s);
                    core::mem::swap(&mut r, &mut s);
                }
                select(&table, lanes(*w), &mut t);
                amm(r, &t, &m, k0, s);
                core::mem::swap(&mut r, &mut s);
            }
            // Out of Montgomery form: amm(r, 1) ≤ m.
            amm(r, &one, &m, k0, s);
            s.iter().map(|v| unlanes(*v)).collect()
        }

        /// [`run`] of a [`PublicPass`] for `L` limbs: square-and-multiply over the bits of
        /// the longest exponent, most significant first; the multiplication runs when any
        /// lane's exponent has the bit (exponents are public) and is kept, by a lane mask,
        /// in the lanes that have it. A lane with a shorter exponent squares ones until its
        /// top bit.
        $(#[$attr])*
        #[inline(never)]
        fn public_l<const L: usize>(p: &PublicPass) -> Vec<[u64; 8]> {
            let (m, k0, rr) = load_moduli::<L>(&p.moduli);
            let x: [V; L] = load(&p.x);
            let mut one = [zero(); L];
            one[0] = splat(1);
            // x·R and R (one) in Montgomery form, both below 2m.
            let mut xm = [zero(); L];
            amm(&x, &rr, &m, k0, &mut xm);
            let mut v = [zero(); L];
            amm(&rr, &one, &m, k0, &mut v);
            let mut t = [zero(); L];
            let bits = 64 - p.e.iter().fold(0, |a, &b| a | b).leading_zeros() as usize;
            for b in (0..bits).rev() {
                // `amm(v, v)`, not `ams`: with a second caller the compiler keeps the
                // squaring out of line, and the private pass, mostly squarings, then runs
                // 60% slower.
                amm(&v, &v, &m, k0, &mut t);
                v = t;
                let bit: [u64; 8] = core::array::from_fn(|i| (p.e[i] >> b) & 1);
                if bit.contains(&1) {
                    amm(&v, &xm, &m, k0, &mut t);
                    let hit = eq_mask(lanes(bit), 1);
                    for j in 0..L {
                        v[j] = blend(hit, v[j], t[j]);
                    }
                }
            }
            // Out of Montgomery form: at most m.
            amm(&v, &one, &m, k0, &mut t);
            t.iter().map(|w| unlanes(*w)).collect()
        }

        /// Eight modular exponentiations of the same shape: lane `i` computes
        /// `base_i^exp_i mod m_i` (a [`Pass`]: secret exponents in fixed windows) or
        /// `x_i^e_i mod m_i` (a [`PublicPass`]: public exponents of at most 64 bits), in
        /// `[0, m_i]` (the caller subtracts `m_i` once, in constant time, to reduce fully).
        /// The limb count must be 20, 30 or 40.
        $(#[$attr])*
        pub(super) fn run(w: Work) -> Vec<[u64; 8]> {
            match w {
                Work::Private(p) => match p.moduli.limbs {
                    20 => run_l::<20>(p),
                    30 => run_l::<30>(p),
                    40 => run_l::<40>(p),
                    l => panic!("no lane engine for {l} limbs"),
                },
                Work::Public(p) => match p.moduli.limbs {
                    20 => public_l::<20>(p),
                    30 => public_l::<30>(p),
                    40 => public_l::<40>(p),
                    l => panic!("no lane engine for {l} limbs"),
                },
            }
        }
    };
}

pub(crate) use lane_engine;
