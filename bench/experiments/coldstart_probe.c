// coldstart_probe: measures the ways of getting checkpoint bytes into each backend's memory on one machine, so the
// loader's design follows what was measured (issue 14). Not a benchmark of the daemon: JMH's ColdLoadBench is.
//
//   coldstart_probe FILE GIB THREADS REGIONS [cuda] [cold] [vmm-procs]
//
// With cuda it also times HOST_NUMA creation by 1, 2, 4 and 8 helper processes (each creating and exporting its
// share as POSIX fds, the parent importing them), then in this process with 1 and more threads and handle sizes.
// With vmm-procs it runs only that multi-process creation (1, 2, 4 and 8 processes; cuda implied), for a run that
// compares a daemon's cuda-vmm creation with the driver's rate (scripts/gpu/gpu-seed-run.sh).
//
// FILE is created (GIB GiB of pseudo-random bytes) if missing or of another size. Every test reads all of it with
// THREADS threads in 16 MiB chunks (one chunk at a time per thread, taken in file order) into REGIONS destinations of
// equal size, and prints one line: test name, seconds, GiB/s. Tests needing huge pages or CUDA say "skipped: why".
// Cold-disk tests drop the page cache (needs root) and say so if they cannot.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define CHUNK (16L << 20)
#define GIB (1L << 30)

static const char *path;
static long total;
static int threads, nregions;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(1);
}

static void report(const char *name, double secs, long bytes) {
    printf("%-44s %8.3f s %7.2f GiB/s\n", name, secs, bytes / (double)GIB / secs);
    fflush(stdout);
}

// ---- a pool that runs fn(i) for i in [0, n) over `threads` threads, in order of i
typedef void (*task_fn)(long i, void *arg);
struct pool { task_fn fn; void *arg; long n; long next; pthread_mutex_t mu; };

static void *worker(void *p) {
    struct pool *pl = p;
    for (;;) {
        pthread_mutex_lock(&pl->mu);
        long i = pl->next++;
        pthread_mutex_unlock(&pl->mu);
        if (i >= pl->n) return NULL;
        pl->fn(i, pl->arg);
    }
}

