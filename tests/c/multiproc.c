/*
 * One keystore, several processes at once, through the C ABI:
 *
 *   multiproc MODULE SLOT SOFTTOKEN
 *
 * This process uses MODULE's SLOT (the software token alone, or slot 0 of libopencf.so);
 * the other processes are this program again (`multiproc --child ACTION SOFTTOKEN`), each
 * with the software token module of its own. The token must be fresh
 * (OPENCF_SOFTTOKEN_DIR of its own). Checked:
 * - C_SetAttributeValue in two processes at once, on different attributes of one key: every
 *   change answered CKR_OK is in the keystore at the end, and a key made sensitive and
 *   unextractable stays so (a write made from a stale copy of the key undid the other's);
 * - a process killed while it makes key pairs leaves no public key without its private key;
 * - right PINs tried by many processes at once all log in (none is taken for a lock);
 * - C_InitToken in another process ends this process's login and every handle of the token
 *   it replaced: the old key can no longer be used or read.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pkcs11.h"
#include "ckr_names.h"
#include "expect.h"

static CK_FUNCTION_LIST *F;
static CK_SLOT_ID SLOT;
static const char *SELF, *SOFTTOKEN;

static CK_UTF8CHAR PIN_DEFAULT[] = "changeme";
static CK_UTF8CHAR PIN[] = "multiproc-user-pin";
static CK_UTF8CHAR NEW_PIN[] = "multiproc-new-pin";
#define PINLEN(p) ((CK_ULONG)(sizeof(p) - 1))
#define NA(a) (sizeof(a) / sizeof((a)[0]))
#define ROUNDS 150

static void load(const char *path)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        exit(2);
    }
    CK_C_GetFunctionList gfl = (CK_C_GetFunctionList)dlsym(lib, "C_GetFunctionList");
    if (!gfl || gfl(&F) != CKR_OK) {
        fprintf(stderr, "%s: no function list\n", path);
        exit(2);
    }
    must("C_Initialize", F->C_Initialize(NULL));
}

static CK_SESSION_HANDLE open_user(void)
{
    CK_SESSION_HANDLE s;
    must("C_OpenSession", F->C_OpenSession(SLOT, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s));
    CK_RV rv = F->C_Login(s, CKU_USER, PIN, PINLEN(PIN));
    if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN)
        must("C_Login", rv);
    return s;
}

static CK_OBJECT_HANDLE find_one(CK_SESSION_HANDLE s, const char *label)
{
    CK_ATTRIBUTE t[] = { { CKA_LABEL, (void *)label, strlen(label) } };
    CK_OBJECT_HANDLE h[2];
    CK_ULONG n = 0;
    must("C_FindObjectsInit", F->C_FindObjectsInit(s, t, NA(t)));
    must("C_FindObjects", F->C_FindObjects(s, h, 2, &n));
    F->C_FindObjectsFinal(s);
    return n == 1 ? h[0] : CK_INVALID_HANDLE;
}

static CK_ULONG count(CK_SESSION_HANDLE s, CK_OBJECT_CLASS cls, const char *label)
{
    CK_ATTRIBUTE t[] = { { CKA_CLASS, &cls, sizeof cls }, { CKA_LABEL, (void *)label, strlen(label) } };
    CK_OBJECT_HANDLE h[4096];
    CK_ULONG n = 0;
    must("C_FindObjectsInit", F->C_FindObjectsInit(s, t, NA(t)));
    must("C_FindObjects", F->C_FindObjects(s, h, NA(h), &n));
    F->C_FindObjectsFinal(s);
    return n;
}

static CK_BBOOL T = CK_TRUE, Fa = CK_FALSE;

/* ----- the other processes ----- */

/* Sets CKA_ID ROUNDS times on the token's one AES key (whose label the other process
 * changes meanwhile); halfway, makes it sensitive and unextractable. */
static int child_set_ids(void)
{
    CK_SESSION_HANDLE s = open_user();
    CK_KEY_TYPE aes = CKK_AES;
    CK_ATTRIBUTE ft[] = { { CKA_KEY_TYPE, &aes, sizeof aes }, { CKA_TOKEN, &T, 1 } };
    CK_OBJECT_HANDLE found[2], k;
    CK_ULONG n = 0;
    if (F->C_FindObjectsInit(s, ft, NA(ft)) != CKR_OK || F->C_FindObjects(s, found, 2, &n) != CKR_OK ||
        F->C_FindObjectsFinal(s) != CKR_OK || n != 1)
        return 3;
    k = found[0];
    /* Ready: the other process starts its changes now. */
    const char *fd = getenv("MULTIPROC_READY_FD");
    if (fd && write(atoi(fd), "r", 1) != 1)
        return 6;
    for (int i = 0; i < ROUNDS; i++) {
        char id[32];
        snprintf(id, sizeof id, "id%d", i);
        CK_ATTRIBUTE t[] = { { CKA_ID, id, strlen(id) } };
        if (F->C_SetAttributeValue(s, k, t, NA(t)) != CKR_OK)
            return 4;
        if (i == ROUNDS / 2) {
            CK_ATTRIBUTE lock[] = { { CKA_SENSITIVE, &T, 1 }, { CKA_EXTRACTABLE, &Fa, 1 } };
            if (F->C_SetAttributeValue(s, k, lock, NA(lock)) != CKR_OK)
                return 5;
        }
    }
    return 0;
}

