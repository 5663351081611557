/* Why the leak test once failed on an Intel Xeon (tests/sanitize/leaks.sh):
 * GCC 12's sanitizer runtime (and LLVM's up to 16) intercepts
 * __tls_get_addr and takes a dynamic TLS block that starts 16 bytes past a
 * 4096-byte boundary for one with glibc 2.19's header, reading the two
 * words before it as the block's address and size.  glibc >= 2.25 has no
 * such header; a block malloc'd at that offset by chance gives LeakSanitizer
 * a garbage range to scan, and its tracer dies of SIGSEGV ("Tracer caught
 * signal 11", after "DTLS ... at" a bogus range).  Where blocks land
 * depends on what was allocated before (on the CPU, through the BLAS
 * kernels' buffers), so one machine hits it every time and another never.
 *
 * This probe makes it happen on purpose: N threads each touch the TLS of a
 * dlopen'd module (dtls_tls.c), and stay alive through the leak check at
 * exit; it prints how many blocks landed at 16 mod 4096.  With "leak" it
 * also leaks one allocation, which LeakSanitizer must report.
 *   dtls_probe MODULE N [leak] */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *(*touch)(void);
static int at_16;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER;
static int started;

static void *run(void *arg)
{
    char *p = touch();
    pthread_mutex_lock(&mu);
    at_16 += (uintptr_t)p % 4096 == 16;
    started++;
    pthread_cond_broadcast(&go);
    pthread_mutex_unlock(&mu);
    for (;;)
        pause(); /* alive when the leak check runs at exit */
    return arg;
}

static volatile void *sink;

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: dtls_probe MODULE N [leak]\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    touch = h ? (char *(*)(void))dlsym(h, "dtls_touch") : NULL;
    if (!touch) {
        fprintf(stderr, "dtls_probe: %s\n", dlerror());
        return 2;
    }
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, run, NULL))
            return 2;
        pthread_detach(t);
    }
    pthread_mutex_lock(&mu);
    while (started < n)
        pthread_cond_wait(&go, &mu);
    pthread_mutex_unlock(&mu);
    if (argc > 3 && !strcmp(argv[3], "leak")) {
        char *lost = malloc(4321);
        memset(lost, 7, 4321);
        sink = lost;
        sink = NULL; /* nothing points at it now: a leak */
    }
    printf("dtls blocks at 16 mod 4096: %d of %d\n", at_16, n);
    fflush(stdout);
    return 0;
}