static void run_pool(int nthreads, long n, task_fn fn, void *arg) {
    struct pool pl = {fn, arg, n, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t t[256];
    for (int i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, worker, &pl);
    for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
}

// ---- destinations: nregions areas of total/nregions bytes each
struct dest { char *base[64]; int fd[64]; long size; int fdfile; int direct; };

static char *chunk_addr(struct dest *d, long i, long *len) {
    long per = d->size / CHUNK;  // chunks per region (sizes are multiples of CHUNK)
    long r = i / per, off = (i % per) * CHUNK;
    *len = CHUNK;
    return d->base[r] + off;
}

static void read_task(long i, void *arg) {
    struct dest *d = arg;
    long len;
    char *at = chunk_addr(d, i, &len);
    long done = 0;
    while (done < len) {
        ssize_t n = pread(d->fdfile, at + done, len - done, i * CHUNK + done);
        if (n <= 0) die("pread");
        done += n;
    }
}

static void populate_task(long i, void *arg) {
    struct dest *d = arg;
    long len;
    char *at = chunk_addr(d, i, &len);
    if (madvise(at, len, MADV_POPULATE_WRITE) != 0) die("madvise(MADV_POPULATE_WRITE)");
}

static void fallocate_task(long i, void *arg) {
    struct dest *d = arg;
    long per = d->size / CHUNK;
    long r = i / per, off = (i % per) * CHUNK;
    if (fallocate(d->fd[r], 0, off, CHUNK) != 0) die("fallocate");
}

static void touch_task(long i, void *arg) {
    struct dest *d = arg;
    long len;
    char *at = chunk_addr(d, i, &len);
    for (long p = 0; p < len; p += 4096) at[p] = 0;
}

static long nchunks(void) { return total / CHUNK; }

static void readall(struct dest *d, const char *name) {
    double t0 = now();
    run_pool(threads, nchunks(), read_task, d);
    report(name, now() - t0, total);
}

static int open_file(int flags) {
    int fd = open(path, O_RDONLY | flags);
    if (fd < 0) die("open checkpoint");
    return fd;
}

// ---- anonymous memory
static void anon_alloc(struct dest *d) {
    d->size = total / nregions;
    for (int r = 0; r < nregions; r++) {
        d->base[r] = mmap(NULL, d->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (d->base[r] == MAP_FAILED) die("mmap anonymous");
        d->fd[r] = -1;
    }
}

static void unmap_all(struct dest *d) {
    for (int r = 0; r < nregions; r++) {
        munmap(d->base[r], d->size);
        if (d->fd[r] >= 0) close(d->fd[r]);
    }
}

static int memfd_alloc(struct dest *d, unsigned flags) {
    d->size = total / nregions;
    for (int r = 0; r < nregions; r++) {
        d->fd[r] = (int)syscall(SYS_memfd_create, "probe", 1u | 2u | flags);
        if (d->fd[r] < 0) return -1;
        if (ftruncate(d->fd[r], d->size) != 0) return -1;
        d->base[r] = mmap(NULL, d->size, PROT_READ | PROT_WRITE, MAP_SHARED, d->fd[r], 0);
        if (d->base[r] == MAP_FAILED) return -1;
    }
    return 0;
}

static char *copy_from, *copy_to;

static void copy_task(long i, void *arg) {
    (void)arg;
    memcpy(copy_to + i * CHUNK, copy_from + i * CHUNK, CHUNK);
}

static void test_memcpy(void) {
    // memcpy bandwidth with `threads` threads: 16 MiB chunks from one prefaulted 4 GiB area to another
    long save = total;
    total = 4 * GIB;
    struct dest a, b;
    int saver = nregions;
    nregions = 1;
    anon_alloc(&a);
    anon_alloc(&b);
    run_pool(threads, nchunks(), touch_task, &a);
    run_pool(threads, nchunks(), touch_task, &b);
    copy_from = a.base[0];
    copy_to = b.base[0];
    double best = 1e9;
    for (int k = 0; k < 3; k++) {
        double t0 = now();
        run_pool(threads, nchunks(), copy_task, NULL);
        double s = now() - t0;
        if (s < best) best = s;
    }
    report("memcpy (anon to anon, best of 3)", best, total);
    unmap_all(&a);
    unmap_all(&b);
    total = save;
    nregions = saver;
}

static void warm(void) {
    struct dest d;
    anon_alloc(&d);
    d.fdfile = open_file(0);
    run_pool(threads, nchunks(), read_task, &d);  // brings the file into the page cache
    close(d.fdfile);
    unmap_all(&d);
}

static void test_anon(int prefault) {
    struct dest d;
    anon_alloc(&d);
    d.fdfile = open_file(0);
    if (prefault) {
        double t0 = now();
        run_pool(threads, nchunks(), touch_task, &d);
        report("anon: prefault (touch, parallel)", now() - t0, total);
    }
    readall(&d, prefault ? "anon prefaulted: pread (BASELINE)" : "anon: pread, faulting");
    close(d.fdfile);
    unmap_all(&d);
}

static void test_memfd(unsigned flags, const char *kind, int mode) {
    // mode 0: fault during pread; 1: MADV_POPULATE_WRITE parallel, then pread; 2: fallocate parallel, then pread
    struct dest d;
    char name[96];
    if (memfd_alloc(&d, flags) != 0) {
        printf("%-44s skipped: %s\n", kind, strerror(errno));
        return;
    }
    d.fdfile = open_file(0);
    double t0 = now();
    if (mode == 1) run_pool(threads, nchunks(), populate_task, &d);
    if (mode == 2) run_pool(threads, nchunks(), fallocate_task, &d);
    double t1 = now();
    if (mode) {
        snprintf(name, sizeof name, "%s: %s", kind, mode == 1 ? "populate_write" : "fallocate");
        report(name, t1 - t0, total);
    }
    snprintf(name, sizeof name, "%s: pread%s", kind, mode ? " after it" : ", faulting");
    readall(&d, name);
    if (mode) {
        snprintf(name, sizeof name, "%s: both", kind);
        report(name, now() - t0, total);
    }
    close(d.fdfile);
    unmap_all(&d);
}

// ---- cold disk
static int drop_caches(void) {
    sync();
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd < 0) return -1;
    int ok = write(fd, "3", 1) == 1;
    close(fd);
    return ok ? 0 : -1;
}

static void test_cold(int direct, int nthreads, const char *name) {
    if (drop_caches() != 0) {
        printf("%-44s skipped: cannot drop the page cache (%s)\n", name, strerror(errno));
        return;
    }
    struct dest d;
    anon_alloc(&d);
    run_pool(threads, nchunks(), touch_task, &d);
    d.fdfile = open_file(direct ? O_DIRECT : 0);
    if (!direct) posix_fadvise(d.fdfile, 0, 0, POSIX_FADV_SEQUENTIAL);
    int save = threads;
    threads = nthreads;
    readall(&d, name);
    threads = save;
    close(d.fdfile);
    unmap_all(&d);
}

// ---- cuda-vmm HOST_NUMA creation
typedef int CUresult;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long CUdeviceptr;
struct prop { unsigned type, handles; int loctype, locid; void *win32; unsigned char flags[8]; };
struct access { int loctype, locid; unsigned flags; };
static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
static CUresult (*cuCtxSetCurrent)(void *);
static CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const struct prop *, unsigned long long);
static CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
static CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
static CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
static CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
static CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const struct access *, size_t);
static CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int, unsigned long long);
static CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);
static void *ctx;

