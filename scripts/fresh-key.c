/*
 * fresh-key: what one symmetric operation costs when its key was generated for it, against
 * the same operation with a key used over and over (what cfspeed measures), through any
 * PKCS#11 module. The accelerator's thresholds (min_bytes) are measured with a re-used key;
 * this shows what a new key per message adds on either route (docs/PERFORMANCE.md, "AES-CTR
 * through the GCM kernel").
 *
 *   cc -O2 -Itests/c -o target/fresh-key scripts/fresh-key.c -ldl
 *   target/fresh-key MODULE SLOT ctr|gcm|ecb BYTES[,BYTES...] [ITERATIONS]
 *
 * Each iteration: (fresh) C_DestroyObject of the last key and C_GenerateKey of an AES-128
 * session key (public, so no login is needed), then C_EncryptInit and C_Encrypt of BYTES
 * zero bytes. Prints, for each size and both ways, the best of 5 rounds of ITERATIONS
 * (default 300) in µs per iteration; the key generation is part of the fresh figure.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pkcs11.h"

static CK_FUNCTION_LIST_PTR f;
static CK_SESSION_HANDLE s;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void check(CK_RV rv, const char *what)
{
    if (rv != CKR_OK) {
        fprintf(stderr, "fresh-key: %s returned 0x%lx\n", what, (unsigned long)rv);
        exit(1);
    }
}

static CK_OBJECT_HANDLE new_key(void)
{
    CK_MECHANISM gen = {CKM_AES_KEY_GEN, NULL, 0};
    CK_ULONG len = 16;
    CK_BBOOL yes = CK_TRUE, no = CK_FALSE;
    CK_ATTRIBUTE t[] = {{CKA_VALUE_LEN, &len, sizeof len},
                        {CKA_ENCRYPT, &yes, sizeof yes},
                        {CKA_TOKEN, &no, sizeof no},
                        {CKA_PRIVATE, &no, sizeof no}};
    CK_OBJECT_HANDLE k;
    check(f->C_GenerateKey(s, &gen, t, 4, &k), "C_GenerateKey");
    return k;
}

/* µs per iteration, best of 5 rounds. */
static double measure(CK_MECHANISM *m, CK_BYTE *in, CK_BYTE *out, CK_ULONG n, int iters,
                      int fresh)
{
    double best = 1e30;
    CK_OBJECT_HANDLE k = new_key();
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (int i = 0; i < iters; i++) {
            if (fresh) {
                check(f->C_DestroyObject(s, k), "C_DestroyObject");
                k = new_key();
            }
            check(f->C_EncryptInit(s, m, k), "C_EncryptInit");
            CK_ULONG olen = n + 16;
            check(f->C_Encrypt(s, in, n, out, &olen), "C_Encrypt");
        }
        double d = (now() - t0) / iters * 1e6;
        if (d < best)
            best = d;
    }
    f->C_DestroyObject(s, k);
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: fresh-key MODULE SLOT ctr|gcm|ecb BYTES[,BYTES...] [ITERATIONS]\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "fresh-key: %s\n", dlerror());
        return 1;
    }
    CK_C_GetFunctionList gfl = (CK_C_GetFunctionList)dlsym(h, "C_GetFunctionList");
    if (!gfl) {
        fprintf(stderr, "fresh-key: no C_GetFunctionList in %s\n", argv[1]);
        return 1;
    }
    check(gfl(&f), "C_GetFunctionList");
    check(f->C_Initialize(NULL), "C_Initialize");
    check(f->C_OpenSession(strtoul(argv[2], NULL, 0), CKF_SERIAL_SESSION | CKF_RW_SESSION,
                           NULL, NULL, &s),
          "C_OpenSession");

    CK_AES_CTR_PARAMS ctr = {128, {0}};
    CK_BYTE iv[12] = {0};
    CK_GCM_PARAMS gcm = {iv, sizeof iv, 96, NULL, 0, 128};
    CK_MECHANISM m;
    if (!strcmp(argv[3], "ctr"))
        m = (CK_MECHANISM){CKM_AES_CTR, &ctr, sizeof ctr};
    else if (!strcmp(argv[3], "gcm"))
        m = (CK_MECHANISM){CKM_AES_GCM, &gcm, sizeof gcm};
    else if (!strcmp(argv[3], "ecb"))
        m = (CK_MECHANISM){CKM_AES_ECB, NULL, 0};
    else {
        fprintf(stderr, "fresh-key: unknown mechanism %s (ctr, gcm or ecb)\n", argv[3]);
        return 2;
    }
    int iters = argc > 5 ? atoi(argv[5]) : 300;
    if (iters < 1)
        iters = 1;

    printf("%-10s %14s %14s %8s\n", "bytes", "fresh key µs", "same key µs", "ratio");
    for (char *p = strtok(argv[4], ","); p; p = strtok(NULL, ",")) {
        CK_ULONG n = strtoul(p, NULL, 0);
        if (!strcmp(argv[3], "ecb"))
            n -= n % 16;
        CK_BYTE *in = calloc(n + 1, 1), *out = malloc(n + 32);
        if (!in || !out) {
            fprintf(stderr, "fresh-key: out of memory\n");
            return 1;
        }
        double fresh = measure(&m, in, out, n, iters, 1);
        double same = measure(&m, in, out, n, iters, 0);
        printf("%-10lu %14.1f %14.1f %8.2f\n", (unsigned long)n, fresh, same, fresh / same);
        free(in);
        free(out);
    }
    f->C_CloseSession(s);
    f->C_Finalize(NULL);
    return 0;
}
