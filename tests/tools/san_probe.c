/*
 * san_probe.c — starts a thread and exits 0.  Built with the sanitizer
 * flags of the build; tests/tools/san_launch.sh runs it first to find out
 * whether sanitized programs can run on this kernel at all (TSan aborts
 * with "unexpected memory mapping" when vm.mmap_rnd_bits is too high).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int shared;

static void *bump(void *arg)
{
    (void)arg;
    shared++;
    return NULL;
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, bump, NULL) != 0)
        return 1;
    pthread_join(t, NULL);
    void *p = malloc(64);
    free(p);
    return shared == 1 ? 0 : 1;
}