#define CU(call) do { CUresult r_ = (call); if (r_) { fprintf(stderr, "%s: CUresult %d\n", #call, r_); exit(1); } } while (0)

static int cuda_load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) return -1;
#define SYM(n) if (!(*(void **)&n = dlsym(lib, #n))) return -1
    SYM(cuInit); SYM(cuDeviceGet); SYM(cuDevicePrimaryCtxRetain); SYM(cuCtxSetCurrent); SYM(cuMemCreate);
    SYM(cuMemRelease); SYM(cuMemAddressReserve); SYM(cuMemAddressFree); SYM(cuMemMap); SYM(cuMemUnmap);
    SYM(cuMemSetAccess); SYM(cuMemExportToShareableHandle); SYM(cuMemImportFromShareableHandle);
    int dev;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    return 0;
}

// one allocation of `size`: created, mapped, CPU (HOST_NUMA 0) read-write access; the pieces of a region
struct vmm { long size; CUmemGenericAllocationHandle h; CUdeviceptr va; };
static struct vmm allocs[4096];
static long piece;

static void vmm_create_task(long i, void *arg) {
    (void)arg;
    CU(cuCtxSetCurrent(ctx));
    struct prop p = {1, 1, 3, 0, NULL, {0}};
    allocs[i].size = piece;
    CU(cuMemCreate(&allocs[i].h, piece, &p, 0));
    CU(cuMemAddressReserve(&allocs[i].va, piece, 2 << 20, 0, 0));
    CU(cuMemMap(allocs[i].va, piece, 0, allocs[i].h, 0));
    struct access a = {3, 0, 3};
    CU(cuMemSetAccess(allocs[i].va, piece, &a, 1));
}

static void vmm_read_task(long i, void *arg) {
    struct dest *d = arg;
    long per = piece / CHUNK;
    char *at = (char *)(uintptr_t)allocs[i / per].va + (i % per) * CHUNK;
    long done = 0;
    while (done < CHUNK) {
        ssize_t n = pread(d->fdfile, at + done, CHUNK - done, i * CHUNK + done);
        if (n <= 0) die("pread into vmm");
        done += n;
    }
}

static void test_vmm(long pieces, int nthreads) {
    piece = total / pieces;
    char name[96];
    double t0 = now();
    run_pool(nthreads, pieces, vmm_create_task, NULL);
    double t1 = now();
    snprintf(name, sizeof name, "vmm: create %ld x %ld MiB, %d threads", pieces, piece >> 20, nthreads);
    report(name, t1 - t0, total);
    struct dest d;
    d.fdfile = open_file(0);
    run_pool(threads, nchunks(), vmm_read_task, &d);
    snprintf(name, sizeof name, "vmm: pread after it (%d threads)", threads);
    report(name, now() - t1, total);
    close(d.fdfile);
    double t2 = now();
    for (long i = 0; i < pieces; i++) {
        CU(cuMemUnmap(allocs[i].va, piece));
        CU(cuMemAddressFree(allocs[i].va, piece));
        CU(cuMemRelease(allocs[i].h));
    }
    report("vmm: release", now() - t2, total);
}