/* Makes token EC key pairs labelled "pair" until it is killed. */
static int child_pairs(void)
{
    static CK_BYTE p256[] = { 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07 };
    CK_SESSION_HANDLE s = open_user();
    CK_MECHANISM gen = { CKM_EC_KEY_PAIR_GEN, NULL, 0 };
    CK_ATTRIBUTE pub[] = { { CKA_EC_PARAMS, p256, sizeof p256 }, { CKA_TOKEN, &T, 1 },
                           { CKA_LABEL, "pair", 4 } };
    CK_ATTRIBUTE priv[] = { { CKA_TOKEN, &T, 1 }, { CKA_LABEL, "pair", 4 } };
    for (;;) {
        CK_OBJECT_HANDLE a, b;
        if (F->C_GenerateKeyPair(s, &gen, pub, NA(pub), priv, NA(priv), &a, &b) != CKR_OK)
            return 3;
    }
}

/* Initializes the token again, sets its user PIN and makes a private key "new". */
static int child_init_token(void)
{
    CK_UTF8CHAR label[32];
    memset(label, ' ', sizeof label);
    memcpy(label, "again", 5);
    if (F->C_InitToken(SLOT, PIN_DEFAULT, PINLEN(PIN_DEFAULT), label) != CKR_OK)
        return 3;
    CK_SESSION_HANDLE s;
    if (F->C_OpenSession(SLOT, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s) != CKR_OK ||
        F->C_Login(s, CKU_SO, PIN_DEFAULT, PINLEN(PIN_DEFAULT)) != CKR_OK ||
        F->C_InitPIN(s, NEW_PIN, PINLEN(NEW_PIN)) != CKR_OK || F->C_Logout(s) != CKR_OK ||
        F->C_Login(s, CKU_USER, NEW_PIN, PINLEN(NEW_PIN)) != CKR_OK)
        return 4;
    CK_MECHANISM gen = { CKM_AES_KEY_GEN, NULL, 0 };
    CK_ULONG len = 16;
    CK_ATTRIBUTE t[] = { { CKA_VALUE_LEN, &len, sizeof len }, { CKA_TOKEN, &T, 1 },
                         { CKA_PRIVATE, &T, 1 }, { CKA_LABEL, "new", 3 } };
    CK_OBJECT_HANDLE k;
    return F->C_GenerateKey(s, &gen, t, NA(t), &k) == CKR_OK ? 0 : 5;
}

/* Waits for the word to go (the end of the pipe on MULTIPROC_GO_FD), then logs in. */
static int child_login(void)
{
    CK_SESSION_HANDLE s;
    char byte;
    const char *fd = getenv("MULTIPROC_GO_FD");
    if (F->C_OpenSession(SLOT, CKF_SERIAL_SESSION, NULL, NULL, &s) != CKR_OK)
        return 3;
    if (fd && read(atoi(fd), &byte, 1) < 0)
        return 4;
    CK_RV rv = F->C_Login(s, CKU_USER, PIN, PINLEN(PIN));
    return rv == CKR_OK ? 0 : rv == CKR_PIN_LOCKED ? 5 : 6;
}

static int child(const char *action)
{
    load(SOFTTOKEN);
    SLOT = 0;
    if (strcmp(action, "login") == 0)
        return child_login();
    if (strcmp(action, "set-ids") == 0)
        return child_set_ids();
    if (strcmp(action, "pairs") == 0)
        return child_pairs();
    if (strcmp(action, "init-token") == 0)
        return child_init_token();
    return 2;
}

