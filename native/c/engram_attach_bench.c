// libengram-attach-bench.so: the C baseline of JMH's AttachBench, run in the benchmark's own process. It is
// engram-attach's units without main.c, built with ENGRAM_ATTACH_LIB (native/Makefile), plus the four calls below, which the jmh module binds with
// JNR-FFI (jmh/.../CAttach.java). JMH then times the C attach of a region fd exactly as it times the Java attach: the
// same process, the same thread, the same fd, no child process and no socket in between.
//
// Build: `make -C native engram-attach-bench-lib` (native/build/libengram-attach-bench.so). Like engram-attach it
// links libc alone: libcuda.so.1 is dlopen'd when a cuda-vmm region or a registration first needs it, so the memfd
// CPU view works on a machine without a driver. Only the engram_bench_* calls are exported.
//
// One region is attached at a time per process (JMH runs AttachBench on one thread). A call that fails returns -1
// (engram_bench_attach: 0) and engram_bench_error() says why, naming the call and its errno or CUresult; a failed
// attach has released whatever it had made before it returns.
#include "engram_attach.h"
#ifndef ENGRAM_ATTACH_LIB
#error "the bench library is built with -DENGRAM_ATTACH_LIB (make -C native engram-attach-bench-lib)"
#endif

#define EXPORT __attribute__((visibility("default")))

static struct manifest held_mf;   // the attached region, as release() wants it
static CUdeviceptr held_va;
static int held;                  // 1 while a region is attached
static int held_kind;
static int context_device = -1;   // the GPU engram_bench_context made current

// Runs fn(arg) with fail() jumping back here: 0 when it returned, -1 when it failed (lib_error says why).
static int guarded(void (*fn)(void *), void *arg) {
    jmp_buf escape;
    jmp_buf *outer = lib_escape;
    if (setjmp(escape)) {
        lib_escape = outer;
        return -1;
    }
    lib_escape = &escape;
    fn(arg);
    lib_escape = outer;
    return 0;
}

static void context_call(void *arg) {
    int device = *(const int *)arg;
    if (cuda_ready && device != context_device)
        fail("engram_bench_context(%d): this process's context is GPU %d's already (one GPU per process)", device,
             context_device);
    cuda_context(device);
    cu_check(cu.CtxSetCurrent(cuda_primary), "cuCtxSetCurrent", "GPU %d primary context", device);
    context_device = device;
}

struct attach_args { int kind, fd, node, flags; int64_t size; };

static void attach_call(void *arg) {
    const struct attach_args *a = arg;
    if (held) fail("engram_bench_attach: a region is still attached (engram_bench_release first)");
    if (a->kind < 0 || a->size <= 0 || a->fd < 0)
        fail("engram_bench_attach: kind %d, fd %d, %lld bytes: kind, fd and size must not be negative, size not 0",
             a->kind, a->fd, (long long)a->size);
    if ((a->kind == K_VMM_HOST || (a->flags & 2)) && !cuda_ready)
        fail("engram_bench_attach: kind %d, flags 0x%x needs CUDA: call engram_bench_context first (untimed)", a->kind,
             a->flags);
    struct timings t;
    attach_one(context_device < 0 ? 0 : context_device, (uint32_t)a->kind, (uint32_t)a->flags, a->fd,
               (uint64_t)a->size, a->node, &held_mf, &held_va, &t);
}

static void release_call(void *arg) {
    (void)arg;
    release(&held_mf, held_va);
}

// What a failed release leaves is not released again: its flags may be stale.
static void forget_held(void) {
    memset(&held_mf, 0, sizeof held_mf);
    held_va = 0;
    held = 0;
}

// Why the last call failed ("" before any failure). Valid until the next call of this thread.
EXPORT const char *engram_bench_error(void) {
    return lib_error;
}

// Loads libcuda.so.1 (once), cuInit, retains GPU device's primary context and the VMM granularity (once per
// process), and makes that context current in the calling thread (every call), as the Java side's Cuda.useDevice
// does. Call it before timing an attach that needs CUDA. 0, or -1.
EXPORT int engram_bench_context(int device) {
    return guarded(context_call, &device);
}

// Attaches region fd of size bytes as a client does (attach_memfd.c's attach_memfd or attach_cuda.c's attach_vmm: the same calls):
// kind 0 memfd, 1 hugetlb memfd, 2 cuda-vmm host allocation; flags 1 CPU view too (cuda-vmm, HOST_NUMA node), 2 register
// (memfd: cuMemHostRegister READ_ONLY). The fd stays the caller's. Returns the view's address (the mapping of a memfd,
// the reserved VA of a cuda-vmm region), or 0 after releasing what it had made.
EXPORT int64_t engram_bench_attach(int kind, int fd, int64_t size, int node, int flags) {
    struct attach_args a = {.kind = kind, .fd = fd, .node = node, .flags = flags, .size = size};
    int was_held = held;
    if (guarded(attach_call, &a) != 0) {
        if (!was_held && held_mf.regions) {
            char cause[sizeof lib_error];
            memcpy(cause, lib_error, sizeof cause);
            int rc = guarded(release_call, NULL);
            if (rc != 0) {
                char again[sizeof lib_error];
                memcpy(again, lib_error, sizeof again);
                snprintf(lib_error, sizeof lib_error, "%.480s; then releasing what it had made failed: %.480s", cause,
                         again);
            } else {
                memcpy(lib_error, cause, sizeof lib_error);
            }
            forget_held();
        }
        return 0;
    }
    held = 1;
    held_kind = kind;
    return held_kind == K_VMM_HOST ? (int64_t)held_va : (int64_t)(uintptr_t)held_mf.regions[0].host;
}

// Releases the attached region in reverse order (cuMemUnmap, cuMemRelease, cuMemAddressFree; cuMemHostUnregister,
// munmap). 0, or -1 (nothing is attached, or a call failed: what it left is not retried).
EXPORT int engram_bench_release(void) {
    if (!held) {
        snprintf(lib_error, sizeof lib_error, "engram_bench_release: nothing is attached");
        return -1;
    }
    int rc = guarded(release_call, NULL);
    forget_held();
    return rc;
}