// ---- cuda-vmm HOST_NUMA creation in several processes: does the driver serialise cuMemCreate per process or
// for the machine? Each helper process (this program, exec'd: CUDA is not fork-safe) creates its share of the
// pieces, exports each as a POSIX fd, sends it over a socket (SCM_RIGHTS), releases its handle and exits; the
// parent imports every fd, maps it with CPU access and reads the file into it (the memory outlives its creator).

static void send_fd(int sock, int fd) {
    char c = 0;
    struct iovec iov = {&c, 1};
    union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } u;
    struct msghdr m = {0};
    m.msg_iov = &iov; m.msg_iovlen = 1; m.msg_control = u.b; m.msg_controllen = sizeof u.b;
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET; h->cmsg_type = SCM_RIGHTS; h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof(int));
    if (sendmsg(sock, &m, 0) != 1) die("sendmsg");
}

static int recv_fd(int sock) {
    char c;
    struct iovec iov = {&c, 1};
    union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } u;
    struct msghdr m = {0};
    m.msg_iov = &iov; m.msg_iovlen = 1; m.msg_control = u.b; m.msg_controllen = sizeof u.b;
    if (recvmsg(sock, &m, 0) != 1) die("recvmsg (a helper failed?)");
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    if (!h || h->cmsg_type != SCM_RIGHTS) die("recvmsg: no fd");
    int fd;
    memcpy(&fd, CMSG_DATA(h), sizeof(int));
    return fd;
}

// the helper: `coldstart_probe --vmm-helper SOCKFD PIECES PIECE_BYTES`
static int vmm_helper(int sock, long pieces, long size) {
    if (cuda_load() != 0) return 3;
    struct prop p = {1, 1, 3, 0, NULL, {0}};
    for (long i = 0; i < pieces; i++) {
        CUmemGenericAllocationHandle h;
        int fd = -1;
        CU(cuMemCreate(&h, size, &p, 0));
        CU(cuMemExportToShareableHandle(&fd, h, 1, 0));
        send_fd(sock, fd);
        close(fd);
        CU(cuMemRelease(h));
    }
    return 0;
}

static void test_vmm_procs(int procs, long pieces) {
    piece = total / pieces;
    if (pieces % procs || pieces > 4096) { printf("vmm procs: skipped: %ld pieces over %d processes\n", pieces, procs); return; }
    int socks[64][2];
    pid_t pids[64];
    double t0 = now();
    for (int k = 0; k < procs; k++) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, socks[k])) die("socketpair");
        char a1[16], a2[24], a3[24];
        snprintf(a1, sizeof a1, "%d", socks[k][1]);
        snprintf(a2, sizeof a2, "%ld", pieces / procs);
        snprintf(a3, sizeof a3, "%ld", piece);
        char *argv[] = {"coldstart_probe", "--vmm-helper", a1, a2, a3, NULL};
        extern char **environ;
        if (posix_spawn(&pids[k], "/proc/self/exe", NULL, NULL, argv, environ)) die("posix_spawn");
        close(socks[k][1]);
    }
    for (int k = 0; k < procs; k++) {
        for (long j = 0; j < pieces / procs; j++) {
            allocs[k * (pieces / procs) + j].size = recv_fd(socks[k][0]); // the fd, for now
        }
    }
    double t1 = now();
    char name[112];
    snprintf(name, sizeof name, "vmm procs: %d processes create %ld x %ld MiB and export", procs, pieces, piece >> 20);
    report(name, t1 - t0, total);
    for (int k = 0; k < procs; k++) {
        int st;
        waitpid(pids[k], &st, 0);
        close(socks[k][0]);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) { printf("vmm procs: helper %d failed (%d)\n", k, st); exit(1); }
    }
    double t2 = now();
    for (long i = 0; i < pieces; i++) {
        int fd = (int)allocs[i].size;
        CU(cuMemImportFromShareableHandle(&allocs[i].h, (void *)(intptr_t)fd, 1));
        close(fd);
        allocs[i].size = piece;
        CU(cuMemAddressReserve(&allocs[i].va, piece, 2 << 20, 0, 0));
        CU(cuMemMap(allocs[i].va, piece, 0, allocs[i].h, 0));
        struct access a = {3, 0, 3};
        CU(cuMemSetAccess(allocs[i].va, piece, &a, 1));
    }
    double t3 = now();
    snprintf(name, sizeof name, "vmm procs: import, map, access in the parent (helpers gone)");
    report(name, t3 - t2, total);
    struct dest d;
    d.fdfile = open_file(0);
    run_pool(threads, nchunks(), vmm_read_task, &d);
    report("vmm procs: pread into it", now() - t3, total);
    close(d.fdfile);
    for (long i = 0; i < pieces; i++) {
        CU(cuMemUnmap(allocs[i].va, piece));
        CU(cuMemAddressFree(allocs[i].va, piece));
        CU(cuMemRelease(allocs[i].h));
    }
}

