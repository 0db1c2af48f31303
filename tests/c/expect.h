/* The checks of the C tests (oplife.c, hostile.c, multiproc.c): each prints one line, "ok"
 * or "FAIL", and a failure is counted in `failures`; `must` ends the program (status 2) when
 * a step the test needs fails. Include after pkcs11.h and ckr_names.h. */
#ifndef OPENCF_TESTS_EXPECT_H
#define OPENCF_TESTS_EXPECT_H

#include <stdio.h>
#include <stdlib.h>

static int failures;

/* A call's answer. */
static inline void expect(const char *what, CK_RV got, CK_RV want)
{
    if (got == want) {
        printf("ok   %s: %s\n", what, ckr_name(got));
    } else {
        printf("FAIL %s: %s, want %s\n", what, ckr_name(got), ckr_name(want));
        failures++;
    }
}

/* Any other fact. */
static inline void check(const char *what, int ok)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok)
        failures++;
}

/* A step of the test's setup. */
static inline void must(const char *what, CK_RV rv)
{
    if (rv != CKR_OK) {
        fprintf(stderr, "setup: %s: %s\n", what, ckr_name(rv));
        exit(2);
    }
}

#endif
