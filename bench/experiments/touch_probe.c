// touch_probe GIB THREADS ROUNDS: how fast this machine gives a process new memory, round after round.
// Each round maps GIB GiB of anonymous memory (MAP_PRIVATE | MAP_ANONYMOUS, 4 KiB pages, no huge pages), writes one
// byte in every 4 KiB page from THREADS threads (each its own contiguous share), unmaps it, and prints the round's
// rate. On bare metal every round runs at the kernel's page-fault rate; on a VM whose guest memory the host backs
// only when first touched (Firecracker grows a guest's memory as it is used), the first round also pays the host's
// faults, and a round after the guest has freed the memory shows whether the host took it back (free page
// reporting): then every round pays them again. MemTotal and MemFree are printed before and after each round.
//   gcc -O2 -pthread -o touch_probe touch_probe.c && ./touch_probe 100 8 3
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static char *base;
static long share, nthreads;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *touch(void *arg) {
    long k = (long) arg;
    volatile char *p = base + k * share;
    for (long off = 0; off < share; off += 4096) p[off] = 1;
    return NULL;
}

static void meminfo(const char *when) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long total = -1, free_kb = -1;
    while (f && fgets(line, sizeof line, f)) {
        sscanf(line, "MemTotal: %ld kB", &total);
        sscanf(line, "MemFree: %ld kB", &free_kb);
    }
    if (f) fclose(f);
    printf("  %s: MemTotal %.1f GiB, MemFree %.1f GiB\n", when, total / 1048576.0, free_kb / 1048576.0);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: touch_probe GIB THREADS ROUNDS\n");
        return 2;
    }
    long gib = atol(argv[1]);
    nthreads = atol(argv[2]);
    long rounds = atol(argv[3]);
    if (gib < 1 || nthreads < 1 || nthreads > 256 || rounds < 1) {
        fprintf(stderr, "touch_probe: GIB >= 1, THREADS 1-256, ROUNDS >= 1\n");
        return 2;
    }
    long bytes = gib << 30;
    share = bytes / nthreads / 4096 * 4096;
    for (long r = 1; r <= rounds; r++) {
        meminfo("before");
        base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED) {
            perror("touch_probe: mmap");
            return 1;
        }
        madvise(base, bytes, MADV_NOHUGEPAGE);
        pthread_t t[256];
        double t0 = now();
        for (long k = 0; k < nthreads; k++) pthread_create(&t[k], NULL, touch, (void *) k);
        for (long k = 0; k < nthreads; k++) pthread_join(t[k], NULL);
        double t1 = now();
        meminfo("touched");
        munmap(base, bytes);
        printf("round %ld: touched %.1f GiB in %.3f s from %ld threads: %.2f GiB/s\n", r,
               (double) share * nthreads / (1L << 30), t1 - t0, nthreads, share * nthreads / (t1 - t0) / (1L << 30));
        fflush(stdout);
    }
    meminfo("after");
    return 0;
}
