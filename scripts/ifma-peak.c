/*
 * ifma-peak: how many 52-bit multiply-adds (VPMADD52LUQ) this CPU retires per cycle, and what
 * that allows the accelerator's RSA engine, so that its passes can be read against the
 * instructions' limit rather than against a guess (docs/PERFORMANCE.md, "The engine against
 * the instruction limit").
 *
 *   cc -O2 -o target/ifma-peak scripts/ifma-peak.c
 *   target/ifma-peak [RUNS]                 (default 7)
 *
 * It prints, each the median of RUNS:
 *
 *   clock    a chain of dependent 64-bit additions (one cycle each on every x86-64 core):
 *            the cycles per second the measuring thread gets;
 *   zmm, ymm twelve independent chains of VPMADD52LUQ on 512-bit and on 256-bit registers:
 *            instructions per cycle, and lanes (52-bit products) per cycle;
 *   floor    for RSA-2048, -3072 and -4096, with 5-bit and with 4-bit windows: the
 *            multiply-adds of one engine pass (eight half-exponentiations, one per lane) as
 *            crates/opencf-accel/src/engine/lanes.rs issues them, and the time they take at
 *            the zmm rate above, i.e. the fastest a pass can be on this CPU whatever else is
 *            made faster.
 *
 * Exit status 2 without AVX-512 IFMA.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAINS 12

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Cycles per second: 4·n dependent additions. */
static double clock_rate(void)
{
    const long n = 100000000;
    uint64_t x = 1;
    double t0 = now();
    for (long i = 0; i < n; i++)
        __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
    return 4.0 * (double)n / (now() - t0);
}

/*
 * Multiply-adds per second on one register width: twelve independent chains, every chain
 * used at every iteration (the empty asm) so that none is cut short.
 */
#define MADD_RATE(NAME, TARGET, VEC, SET1, MADD)                                               \
    __attribute__((target(TARGET))) static double NAME(void)                                   \
    {                                                                                          \
        const long n = 20000000;                                                               \
        VEC a[CHAINS];                                                                         \
        for (int k = 0; k < CHAINS; k++)                                                       \
            a[k] = SET1(k + 1);                                                                \
        VEC b = SET1(3), c = SET1(5);                                                          \
        double t0 = now();                                                                     \
        for (long i = 0; i < n; i++) {                                                         \
            _Pragma("GCC unroll 12") for (int k = 0; k < CHAINS; k++) a[k] = MADD(a[k], b, c); \
            __asm__ volatile("" ::"v"(a[0]), "v"(a[1]), "v"(a[2]), "v"(a[3]), "v"(a[4]),       \
                             "v"(a[5]), "v"(a[6]), "v"(a[7]), "v"(a[8]), "v"(a[9]),            \
                             "v"(a[10]), "v"(a[11]));                                          \
        }                                                                                      \
        return (double)CHAINS * (double)n / (now() - t0);                                     \
    }

MADD_RATE(zmm_rate, "avx512f,avx512ifma", __m512i, _mm512_set1_epi64, _mm512_madd52lo_epu64)
MADD_RATE(ymm_rate, "avx512f,avx512ifma,avx512vl", __m256i, _mm256_set1_epi64x,
          _mm256_madd52lo_epu64)

/*
 * The multiply-adds of one pass of L limbs over exponents of `bits` bits, counted the way
 * lanes.rs issues them (its two layouts, rows and columns, issue the same number):
 *   ams (squaring): the L(L-1)/2 cross products and L squares, low and high halves, then L
 *     reduction steps of 2L+1 (y, the low limb, 2 per further limb, the top);
 *   amm (multiplication): L steps of 4L+1 (a·b_i and y·m, low and high, y, the top);
 *   fixed windows of w bits (5, or 4 where the engine's table does not fit the first
 *     cache): (windows-1)·(w ams + 1 amm), the table of 2^w entries (2^w - 2 amm and the one
 *     for table[0]), the base into Montgomery form (2 amm), out of it (1 amm).
 */
static double pass_madds(long l, long bits, long w)
{
    long ams = l * (l - 1) + 2 * l + l * (2 * l + 1);
    long amm = l * (4 * l + 1);
    long windows = (bits + w - 1) / w;
    return (double)((windows - 1) * (w * ams + amm) + ((1L << w) - 2 + 1 + 2 + 1) * amm);
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 7;
    if (runs < 1 || runs > 99) {
        fprintf(stderr, "usage: ifma-peak [RUNS]   (1 to 99)\n");
        return 2;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512ifma") || !__builtin_cpu_supports("avx512vl")) {
        fprintf(stderr, "ifma-peak: this CPU has no AVX-512 IFMA\n");
        return 2;
    }
    double hz[99], z[99], y[99];
    for (int r = 0; r < runs; r++) {
        hz[r] = clock_rate();
        z[r] = zmm_rate() / hz[r];
        y[r] = ymm_rate() / hz[r];
    }
    double f = median(hz, runs), zc = median(z, runs), yc = median(y, runs);
    printf("clock  %.2f GHz (dependent additions, median of %d)\n", f / 1e9, runs);
    printf("zmm    %.2f VPMADD52LUQ per cycle, %.1f products per cycle\n", zc, 8 * zc);
    printf("ymm    %.2f VPMADD52LUQ per cycle, %.1f products per cycle\n", yc, 4 * yc);
    static const struct {
        const char *name;
        long limbs, bits;
    } sizes[] = {{"RSA-2048", 20, 1024}, {"RSA-3072", 30, 1536}, {"RSA-4096", 40, 2048}};
    for (int i = 0; i < 3; i++)
        for (long w = 5; w >= 4; w--) {
            double m = pass_madds(sizes[i].limbs, sizes[i].bits, w);
            printf("floor  %s, %ld-bit windows: %.2f million multiply-adds per 8-lane pass, "
                   "%.0f us at %.2f per cycle (%.0f us per request of two halves)\n",
                   sizes[i].name, w, m / 1e6, m / (zc * f) * 1e6, zc, m / (zc * f) * 1e6 / 4);
        }
    return 0;
}
