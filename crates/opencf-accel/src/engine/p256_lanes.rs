//! Eight P-256 ECDSA signatures at once, written once and instantiated per instruction set
//! by [`p256_engine!`] next to [`super::lanes::lane_engine!`], whose Montgomery products
//! (`amm`, `ams`, `normalize`) it uses with five 52-bit limbs (`R = 2^260`).
//!
//! The instantiating module defines, besides the lane engine's operations, `sub` (lane-wise
//! wrapping subtraction), `sra52` (arithmetic shift right by 52) and `neg_mask` (the lanes
//! whose value is negative as a signed 64-bit number).
//!
//! Field elements are kept below `2m` (`m` = `p`, or `n` for the scalars), every limb below
//! 2^52 but the top one of intermediate signed values. A Montgomery product of two such
//! values is below `1.25m` (`ab/R + m` with `R ≥ 16m`); a sum or difference is brought back
//! below `2m` by one subtraction of `2m`, kept or dropped with a lane mask.
//!
//! `k·G` takes 64 additions from a fixed-base table (entry `j` of table `i` is
//! `j·16^i·G`, the same for every lane), one per 4-bit digit of `k`, with the complete
//! projective addition of Renes, Costello and Batina (2016, algorithm 4, `a = −3`): no input
//! is exceptional, so the identity (digit 0, entry `(0 : 1 : 0)`) and equal points need no
//! branch. Every table entry is read for every digit. Inversions are Fermat's (`x^(m−2)`,
//! the exponent public). Nothing branches on, or indexes memory by, a secret value.