static pid_t spawn(const char *action)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl(SELF, SELF, "--child", action, SOFTTOKEN, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int finish(pid_t pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ----- this process ----- */

static void concurrent_changes(void)
{
    CK_SESSION_HANDLE s = open_user();
    CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
    CK_KEY_TYPE kt = CKK_AES;
    CK_BYTE value[16] = "concurrent-key!";
    CK_ATTRIBUTE t[] = { { CKA_CLASS, &cls, sizeof cls }, { CKA_KEY_TYPE, &kt, sizeof kt },
                         { CKA_VALUE, value, sizeof value }, { CKA_TOKEN, &T, 1 },
                         { CKA_PRIVATE, &Fa, 1 }, { CKA_SENSITIVE, &Fa, 1 },
                         { CKA_EXTRACTABLE, &T, 1 }, { CKA_LABEL, "shared", 6 } };
    CK_OBJECT_HANDLE k;
    must("C_CreateObject", F->C_CreateObject(s, t, NA(t), &k));
    /* Both start changing the key once the other process has found it. */
    int ready[2];
    char fdtext[16], byte;
    if (pipe(ready) != 0) {
        perror("pipe");
        exit(2);
    }
    snprintf(fdtext, sizeof fdtext, "%d", ready[1]);
    setenv("MULTIPROC_READY_FD", fdtext, 1);
    pid_t pid = spawn("set-ids");
    close(ready[1]);
    if (read(ready[0], &byte, 1) != 1)
        printf("     the other process did not start\n");
    close(ready[0]);
    int refused = 0;
    char label[32] = "";
    for (int i = 0; i < ROUNDS; i++) {
        snprintf(label, sizeof label, "label%d", i);
        CK_ATTRIBUTE lt[] = { { CKA_LABEL, label, strlen(label) } };
        if (F->C_SetAttributeValue(s, k, lt, NA(lt)) != CKR_OK)
            refused++;
    }
    int rc = finish(pid);
    if (rc != 0)
        printf("     the other process ended with %d\n", rc);
    check("concurrent C_SetAttributeValue: the other process's changes all answered CKR_OK", rc == 0);
    check("concurrent C_SetAttributeValue: this process's changes all answered CKR_OK", refused == 0);
    /* What the keystore holds, as a new session of this process reads it after a search
     * (which brings the process in step with the keystore). */
    CK_SESSION_HANDLE r = open_user();
    CK_OBJECT_HANDLE h = find_one(r, label);
    char id[32] = "", want_id[32];
    CK_BBOOL sensitive = CK_FALSE, extractable = CK_TRUE;
    CK_ATTRIBUTE got[] = { { CKA_ID, id, sizeof id - 1 }, { CKA_SENSITIVE, &sensitive, 1 },
                           { CKA_EXTRACTABLE, &extractable, 1 } };
    check("concurrent C_SetAttributeValue: this process's last label is kept", h != CK_INVALID_HANDLE);
    if (h == CK_INVALID_HANDLE)
        return;
    must("C_GetAttributeValue", F->C_GetAttributeValue(r, h, got, NA(got)));
    snprintf(want_id, sizeof want_id, "id%d", ROUNDS - 1);
    check("concurrent C_SetAttributeValue: the other process's last CKA_ID is kept",
          got[0].ulValueLen == strlen(want_id) && memcmp(id, want_id, strlen(want_id)) == 0);
    check("concurrent C_SetAttributeValue: the key stays sensitive and unextractable",
          sensitive == CK_TRUE && extractable == CK_FALSE);
    CK_BYTE v[16];
    CK_ATTRIBUTE val[] = { { CKA_VALUE, v, sizeof v } };
    expect("concurrent C_SetAttributeValue: CKA_VALUE", F->C_GetAttributeValue(r, h, val, 1),
           CKR_ATTRIBUTE_SENSITIVE);
    F->C_CloseSession(r);
    F->C_CloseSession(s);
}

static void killed_during_key_pairs(void)
{
    srand((unsigned)time(NULL));
    for (int i = 0; i < 12; i++) {
        pid_t pid = spawn("pairs");
        usleep(150 * 1000 + (rand() % 250) * 1000);
        kill(pid, SIGKILL);
        finish(pid);
    }
    CK_SESSION_HANDLE s = open_user();
    CK_ULONG pub = count(s, CKO_PUBLIC_KEY, "pair"), priv = count(s, CKO_PRIVATE_KEY, "pair");
    printf("     %lu public and %lu private keys made by the killed processes\n", pub, priv);
    check("killed during C_GenerateKeyPair: every public key has its private key", pub == priv);
    F->C_CloseSession(s);
}

/* Many processes log in with the right PIN at once: each try counts as a failure until it
 * settles, and one that found ten under way answered CKR_PIN_LOCKED. */
static void logins_at_once(void)
{
    enum { N = 16 };
    int go[2];
    char fdtext[16];
    if (pipe(go) != 0) {
        perror("pipe");
        exit(2);
    }
    /* The other processes keep the read end only: the end of the pipe is the word to go. */
    fcntl(go[1], F_SETFD, FD_CLOEXEC);
    snprintf(fdtext, sizeof fdtext, "%d", go[0]);
    setenv("MULTIPROC_GO_FD", fdtext, 1);
    pid_t pid[N];
    for (int i = 0; i < N; i++)
        pid[i] = spawn("login");
    close(go[0]);
    sleep(2); /* every process has loaded the module and waits */
    close(go[1]);
    int ok = 0, locked = 0, other = 0;
    for (int i = 0; i < N; i++) {
        int rc = finish(pid[i]);
        ok += rc == 0;
        locked += rc == 5;
        other += rc != 0 && rc != 5;
    }
    char what[128];
    snprintf(what, sizeof what, "%d right PINs at once: %d logged in, %d CKR_PIN_LOCKED, %d other", N,
             ok, locked, other);
    check(what, ok == N);
    CK_SESSION_HANDLE s;
    must("C_OpenSession", F->C_OpenSession(SLOT, CKF_SERIAL_SESSION, NULL, NULL, &s));
    CK_TOKEN_INFO ti;
    must("C_GetTokenInfo", F->C_GetTokenInfo(SLOT, &ti));
    check("  the user PIN is not locked after them", !(ti.flags & CKF_USER_PIN_LOCKED));
    F->C_CloseSession(s);
}

static void initialized_again_elsewhere(void)
{
    CK_SESSION_HANDLE s = open_user();
    CK_MECHANISM gen = { CKM_AES_KEY_GEN, NULL, 0 }, ecb = { CKM_AES_ECB, NULL, 0 };
    CK_ULONG len = 16;
    CK_ATTRIBUTE t[] = { { CKA_VALUE_LEN, &len, sizeof len }, { CKA_TOKEN, &T, 1 },
                         { CKA_PRIVATE, &T, 1 }, { CKA_ENCRYPT, &T, 1 }, { CKA_LABEL, "old", 3 } };
    CK_OBJECT_HANDLE k;
    must("C_GenerateKey", F->C_GenerateKey(s, &gen, t, NA(t), &k));
    CK_BYTE data[16] = "sixteen bytes!!", out[16];
    CK_ULONG n = sizeof out;
    must("C_EncryptInit", F->C_EncryptInit(s, &ecb, k));
    must("C_Encrypt", F->C_Encrypt(s, data, sizeof data, out, &n));
    check("C_InitToken in another process: it ran", finish(spawn("init-token")) == 0);
    CK_RV rv = F->C_EncryptInit(s, &ecb, k);
    check("C_InitToken in another process: the old key's handle no longer encrypts",
          rv == CKR_KEY_HANDLE_INVALID || rv == CKR_OBJECT_HANDLE_INVALID);
    CK_BYTE v[16];
    CK_ATTRIBUTE val[] = { { CKA_VALUE_LEN, v, sizeof v } };
    expect("C_InitToken in another process: the old key's attributes",
           F->C_GetAttributeValue(s, k, val, 1), CKR_OBJECT_HANDLE_INVALID);
    CK_SESSION_INFO si;
    must("C_GetSessionInfo", F->C_GetSessionInfo(s, &si));
    check("C_InitToken in another process: this process's login ended",
          si.state == CKS_RW_PUBLIC_SESSION);
    check("C_InitToken in another process: no key of the old token is found",
          count(s, CKO_SECRET_KEY, "old") == 0);
    F->C_CloseSession(s);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    SELF = argv[0];
    if (argc == 4 && strcmp(argv[1], "--child") == 0) {
        SOFTTOKEN = argv[3];
        return child(argv[2]);
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODULE SLOT SOFTTOKEN\n", argv[0]);
        return 2;
    }
    SOFTTOKEN = argv[3];
    load(argv[1]);
    SLOT = strtoul(argv[2], NULL, 10);
    CK_SESSION_HANDLE s;
    must("C_OpenSession", F->C_OpenSession(SLOT, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s));
    must("C_Login (default PIN)", F->C_Login(s, CKU_USER, PIN_DEFAULT, PINLEN(PIN_DEFAULT)));
    must("C_SetPIN", F->C_SetPIN(s, PIN_DEFAULT, PINLEN(PIN_DEFAULT), PIN, PINLEN(PIN)));
    printf("# %s, slot %lu\n", argv[1], SLOT);
    concurrent_changes();
    killed_during_key_pairs();
    logins_at_once();
    initialized_again_elsewhere();
    F->C_Finalize(NULL);
    printf("%s: %d failed\n", argv[1], failures);
    return failures != 0;
}