static void make_file(void) {
    struct stat st;
    if (stat(path, &st) == 0 && st.st_size == total) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("create checkpoint");
    char *buf = malloc(CHUNK);
    uint64_t x = 88172645463325252ull;
    double t0 = now();
    for (long off = 0; off < total; off += CHUNK) {
        for (long p = 0; p < CHUNK; p += 8) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            memcpy(buf + p, &x, 8);
        }
        if (write(fd, buf, CHUNK) != CHUNK) die("write checkpoint");
    }
    fsync(fd);
    close(fd);
    free(buf);
    report("(made the file)", now() - t0, total);
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--vmm-helper") == 0) {
        return vmm_helper(atoi(argv[2]), atol(argv[3]), atol(argv[4]));
    }
    if (argc < 5) {
        fprintf(stderr, "usage: coldstart_probe FILE GIB THREADS REGIONS [cuda] [cold]\n");
        return 2;
    }
    path = argv[1];
    total = atol(argv[2]) * GIB;
    threads = atoi(argv[3]);
    nregions = atoi(argv[4]);
    int cuda = 0, cold = 0, vmm_procs_only = 0;
    for (int i = 5; i < argc; i++) {
        cuda |= strcmp(argv[i], "cuda") == 0;
        cold |= strcmp(argv[i], "cold") == 0;
        vmm_procs_only |= strcmp(argv[i], "vmm-procs") == 0;
    }
    if (threads < 1 || threads > 256 || nregions < 1 || nregions > 64 || total % ((long)nregions * CHUNK)) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    printf("# %s: %ld GiB, %d threads, %d regions\n", path, total / GIB, threads, nregions);
    make_file();
    if (vmm_procs_only) {
        if (cuda_load() != 0) {
            const char *why = dlerror();
            printf("vmm procs: skipped: %s\n", why ? why : "libcuda.so.1 not loadable");
            return 0;
        }
        int procs[] = {1, 2, 4, 8};
        for (int k = 0; k < 4 && procs[k] <= threads; k++) test_vmm_procs(procs[k], total / GIB >= 8 ? total / GIB : 8);
        return 0;
    }
    test_memcpy();
    warm();
    test_anon(1);
    test_anon(0);
    test_memfd(0, "memfd 4k", 0);
    test_memfd(0, "memfd 4k", 1);
    test_memfd(0, "memfd 4k", 2);
    test_memfd(4u, "memfd hugetlb", 0);
    test_memfd(4u, "memfd hugetlb", 1);
    test_memfd(4u, "memfd hugetlb", 2);
    if (cuda) {
        // helpers are exec'd (posix_spawn), so the parent's own CUDA state does not reach them
        int procs[] = {1, 2, 4, 8};
        for (int k = 0; k < 4 && procs[k] <= threads && cuda_load() == 0; k++) {
            test_vmm_procs(procs[k], total / GIB >= 8 ? total / GIB : 8);
        }
        if (cuda_load() != 0) {
            const char *why = dlerror();
            printf("vmm: skipped: %s\n", why ? why : "libcuda.so.1 not loadable");
        } else {
            test_vmm(nregions, 1);
            test_vmm(nregions, nregions < threads ? nregions : threads);
            test_vmm(total / (1L << 30), threads);  // 1 GiB pieces: several handles per region
            test_vmm(total / (256L << 20), threads);
        }
    }
    if (cold) {
        test_cold(0, threads, "cold: buffered pread, fadvise SEQUENTIAL");
        test_cold(1, threads, "cold: O_DIRECT pread");
        test_cold(1, 4, "cold: O_DIRECT pread, 4 threads");
        test_cold(0, 4, "cold: buffered pread, 4 threads");
    }
    return 0;
}