/// Generates `pub(super) fn ecdsa_run(&EcPass) -> EcOut` and its helpers, each with the given
/// attributes.
macro_rules! p256_engine {
    ($(#[$attr:meta])*) => {
        use $crate::engine::p256::{EcOut, EcPass, Modulus, FE};

        /// A field element or scalar: five 52-bit limbs, eight lanes.
        type F = [V; FE];

        /// A modulus and its constants as lane vectors.
        struct Md {
            m: F,
            m2: F,
            k0: V,
            one: F,
        }

        $(#[$attr])*
        #[inline]
        fn ec_splat(x: &[u64; FE]) -> F {
            core::array::from_fn(|j| splat(x[j]))
        }

        $(#[$attr])*
        #[inline]
        fn ec_lanes(rows: &[[u64; 8]]) -> F {
            core::array::from_fn(|j| lanes(rows[j]))
        }

        $(#[$attr])*
        #[inline]
        fn md(c: &Modulus) -> Md {
            Md {
                m: ec_splat(&c.m),
                m2: ec_splat(&c.m2),
                k0: splat(c.k0),
                one: ec_splat(&c.one),
            }
        }

        /// Carry propagation with signed limbs: every limb but the top one below 2^52, the
        /// top one keeps the sign of the value.
        $(#[$attr])*
        #[inline]
        fn snormalize(x: &mut F) {
            let mask = splat(MASK52);
            let mut carry = zero();
            for v in x.iter_mut().take(FE - 1) {
                let t = add(*v, carry);
                carry = sra52(t);
                *v = and(t, mask);
            }
            x[FE - 1] = add(x[FE - 1], carry);
        }

        /// `x − y` where that is not negative, else `x` (`x` normalized).
        $(#[$attr])*
        #[inline]
        fn sub_if_ge(x: &F, y: &F) -> F {
            let mut t: F = core::array::from_fn(|j| sub(x[j], y[j]));
            snormalize(&mut t);
            let neg = neg_mask(t[FE - 1]);
            core::array::from_fn(|j| blend(neg, t[j], x[j]))
        }

        $(#[$attr])*
        #[inline]
        fn fmul(c: &Md, a: &F, b: &F) -> F {
            let mut o = [zero(); FE];
            amm::<FE>(a, b, &c.m, c.k0, &mut o);
            o
        }

        $(#[$attr])*
        #[inline]
        fn fsqr(c: &Md, a: &F) -> F {
            let mut o = [zero(); FE];
            ams::<FE>(a, &c.m, c.k0, &mut o);
            o
        }

        $(#[$attr])*
        #[inline]
        fn fadd(c: &Md, a: &F, b: &F) -> F {
            let mut s: F = core::array::from_fn(|j| add(a[j], b[j]));
            normalize(&mut s);
            sub_if_ge(&s, &c.m2)
        }

        $(#[$attr])*
        #[inline]
        fn fsub(c: &Md, a: &F, b: &F) -> F {
            let mut s: F = core::array::from_fn(|j| sub(add(a[j], c.m2[j]), b[j]));
            snormalize(&mut s);
            sub_if_ge(&s, &c.m2)
        }

        /// `x^e` in Montgomery form (`e` public, 256 bits, little-endian words): 4-bit fixed
        /// windows, most significant first, with the powers `x^1 … x^15`; a zero window
        /// (the exponent is public) costs no product.
        $(#[$attr])*
        #[inline(never)]
        fn fpow(c: &Md, x: &F, e: &[u64; 4]) -> F {
            let mut pow = [*x; 16];
            pow[0] = c.one;
            for i in 2..16 {
                pow[i] = fmul(c, &pow[i - 1], x);
            }
            let mut r = c.one;
            for w in (0..64).rev() {
                for _ in 0..4 {
                    r = fsqr(c, &r);
                }
                let digit = (e[w / 16] >> (4 * (w % 16))) & 15;
                if digit != 0 {
                    r = fmul(c, &r, &pow[digit as usize]);
                }
            }
            r
        }

        /// Fully reduced: below `m` (for values below `2m`).
        $(#[$attr])*
        #[inline]
        fn reduced(c: &Md, x: &F) -> F {
            sub_if_ge(x, &c.m)
        }

        /// One in the lanes where `a == b` (both fully reduced), zero elsewhere.
        $(#[$attr])*
        #[inline]
        fn equal(a: &F, b: &F) -> V {
            let mut r = splat(1);
            for j in 0..FE {
                let same = eq_mask(sub(a[j], b[j]), 0);
                r = blend(same, zero(), r);
            }
            r
        }

        /// `p + q`, projective, complete (Renes–Costello–Batina, algorithm 4, `a = −3`);
        /// `bm` is the curve's `b` in Montgomery form.
        $(#[$attr])*
        #[inline(never)]
        fn padd(c: &Md, bm: &F, p: &[F; 3], q: &[F; 3]) -> [F; 3] {
            let (x1, y1, z1) = (&p[0], &p[1], &p[2]);
            let (x2, y2, z2) = (&q[0], &q[1], &q[2]);
            let mut t0 = fmul(c, x1, x2);
            let mut t1 = fmul(c, y1, y2);
            let mut t2 = fmul(c, z1, z2);
            let mut t3 = fadd(c, x1, y1);
            let mut t4 = fadd(c, x2, y2);
            t3 = fmul(c, &t3, &t4);
            t4 = fadd(c, &t0, &t1);
            t3 = fsub(c, &t3, &t4);
            t4 = fadd(c, y1, z1);
            let mut x3 = fadd(c, y2, z2);
            t4 = fmul(c, &t4, &x3);
            x3 = fadd(c, &t1, &t2);
            t4 = fsub(c, &t4, &x3);
            x3 = fadd(c, x1, z1);
            let mut y3 = fadd(c, x2, z2);
            x3 = fmul(c, &x3, &y3);
            y3 = fadd(c, &t0, &t2);
            y3 = fsub(c, &x3, &y3);
            let mut z3 = fmul(c, bm, &t2);
            x3 = fsub(c, &y3, &z3);
            z3 = fadd(c, &x3, &x3);
            x3 = fadd(c, &x3, &z3);
            z3 = fsub(c, &t1, &x3);
            x3 = fadd(c, &t1, &x3);
            y3 = fmul(c, bm, &y3);
            t1 = fadd(c, &t2, &t2);
            t2 = fadd(c, &t1, &t2);
            y3 = fsub(c, &y3, &t2);
            y3 = fsub(c, &y3, &t0);
            t1 = fadd(c, &y3, &y3);
            y3 = fadd(c, &t1, &y3);
            t1 = fadd(c, &t0, &t0);
            t0 = fadd(c, &t1, &t0);
            t0 = fsub(c, &t0, &t2);
            t1 = fmul(c, &t4, &y3);
            t2 = fmul(c, &t0, &y3);
            y3 = fmul(c, &x3, &z3);
            y3 = fadd(c, &y3, &t2);
            x3 = fmul(c, &t3, &x3);
            x3 = fsub(c, &x3, &t1);
            z3 = fmul(c, &t4, &z3);
            t1 = fmul(c, &t3, &t0);
            z3 = fadd(c, &z3, &t1);
            [x3, y3, z3]
        }

        /// Eight ECDSA signatures: lane `i` computes `r = x(k·G) mod n` and
        /// `s = k⁻¹·(e + r·d) mod n`, and checks its own work: the point is on the curve and
        /// `s·k = e + r·d (mod n)` (`ok` is 1 where both hold).
        $(#[$attr])*
        pub(super) fn ecdsa_run(w: &EcPass) -> EcOut {
            let cv = w.curve;
            let (fp, fnn) = (md(&cv.p), md(&cv.n));
            let bm = ec_splat(&cv.b_mont);
            // k·G: 64 complete additions from the fixed-base table.
            let mut acc = [[zero(); FE], fp.one, [zero(); FE]];
            for (i, row) in w.digits.iter().enumerate() {
                let idx = lanes(*row);
                let (mut x, mut y) = ([zero(); FE], [zero(); FE]);
                for (j, entry) in cv.table[i * 16..(i + 1) * 16].iter().enumerate() {
                    let hit = eq_mask(idx, j as u64);
                    for l in 0..FE {
                        x[l] = blend(hit, x[l], splat(entry[0][l]));
                        y[l] = blend(hit, y[l], splat(entry[1][l]));
                    }
                }
                // Entry 0 is (0, 1): with z = 0 it is the identity.
                let none = eq_mask(idx, 0);
                let z: F = core::array::from_fn(|l| blend(none, fp.one[l], zero()));
                acc = padd(&fp, &bm, &acc, &[x, y, z]);
            }
            if w.fault {
                // The fault switch: a point off the curve, which the check must catch.
                acc[0] = fadd(&fp, &acc[0], &fp.one);
            }
            // Affine coordinates (Montgomery form), and the check that the point is on the
            // curve: y² = x³ − 3x + b.
            let zinv = fpow(&fp, &acc[2], &cv.p_minus_2);
            let xa = fmul(&fp, &acc[0], &zinv);
            let ya = fmul(&fp, &acc[1], &zinv);
            let lhs = reduced(&fp, &fsqr(&fp, &ya));
            let x3 = fmul(&fp, &fsqr(&fp, &xa), &xa);
            let tx = fadd(&fp, &fadd(&fp, &xa, &xa), &xa);
            let rhs = reduced(&fp, &fadd(&fp, &fsub(&fp, &x3, &tx), &bm));
            let on_curve = equal(&lhs, &rhs);
            // r = x mod n (x < p < 2n).
            let mut unit = [zero(); FE];
            unit[0] = splat(1);
            let x = reduced(&fp, &fmul(&fp, &xa, &unit));
            let r = reduced(&fnn, &x);
            // s = k⁻¹·(e + r·d) mod n; d comes as d·R mod n.
            let k = ec_lanes(&w.k);
            let e = ec_lanes(&w.e);
            let dm = ec_lanes(&w.d_mont);
            let rr = ec_splat(&cv.n_rr);
            let km = fmul(&fnn, &k, &rr);
            let kinv = fpow(&fnn, &km, &cv.n_minus_2);
            let rd = fmul(&fnn, &r, &dm);
            let mut u: F = core::array::from_fn(|j| add(rd[j], e[j]));
            normalize(&mut u);
            let s = reduced(&fnn, &fmul(&fnn, &kinv, &u));
            // The check: s·k = u (mod n); u < 2n + 2^256 < 4n.
            let sk = reduced(&fnn, &fmul(&fnn, &s, &km));
            let u = reduced(&fnn, &sub_if_ge(&u, &fnn.m2));
            let consistent = equal(&sk, &u);
            let ok = blend(eq_mask(on_curve, 1), zero(), consistent);
            EcOut {
                r: r.iter().map(|v| unlanes(*v)).collect(),
                s: s.iter().map(|v| unlanes(*v)).collect(),
                ok: unlanes(ok),
            }
        }
    };
}

pub(crate) use p256_engine;
