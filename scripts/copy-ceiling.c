/*
 * copy-ceiling: how fast this machine can move one large buffer into another, with one
 * thread and with every core, so that a bulk cipher's figures can be read against the
 * memory's limit rather than the cipher's (docs/PERFORMANCE.md, "A ceiling for the 64 MiB
 * encryption").
 *
 *   cc -O2 -pthread -o target/copy-ceiling scripts/copy-ceiling.c
 *   target/copy-ceiling [MIB [RUNS]]        (default: 64 MiB, 7 runs)
 *
 * Each run streams SRC (MIB MiB) into DST once, split into equal contiguous pieces, one per
 * thread, the way the accelerator's bulk engine splits one operation. Three ways of writing:
 *
 *   memcpy   the C library's memcpy per piece
 *   store    16-byte loads, an XOR (a stand-in for a keystream), ordinary 16-byte stores:
 *            what a cipher writing its output does; each line written is first read
 *   stream   the same with non-temporal stores (MOVNTDQ), which skip that read
 *
 * The figure is the rate of the source (bytes of "plaintext" per second), median of RUNS,
 * comparable with cfspeed's MB/s (10^6 bytes).
 */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum mode { MEMCPY, STORE, STREAM };
static const char *const mode_names[] = {"memcpy", "store", "stream"};

struct piece {
    const unsigned char *src;
    unsigned char *dst;
    size_t len;
    enum mode mode;
    pthread_barrier_t *start;
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void copy_piece(const struct piece *p)
{
    const __m128i key = _mm_set1_epi32(0x5a5a5a5a);
    switch (p->mode) {
    case MEMCPY:
        memcpy(p->dst, p->src, p->len);
        break;
    case STORE:
        for (size_t i = 0; i < p->len; i += 16) {
            __m128i v = _mm_load_si128((const __m128i *)(p->src + i));
            _mm_store_si128((__m128i *)(p->dst + i), _mm_xor_si128(v, key));
        }
        break;
    case STREAM:
        for (size_t i = 0; i < p->len; i += 16) {
            __m128i v = _mm_load_si128((const __m128i *)(p->src + i));
            _mm_stream_si128((__m128i *)(p->dst + i), _mm_xor_si128(v, key));
        }
        _mm_sfence();
        break;
    }
}

static void *worker(void *arg)
{
    struct piece *p = arg;
    pthread_barrier_wait(p->start);
    copy_piece(p);
    return NULL;
}

/* One copy of `len` bytes in `threads` pieces; returns seconds. */
static double one_run(const unsigned char *src, unsigned char *dst, size_t len, int threads,
                      enum mode mode)
{
    pthread_t tid[64];
    struct piece pieces[64];
    pthread_barrier_t start;
    size_t per = len / threads / 64 * 64;

    pthread_barrier_init(&start, NULL, threads);
    for (int t = 0; t < threads; t++) {
        pieces[t] = (struct piece){src + t * per, dst + t * per,
                                   t == threads - 1 ? len - t * per : per, mode, &start};
    }
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&tid[t], NULL, worker, &pieces[t]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    pthread_barrier_wait(&start);
    double t0 = now();
    copy_piece(&pieces[0]);
    for (int t = 1; t < threads; t++)
        pthread_join(tid[t], NULL);
    double elapsed = now() - t0;
    pthread_barrier_destroy(&start);
    return elapsed;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long mib = argc > 1 ? atol(argv[1]) : 64;
    int runs = argc > 2 ? atoi(argv[2]) : 7;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (mib <= 0 || runs <= 0 || runs > 1000) {
        fprintf(stderr, "usage: %s [MIB [RUNS]]\n", argv[0]);
        return 2;
    }
    if (cores < 1)
        cores = 1;
    if (cores > 64)
        cores = 64;
    size_t len = (size_t)mib << 20;
    unsigned char *src = aligned_alloc(64, len), *dst = aligned_alloc(64, len);
    if (!src || !dst) {
        fprintf(stderr, "copy-ceiling: cannot allocate 2 x %ld MiB\n", mib);
        return 1;
    }
    /* Touch every page of both buffers before measuring. */
    memset(src, 0xa5, len);
    memset(dst, 0x3c, len);

    printf("# copy-ceiling: %ld MiB from one buffer into another, median of %d runs; MB/s of "
           "the source\n",
           mib, runs);
    printf("%-8s %8s %12s\n", "mode", "threads", "MB/s");
    int counts[2] = {1, (int)cores};
    for (int m = MEMCPY; m <= STREAM; m++) {
        for (int c = 0; c < (cores > 1 ? 2 : 1); c++) {
            double secs[1000];
            one_run(src, dst, len, counts[c], (enum mode)m); /* warm-up */
            for (int r = 0; r < runs; r++)
                secs[r] = one_run(src, dst, len, counts[c], (enum mode)m);
            qsort(secs, runs, sizeof secs[0], cmp_double);
            printf("%-8s %8d %12.0f\n", mode_names[m], counts[c], len / secs[runs / 2] / 1e6);
        }
    }
    /* Keep the copies observable so that none is optimised away. */
    unsigned sum = 0;
    for (size_t i = 0; i < len; i += 4096)
        sum += dst[i];
    printf("# checksum %u\n", sum);
    free(src);
    free(dst);
    return 0;
}
