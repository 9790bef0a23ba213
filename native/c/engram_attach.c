// engram-attach: a C client of engram-host's wire protocol (docs/protocol.md, versions 2 and 1), written from
// that document alone, and the raw-driver baseline of the attach path: connect, check the daemon's uid
// (SO_PEERCRED), HELLO/WELCOME, IMPORT, receive the MANIFEST (in parts, in version 2) and its fds from the
// daemon process, check every memfd's seals, attach every region, release, BYE.
//
//   cuda-vmm regions (kind 2 host, 3 device): cuMemImportFromShareableHandle, one cuMemAddressReserve
//     for all of them, cuMemMap each at its offset (back to back, in region order, so that a kind 2 table over a
//     run of regions is one range), cuMemSetAccess(GPU, read) and, with --cpu-view, cuMemSetAccess(HOST_NUMA, read)
//     for host regions.
//   memfd regions (kind 0, 1): F_GET_SEALS and fstat checked, mmap PROT_READ MAP_SHARED; with --register
//     cuMemHostRegister_v2 (READ_ONLY|DEVICEMAP|PORTABLE, chunks of at most 64 GiB) and cuMemHostGetDevicePointer_v2.
//
// libcuda.so.1 is dlopen'd only when a step needs it (CUDA types below follow CUDA 13's cuda.h; no
// cuda.h needed), so memfd attaches build and run on machines without CUDA. One JSON line or a few
// human lines per repetition. Every error prints "engram-attach: ..." and exits 1. Built with ENGRAM_ATTACH_LIB
// (engram_attach_bench.c), its attach code is also JMH AttachBench's C baseline, as a library in the JVM.
//
// --verify-content SIDECAR: the content check of docs/checkpoints.md (sha256-tree-v1 over every CPU-readable
// table's mapped bytes, compared with the digest record of `engram-host inspect --write-digests`, version 2 or 1),
// with SHA-256 written here (FIPS 180-4, one thread; --self-test-sha256 checks it against known vectors), so libc
// stays the only library. A version 2 record's engram-digest-v1 is also compared with the manifest's digest.
#define _GNU_SOURCE
#include <errno.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

// memfd seals (linux/fcntl.h), spelled out for C libraries that predate them.
#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x1
#define F_SEAL_SHRINK 0x2
#define F_SEAL_GROW 0x4
#define F_SEAL_WRITE 0x8
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x10
#endif

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MAX_PAYLOAD_V1 (64u << 20)       // payload_length of a daemon message in version 1 (and of the bench peer's)
#define MAX_PAYLOAD_V2 1048584u          // ... in version 2: a 1 MiB piece of a body and the 8-byte frame header
#define MAX_PAYLOAD_PRE 65536u           // ... before a version is chosen (an ERROR, or the WELCOME)
#define MAX_PIECE 1048576u               // version 2: the most body bytes one message carries
#define MAX_LOGICAL (1u << 30)           // version 2: the largest frame sent in parts (header and body), 1 GiB
#define CONTINUED 0x8000u                // version 2: the type bit "the body continues in PARTs"
#define MAX_FDS 65536u                   // fd_count limit
#define FDS_PER_SENDMSG 253u             // the kernel's SCM_MAX_FD: one batch
#define FILLER 0xFD
#define MAGIC 0x4D524745u                // "EGRM"
#define VERSION_MIN 1                    // the versions this client speaks (HELLO min, max)
#define VERSION_MAX 2
#define MAX_STR16 4096u
#define MAX_TEXT 4096u                   // an ERROR's message and each detail
#define MAX_DETAILS 101u                 // 100 differences and "... and N more differences"
#define MAX_BLOB (16u << 20)             // a fingerprint (MANIFEST, ERROR)
#define MAX_REGIONS 65536u
#define MAX_DAEMON_UIDS 64
#define MAX_SELECT 64                    // --table: the most tables one run may name
#define MAX_TABLES 1048576u
#define MAX_RANK 16u
#define REPLY_TIMEOUT_S 10
#define RETRY_MS 100                     // --wait-ms: NOT_READY asked again, a restarting daemon's socket tried again
#define REGISTER_CHUNK (64ull << 30)     // r580 drivers refuse one register call of >= 512 GiB
#define DIGEST_CHUNK (64ull << 20)       // engram digest v1 chunk size

enum { T_HELLO = 1, T_WELCOME, T_IMPORT, T_MANIFEST, T_STATUS, T_STATUS_REPLY, T_STOP, T_STOP_ACK, T_ERROR, T_BYE, T_PART };
enum { K_MEMFD = 0, K_MEMFD_HUGETLB = 1, K_VMM_HOST = 2, K_VMM_DEVICE = 3 };
static const char *const TYPE_NAMES[] = {"?", "HELLO", "WELCOME", "IMPORT", "MANIFEST", "STATUS", "STATUS_REPLY",
                                         "STOP", "STOP_ACK", "ERROR", "BYE", "PART"};
static const char *const KIND_NAMES[] = {"memfd", "memfd-hugetlb", "cuda-vmm host", "cuda-vmm device"};
static const char *const ERROR_NAMES[] = {"?", "BAD_REQUEST", "UNSUPPORTED_VERSION", "NOT_READY",
                                          "FINGERPRINT_MISMATCH", "NOT_ALLOWED", "STOPPING", "INTERNAL", "LOAD_FAILED",
                                          "BUSY", "TIMED_OUT"};
#define ERROR_CODES (sizeof ERROR_NAMES / sizeof ERROR_NAMES[0])
static const char *const STATE_NAMES[] = {"loading", "ready", "stopping", "failed"};

// ---------------------------------------------------------------------------------------------- errors

#ifdef ENGRAM_ATTACH_LIB
// Built into the benchmarks' in-process library (engram_attach_bench.c), fail() must not end the process that loaded
// it (a JVM): it keeps the message and jumps back to the library call that set lib_escape, which returns an error.
#include <setjmp.h>
static _Thread_local jmp_buf *lib_escape;
static _Thread_local char lib_error[1024];
#endif

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
#ifdef ENGRAM_ATTACH_LIB
    vsnprintf(lib_error, sizeof lib_error, fmt, ap);
    va_end(ap);
    if (lib_escape) longjmp(*lib_escape, 1);
    fprintf(stderr, "engram-attach library: failed outside a library call: %s\n", lib_error);
    abort();
#else
    fputs("engram-attach: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
#endif
}

// "call(context) failed: ENAME (description)", as the Java layer names native failures.
static void fail_errno(const char *call, const char *context) __attribute__((noreturn));
static void fail_errno(const char *call, const char *context) {
    int e = errno;
    const char *name = strerrorname_np(e);
    fail("%s(%s) failed: %s (%s)", call, context, name ? name : "E?", strerror(e));
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) fail("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

// ---------------------------------------------------------------------------------------------- libcuda

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
    unsigned type, requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; unsigned char reserved[4]; } allocFlags;
} CUmemAllocationProp;
typedef struct { CUmemLocation location; unsigned flags; } CUmemAccessDesc;
_Static_assert(sizeof(CUmemLocation) == 8, "CUmemLocation is 8 bytes");
_Static_assert(sizeof(CUmemAllocationProp) == 32 && offsetof(CUmemAllocationProp, location) == 8 &&
               offsetof(CUmemAllocationProp, allocFlags) == 24, "CUmemAllocationProp layout");
_Static_assert(sizeof(CUmemAccessDesc) == 12 && offsetof(CUmemAccessDesc, flags) == 8, "CUmemAccessDesc layout");

#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_LOCATION_TYPE_HOST_NUMA 3
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0
#define CU_MEM_ACCESS_FLAGS_PROT_READ 1
#define CU_MEMHOSTREGISTER_PORTABLE 0x1
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x2
#define CU_MEMHOSTREGISTER_READ_ONLY 0x8

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
    CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*MemAddressFree)(CUdeviceptr, size_t);
    CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*MemUnmap)(CUdeviceptr, size_t);
    CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*MemHostRegister)(void *, size_t, unsigned);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
    CUresult (*MemHostUnregister)(void *);
} cu;
static int cuda_ready;          // context retained and current
static CUcontext cuda_primary;  // the device's primary context, once retained
static size_t vmm_granularity;  // of a POSIX-fd allocation on the device

static void cu_check(CUresult r, const char *call, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cu_check(CUresult r, const char *call, const char *fmt, ...) {
    if (r == 0) return;
    const char *name = NULL;
    if (cu.GetErrorName) cu.GetErrorName(r, &name);
    char context[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    fail("%s(%s) failed: %s (%d)", call, context, name ? name : "CUDA_ERROR_?", r);
}

static void cuda_bind(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) fail("libcuda.so.1 not found: no NVIDIA driver on this machine (%s); memfd regions without --register need none", dlerror());
    struct { void **slot; const char *name; } syms[] = {
        {(void **)&cu.Init, "cuInit"},
        {(void **)&cu.GetErrorName, "cuGetErrorName"},
        {(void **)&cu.DeviceGet, "cuDeviceGet"},
        {(void **)&cu.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
        {(void **)&cu.CtxSetCurrent, "cuCtxSetCurrent"},
        {(void **)&cu.MemGetAllocationGranularity, "cuMemGetAllocationGranularity"},
        {(void **)&cu.MemImportFromShareableHandle, "cuMemImportFromShareableHandle"},
        {(void **)&cu.MemRelease, "cuMemRelease"},
        {(void **)&cu.MemAddressReserve, "cuMemAddressReserve"},
        {(void **)&cu.MemAddressFree, "cuMemAddressFree"},
        {(void **)&cu.MemMap, "cuMemMap"},
        {(void **)&cu.MemUnmap, "cuMemUnmap"},
        {(void **)&cu.MemSetAccess, "cuMemSetAccess"},
        {(void **)&cu.MemHostRegister, "cuMemHostRegister_v2"},
        {(void **)&cu.MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"},
        {(void **)&cu.MemHostUnregister, "cuMemHostUnregister"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(lib, syms[i].name);
        if (!*syms[i].slot) fail("libcuda.so.1 lacks %s: driver too old?", syms[i].name);
    }
}

// dlopen, cuInit, the device's primary context made current, the VMM granularity: once per process.
// Returns the milliseconds it took.
static double cuda_context(int device) {
    if (cuda_ready) return 0;
    double t0 = now_ms();
    cuda_bind();
    cu_check(cu.Init(0), "cuInit", "0");
    CUdevice dev;
    cu_check(cu.DeviceGet(&dev, device), "cuDeviceGet", "%d", device);
    cu_check(cu.DevicePrimaryCtxRetain(&cuda_primary, dev), "cuDevicePrimaryCtxRetain", "GPU %d", device);
    cu_check(cu.CtxSetCurrent(cuda_primary), "cuCtxSetCurrent", "GPU %d", device);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    cu_check(cu.MemGetAllocationGranularity(&vmm_granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
             "cuMemGetAllocationGranularity", "GPU %d, POSIX fd, minimum", device);
    if (vmm_granularity == 0) fail("cuMemGetAllocationGranularity(GPU %d) gave 0", device);
    cuda_ready = 1;
    return now_ms() - t0;
}

// ---------------------------------------------------------------------------------------------- XXH64, engram digest v1

#define P1 11400714785074694791ull
#define P2 14029467366897019727ull
#define P3 1609587929392839161ull
#define P4 9650029242287828579ull
#define P5 2870177450012600261ull
static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }  // x86-64: little-endian
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire is little-endian, and so must this host be");
static uint64_t xround(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
static uint64_t xmerge(uint64_t acc, uint64_t v) { return (acc ^ xround(0, v)) * P1 + P4; }

static uint64_t xxh64(const uint8_t *p, size_t len) {
    const uint8_t *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = -P1;
        for (; p + 32 <= end; p += 32) {
            v1 = xround(v1, rd64(p)), v2 = xround(v2, rd64(p + 8));
            v3 = xround(v3, rd64(p + 16)), v4 = xround(v4, rd64(p + 24));
        }
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
        h = xmerge(xmerge(xmerge(xmerge(h, v1), v2), v3), v4);
    } else {
        h = P5;
    }
    h += len;
    for (; p + 8 <= end; p += 8) h = rotl(h ^ xround(0, rd64(p)), 27) * P1 + P4;
    if (p + 4 <= end) h = rotl(h ^ (uint64_t)rd32(p) * P1, 23) * P2 + P3, p += 4;
    for (; p < end; p++) h = rotl(h ^ *p * P5, 11) * P1;
    h ^= h >> 33, h *= P2, h ^= h >> 29, h *= P3, h ^= h >> 32;
    return h;
}

// XXH64 over the little-endian XXH64 of each 64 MiB chunk (docs/checkpoints.md).
static uint64_t engram_digest(const uint8_t *p, uint64_t len) {
    uint64_t chunks = (len + DIGEST_CHUNK - 1) / DIGEST_CHUNK;
    uint8_t *hashes = xcalloc(chunks, 8);
    for (uint64_t i = 0; i < chunks; i++) {
        uint64_t n = len - i * DIGEST_CHUNK < DIGEST_CHUNK ? len - i * DIGEST_CHUNK : DIGEST_CHUNK;
        uint64_t h = xxh64(p + i * DIGEST_CHUNK, n);
        for (int b = 0; b < 8; b++) hashes[i * 8 + b] = (uint8_t)(h >> (8 * b));
    }
    uint64_t d = xxh64(hashes, chunks * 8);
    free(hashes);
    return d;
}

// ---------------------------------------------------------------------------------------------- SHA-256, sha256-tree-v1

// SHA-256 (FIPS 180-4), plain C: the content digest's hash, with no library behind it. --self-test-sha256 checks it.
static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

struct sha256 { uint32_t h[8]; uint64_t bytes; uint8_t buf[64]; size_t n; };

static uint32_t ror32(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }

static void sha256_init(struct sha256 *s) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, H0, sizeof H0);
    s->bytes = 0, s->n = 0;
}

static void sha256_blocks(uint32_t h[8], const uint8_t *p, size_t blocks) {
    for (; blocks--; p += 64) {
        uint32_t w[64], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = k + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
            uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
    }
}

static void sha256_update(struct sha256 *s, const void *data, size_t len) {
    const uint8_t *p = data;
    s->bytes += len;
    if (s->n) {
        size_t take = 64 - s->n < len ? 64 - s->n : len;
        memcpy(s->buf + s->n, p, take);
        s->n += take, p += take, len -= take;
        if (s->n < 64) return;
        sha256_blocks(s->h, s->buf, 1);
        s->n = 0;
    }
    sha256_blocks(s->h, p, len / 64);
    memcpy(s->buf, p + len / 64 * 64, len % 64);
    s->n = len % 64;
}

static void sha256_final(struct sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->bytes * 8;
    uint8_t pad[72] = {0x80};
    size_t padlen = (s->n < 56 ? 56 : 120) - s->n;
    for (int i = 0; i < 8; i++) pad[padlen + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(s, pad, padlen + 8);
    for (int i = 0; i < 32; i++) out[i] = (uint8_t)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

static void hex32(const uint8_t d[32], char out[65]) {
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

// docs/checkpoints.md, "Content digest: sha256-tree-v1": leaf_i = SHA-256 of the i-th 16 MiB chunk, root = SHA-256
// of "engram-sha256-tree-v1" (21 bytes), u64le(total bytes), u64le(16777216) and the leaves in order. In hex.
#define TREE_CHUNK (16ull << 20)
static void tree_digest(const uint8_t *p, uint64_t len, char out[65]) {
    struct sha256 root, leaf;
    uint8_t sizes[16], d[32];
    for (int i = 0; i < 8; i++) sizes[i] = (uint8_t)(len >> (8 * i)), sizes[8 + i] = (uint8_t)(TREE_CHUNK >> (8 * i));
    sha256_init(&root);
    sha256_update(&root, "engram-sha256-tree-v1", 21);
    sha256_update(&root, sizes, 16);
    for (uint64_t off = 0; off < len; off += TREE_CHUNK) {
        sha256_init(&leaf);
        sha256_update(&leaf, p + off, len - off < TREE_CHUNK ? len - off : TREE_CHUNK);
        sha256_final(&leaf, d);
        sha256_update(&root, d, 32);
    }
    sha256_final(&root, d);
    hex32(d, out);
}

// --self-test-sha256: FIPS 180-4's vectors and docs/checkpoints.md's tree vectors; prints the rate; 0 when all pass.
static int self_test_sha256(void) {
    static const char *const PLAIN[][2] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"}};
    int failed = 0;
    char got[65];
    uint8_t d[32];
    struct sha256 s;
    for (size_t i = 0; i < sizeof PLAIN / sizeof PLAIN[0]; i++) {
        sha256_init(&s);
        sha256_update(&s, PLAIN[i][0], strlen(PLAIN[i][0]));
        sha256_final(&s, d);
        hex32(d, got);
        int ok = !strcmp(got, PLAIN[i][1]);
        failed += !ok;
        printf("sha256(\"%s\") = %s %s\n", PLAIN[i][0], got, ok ? "ok" : "MISMATCH");
    }
    uint64_t n = 40ull << 20;
    uint8_t *buf = xcalloc(n, 1);
    memset(buf, 'a', 1000000);
    sha256_init(&s);
    for (int i = 0; i < 1000; i++) sha256_update(&s, buf + i * 997 % 1000, 1000);  // in odd pieces: update's paths
    sha256_final(&s, d);
    hex32(d, got);
    int ok = !strcmp(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    failed += !ok;
    printf("sha256(1000000 x 'a', in pieces) = %s %s\n", got, ok ? "ok" : "MISMATCH");
    sha256_init(&s);
    sha256_update(&s, buf, 1000000);
    sha256_final(&s, d);
    hex32(d, got);
    ok = !strcmp(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    failed += !ok;
    printf("sha256(1000000 x 'a', one update) = %s %s\n", got, ok ? "ok" : "MISMATCH");
    for (uint64_t i = 0; i < n; i++) buf[i] = (uint8_t)((i * 131 + (i >> 16)) & 0xff);
    static const struct { const char *what; const uint8_t *p; uint64_t n; const char *hex; } TREE[] = {
        {"no bytes", (const uint8_t *)"", 0, "0c4278d99b29da1ade86fade7817d53950883f0f46c9863a0865f5fe56f47c13"},
        {"abc", (const uint8_t *)"abc", 3, "85c49fe9df25db81b88aee2da59492bbc1e83fe63cd65dbf42e05f6678fce185"},
        {"16 MiB pattern", NULL, 16ull << 20, "b2389fdc476ff72d0f3186cc3ebbbe376e5e1b122c9f13f8809ba5e106eee342"},
        {"40 MiB pattern", NULL, 40ull << 20, "feed4b9bb7e2dc88ae4b5d108ed1cf94881677e9f7a26ec32e976e102d300c95"}};
    double ms = 0;
    for (size_t i = 0; i < sizeof TREE / sizeof TREE[0]; i++) {
        double t0 = now_ms();
        tree_digest(TREE[i].p ? TREE[i].p : buf, TREE[i].n, got);
        if (!TREE[i].p) ms += now_ms() - t0;
        ok = !strcmp(got, TREE[i].hex);
        failed += !ok;
        printf("sha256-tree-v1(%s) = %s %s\n", TREE[i].what, got, ok ? "ok" : "MISMATCH");
    }
    free(buf);
    printf("self-test: %s; tree digest rate %.2f GB/s on 1 thread (56 MiB)\n", failed ? "FAILED" : "ok",
           (56ull << 20) / (ms > 0 ? ms : 1e-3) / 1e6);
    return failed ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------- messages

struct fds { int *v; size_t n, cap; };

static void fds_push(struct fds *f, int fd) {
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 256;
        f->v = realloc(f->v, f->cap * sizeof(int));
        if (!f->v) fail("out of memory for %zu fds", f->cap);
    }
    f->v[f->n++] = fd;
}

// Closes every fd still held; a slot of -1 was closed already (close_unselected) and is skipped.
static void fds_close(struct fds *f) {
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i] >= 0) close(f->v[i]);
    f->n = 0;
}

// deadline: now_ms() by which the whole message, its fillers and PARTs included, must have arrived.
struct message { uint8_t *payload; uint32_t length; struct fds fds; double deadline; };

// Fails after closing every fd received so far (the protocol's rule for a bad message).
static void fail_msg(struct message *m, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void fail_msg(struct message *m, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fds_close(&m->fds);
    fail("%s", text);
}

// Reads exactly len bytes, collecting the fds of every recvmsg into m->fds.
static void recv_exact(int s, uint8_t *buf, size_t len, struct message *m, const char *what) {
    size_t got = 0;
    while (got < len) {
        union { struct cmsghdr align; char buf[CMSG_SPACE(FDS_PER_SENDMSG * sizeof(int))]; } control;
        struct iovec iov = {buf + got, len - got};
        struct msghdr h;
        memset(&h, 0, sizeof h);
        h.msg_iov = &iov;
        h.msg_iovlen = 1;
        h.msg_control = control.buf;
        h.msg_controllen = sizeof control.buf;
        // SO_RCVTIMEO bounds one recvmsg; the deadline bounds the whole answer, so a daemon that sends a byte
        // just inside each wait cannot hold the client forever.
        double left = m->deadline - now_ms();
        struct pollfd p = {s, POLLIN, 0};
        int ready = left > 0 ? poll(&p, 1, (int)left + 1) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) fail_errno("poll", what);
        if (ready == 0)
            fail_msg(m, "no whole answer from the daemon within %d s while reading %s", REPLY_TIMEOUT_S, what);
        ssize_t r = recvmsg(s, &h, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            fail_msg(m, "no answer from the daemon within %d s while reading %s", REPLY_TIMEOUT_S, what);
        if (r < 0) {
            int e = errno;
            fds_close(&m->fds);
            errno = e;
            fail_errno("recvmsg", what);
        }
        int foreign = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < n; i++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                    fds_push(&m->fds, fd);
                }
            } else {
                foreign = 1;
            }
        }
        if (h.msg_flags & MSG_CTRUNC)
            fail_msg(m, "%s: ancillary data truncated (MSG_CTRUNC): file descriptors were lost", what);
        if (foreign) fail_msg(m, "%s: unexpected ancillary data (not SCM_RIGHTS)", what);
        if (m->fds.n > MAX_FDS) fail_msg(m, "%s: more than %u fds arrived", what, MAX_FDS);
        if (r == 0) fail_msg(m, "the daemon closed the connection while sending %s (%zu of %zu bytes read)", what, got, len);
        got += (size_t)r;
    }
}

// Appends exactly len payload bytes to m->payload (grown as needed), collecting fds into m->fds.
static void recv_payload(int s, struct message *m, size_t *cap, uint32_t len, const char *what) {
    if ((size_t)m->length + len > *cap) {
        size_t want = (size_t)m->length + len, grown = *cap * 2;
        if (grown > (size_t)MAX_LOGICAL + MAX_PAYLOAD_V2) grown = (size_t)MAX_LOGICAL + MAX_PAYLOAD_V2;  // parts' bound
        *cap = grown > want ? grown : want;
        uint8_t *p = realloc(m->payload, *cap);
        if (!p) fail_msg(m, "%s: out of memory for %zu bytes", what, *cap);
        m->payload = p;
    }
    recv_exact(s, m->payload + m->length, len, m, what);
    m->length += len;
}

// After a payload: 0xFD fillers until count fds have arrived (at most ceil((count - 253) / 253) fillers, each
// bringing at least one fd).
static void recv_fillers(int s, struct message *m, uint32_t count, const char *what) {
    uint32_t fillers = count > FDS_PER_SENDMSG ? (count - FDS_PER_SENDMSG + FDS_PER_SENDMSG - 1) / FDS_PER_SENDMSG : 0;
    for (uint32_t i = 0; m->fds.n < count; i++) {
        if (i == fillers)
            fail_msg(m, "%s: fd_count is %u but only %zu fds arrived with the header and %u fillers", what, count,
                     m->fds.n, fillers);
        uint8_t filler;
        size_t before = m->fds.n;
        recv_exact(s, &filler, 1, m, what);
        if (filler != FILLER) fail_msg(m, "%s: filler %u is 0x%02X, not 0xFD", what, i + 1, filler);
        if (m->fds.n == before) fail_msg(m, "%s: filler %u carried no fds (%zu of %u so far)", what, i + 1, m->fds.n, count);
    }
    if (m->fds.n != count) fail_msg(m, "%s: fd_count is %u but %zu fds arrived", what, count, m->fds.n);
}

// One message: header, payload (at most limit bytes, and at least a frame header), then its fds.
static void recv_message(int s, struct message *m, const char *what, uint32_t limit) {
    memset(m, 0, sizeof *m);
    m->deadline = now_ms() + REPLY_TIMEOUT_S * 1000.0;
    uint8_t header[8];
    recv_exact(s, header, 8, m, what);
    uint32_t length = rd32(header), count = rd32(header + 4);
    if (length > limit) fail_msg(m, "%s: payload_length %u exceeds the limit of %u", what, length, limit);
    if (count > MAX_FDS) fail_msg(m, "%s: fd_count %u exceeds the limit of %u", what, count, MAX_FDS);
    if (length < 8) fail_msg(m, "%s: payload_length %u is shorter than a frame header (8 bytes)", what, length);
    size_t cap = 0;
    recv_payload(s, m, &cap, length, what);
    recv_fillers(s, m, count, what);
}

static void message_free(struct message *m) {
    fds_close(&m->fds);
    free(m->fds.v);
    free(m->payload);
    memset(m, 0, sizeof *m);
}

// Returns 0, or -1 when the daemon had already closed the connection and closed_ok is set.
static int send_all(int s, const uint8_t *p, size_t len, const char *what, int closed_ok) {
    while (len > 0) {
        ssize_t r = send(s, p, len, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && closed_ok && (errno == EPIPE || errno == ECONNRESET)) return -1;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            fail("sending %s: the daemon read nothing for %d s", what, REPLY_TIMEOUT_S);
        if (r < 0) fail_errno("send", what);
        p += r, len -= (size_t)r;
    }
    return 0;
}

// A message with no fds: 8-byte message header, 8-byte frame header (encoded in version), body.
static int send_frame(int s, uint16_t version, int type, const uint8_t *body, size_t body_len, int closed_ok) {
    uint8_t buf[64];
    uint32_t payload = (uint32_t)(8 + body_len), magic = MAGIC, zero = 0;
    uint16_t t = (uint16_t)type;
    if (16 + body_len > sizeof buf) fail("internal: frame too large");
    memcpy(buf, &payload, 4), memcpy(buf + 4, &zero, 4);       // x86-64 stores little-endian
    memcpy(buf + 8, &magic, 4), memcpy(buf + 12, &version, 2), memcpy(buf + 14, &t, 2);
    if (body_len) memcpy(buf + 16, body, body_len);
    return send_all(s, buf, 16 + body_len, TYPE_NAMES[type], closed_ok);
}

// ---------------------------------------------------------------------------------------------- frame reading

struct reader { const uint8_t *p; size_t len, pos; const char *frame; };

static void rfail(const struct reader *r, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void rfail(const struct reader *r, const char *fmt, ...) {
    char text[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fail("%s at byte %zu: %s", r->frame, r->pos, text);
}

static const uint8_t *take(struct reader *r, size_t n, const char *field) {
    if (r->len - r->pos < n) rfail(r, "truncated: %s needs %zu bytes, %zu left", field, n, r->len - r->pos);
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}
static uint8_t u8(struct reader *r, const char *f) { return *take(r, 1, f); }
static uint16_t u16(struct reader *r, const char *f) { const uint8_t *p = take(r, 2, f); return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32(struct reader *r, const char *f) { return rd32(take(r, 4, f)); }
static int32_t i32(struct reader *r, const char *f) { return (int32_t)u32(r, f); }
static uint64_t u64(struct reader *r, const char *f) { return rd64(take(r, 8, f)); }

static int utf8_valid(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 9;
        if (k == 9 || n - i - 1 < k) return 0;
        uint32_t cp = k == 0 ? c : k == 1 ? c & 0x1F : k == 2 ? c & 0x0F : c & 0x07;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        static const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

struct str { const char *p; uint32_t n; };

static struct str str_n(struct reader *r, uint32_t n, const char *field) {
    struct str s = {(const char *)take(r, n, field), n};
    if (!utf8_valid((const uint8_t *)s.p, n)) rfail(r, "%s is not valid UTF-8", field);
    return s;
}
static struct str str16(struct reader *r, const char *field) {
    uint16_t n = u16(r, field);
    if (n > MAX_STR16) rfail(r, "%s is %u bytes long, more than %u", field, n, MAX_STR16);
    return str_n(r, n, field);
}
// An ERROR's message or detail: a str32 of at most 4096 bytes.
static struct str text32(struct reader *r, const char *field) {
    uint32_t n = u32(r, field);
    if (n > MAX_TEXT) rfail(r, "%s is %u bytes long, more than %u", field, n, MAX_TEXT);
    return str_n(r, n, field);
}

static void end_frame(const struct reader *r) {
    if (r->pos != r->len) rfail(r, "%zu trailing bytes after the frame", r->len - r->pos);
}

// The bytes of the character at s.p[i] when it is a control character (C0, DEL, C1) or U+2028 / U+2029, else 0.
// s is valid UTF-8.
static uint32_t unsafe_at(struct str s, uint32_t i) {
    const unsigned char *p = (const unsigned char *)s.p;
    if (p[i] < 0x20 || p[i] == 0x7f) return 1;
    if (p[i] == 0xc2 && i + 1 < s.n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f) return 2;
    if (p[i] == 0xe2 && i + 2 < s.n && p[i + 1] == 0x80 && (p[i + 2] == 0xa8 || p[i + 2] == 0xa9)) return 3;
    return 0;
}

// Whether s holds a character unsafe_at finds.
static int unsafe_text(struct str s) {
    for (uint32_t i = 0; i < s.n; i++)
        if (unsafe_at(s, i)) return 1;
    return 0;
}

// A daemon's words on one line: each character unsafe_at finds becomes '?', so no daemon starts a line of its own
// or reaches the terminal.
static void print_sanitized(FILE *out, struct str s) {
    for (uint32_t i = 0; i < s.n; i++) {
        uint32_t k = unsafe_at(s, i);
        fputc(k ? '?' : s.p[i], out);
        if (k) i += k - 1;
    }
}

// Fails with the daemon's ERROR, saying `when` it came ("" or e.g. " before WELCOME"); returns its code only for
// NOT_READY (3) and STOPPING (6) when the caller may retry. Codes this client does not know are shown with their
// message, like the others.
static int error_frame(struct reader *r, int retry_allowed, const char *when) {
    uint16_t code = u16(r, "code");
    uint8_t retryable = u8(r, "retryable");
    struct str message = text32(r, "message");
    uint32_t details = u32(r, "detail_count");
    if (details > MAX_DETAILS) rfail(r, "detail_count %u exceeds the limit of %u", details, MAX_DETAILS);
    size_t details_at = r->pos;
    for (uint32_t i = 0; i < details; i++) text32(r, "detail");
    uint32_t fp = u32(r, "daemon_fingerprint length");
    if (fp > MAX_BLOB) rfail(r, "daemon_fingerprint is %u bytes long, more than %u", fp, MAX_BLOB);
    take(r, fp, "daemon_fingerprint");
    end_frame(r);
    if (retryable > 1) rfail(r, "retryable is %u, not 0 or 1", retryable);
    if ((code == 3 || code == 6) && retry_allowed) return code;
    if (code > 0 && code < ERROR_CODES)
        fprintf(stderr, "engram-attach: the daemon answered%s: ERROR %s (%u%s): ", when, ERROR_NAMES[code], code,
                retryable ? ", retryable" : "");
    else
        fprintf(stderr, "engram-attach: the daemon answered%s: ERROR %u (a code unknown to this client%s): ", when, code,
                retryable ? ", retryable" : "");
    print_sanitized(stderr, message);
    fputc('\n', stderr);
    r->pos = details_at;
    for (uint32_t i = 0; i < details; i++) {
        fputs("  ", stderr);
        print_sanitized(stderr, text32(r, "detail"));
        fputc('\n', stderr);
    }
    exit(1);
}

// A connection to the daemon: version is 0 until WELCOME has chosen one.
struct conn { int s; uint16_t version; uint32_t peer_uid; int32_t peer_pid; };

static const char *type_name(uint16_t type) { return type <= T_PART ? TYPE_NAMES[type] : "an unknown type"; }

// Version 2, "Parts": appends the bodies of the PARTs that follow a continued frame to m (whose payload holds the
// frame header and the first piece) until the PART without the continued bit. The total is bounded at 1 GiB.
static void recv_parts(const struct conn *c, struct message *m, uint16_t version, const char *what) {
    size_t cap = m->length;
    char label[64];
    for (uint32_t part = 1;; part++) {
        snprintf(label, sizeof label, "%s, PART %u", what, part);
        uint8_t header[8];
        size_t fds_before = m->fds.n;
        recv_exact(c->s, header, 8, m, label);
        uint32_t length = rd32(header), count = rd32(header + 4);
        if (length > MAX_PAYLOAD_V2) fail_msg(m, "%s: payload_length %u exceeds the limit of %u", label, length, MAX_PAYLOAD_V2);
        if (length <= 8)
            fail_msg(m, "%s: payload_length %u leaves no body after the frame header (a PART carries 1 to %u bytes)",
                     label, length, MAX_PIECE);
        if (count != 0)
            fail_msg(m, "%s: fd_count is %u, but a frame's fds all ride on its first message and PARTs carry none",
                     label, count);
        if ((uint64_t)m->length + (length - 8) > MAX_LOGICAL)
            fail_msg(m, "%s: the frame grows past %u bytes (1 GiB), the most a daemon sends in parts", label, MAX_LOGICAL);
        uint32_t start = m->length;
        recv_payload(c->s, m, &cap, length, label);
        if (m->fds.n != fds_before)
            fail_msg(m, "%s: %zu fds arrived with it, but a frame's fds all ride on its first message", label,
                     m->fds.n - fds_before);
        const uint8_t *h = m->payload + start;
        uint32_t magic = rd32(h);
        uint16_t v = rd16(h + 4), type = rd16(h + 6);
        if (magic != MAGIC) fail_msg(m, "%s: bad magic 0x%08X (expected 0x%08X, \"EGRM\")", label, magic, MAGIC);
        if (v != version)
            fail_msg(m, "%s: the frame header's version is %u, but version %u was chosen", label, v, version);
        if ((type & ~CONTINUED) != T_PART)
            fail_msg(m, "%s: type 0x%04X (%s) where a PART (11) was due: the frame before it was continued", label, type,
                     type_name(type & ~CONTINUED));
        memmove(m->payload + start, h + 8, length - 8);
        m->length = start + length - 8;
        if (!(type & CONTINUED)) return;
    }
}

// One frame from the daemon: a message and its frame header checked (magic; version: the chosen one, or before
// WELCOME 1 or 2, stored in *version for the caller to judge), then in version 2 the PARTs of a continued frame
// appended. m->payload is then the 8-byte frame header (type without the continued bit) and the whole body.
// Returns the type.
static uint16_t recv_frame(const struct conn *c, struct message *m, const char *what, uint16_t *version_out) {
    recv_message(c->s, m, what, c->version == 2 ? MAX_PAYLOAD_V2 : c->version == 1 ? MAX_PAYLOAD_V1 : MAX_PAYLOAD_PRE);
    uint32_t magic = rd32(m->payload);
    uint16_t version = rd16(m->payload + 4), type = rd16(m->payload + 6);
    if (magic != MAGIC) fail_msg(m, "%s at byte 0: bad magic 0x%08X (expected 0x%08X, \"EGRM\")", what, magic, MAGIC);
    if (c->version && version != c->version)
        fail_msg(m, "%s at byte 4: the frame header's version is %u, but version %u was chosen at WELCOME and every "
                    "later frame must carry it", what, version, c->version);
    if (!c->version && (version < VERSION_MIN || version > VERSION_MAX))
        fail_msg(m, "%s at byte 4: the frame header's version is %u; this client speaks %d to %d", what, version,
                 VERSION_MIN, VERSION_MAX);
    if (version >= 2 && (type & CONTINUED) && (type & ~CONTINUED) != T_PART) {
        type &= (uint16_t)~CONTINUED;
        if (m->length - 8 > MAX_PIECE) fail_msg(m, "%s: the first piece of a continued frame is over %u bytes", what, MAX_PIECE);
        memcpy(m->payload + 6, &type, 2);
        recv_parts(c, m, version, type_name(type));
    }
    if ((type & ~CONTINUED) == T_PART) {
        if (version >= 2) fail_msg(m, "%s: a PART (type 0x%04X) arrived without a continued frame before it", what, type);
        fail_msg(m, "%s: a PART (11) in a version-1 frame; PARTs exist only in version 2", what);
    }
    if (type != T_MANIFEST && m->fds.n > 0)
        fail_msg(m, "a frame of type %u (%s) carried %zu fds; only MANIFEST may", type, type_name(type), m->fds.n);
    if (version_out) *version_out = version;
    return type;
}

// Reads the next frame into m and r (r at its body), expecting `expected`: returns 0 once it came. An ERROR fails,
// or returns its code for a NOT_READY (3) or STOPPING (6) when retry_allowed; any other type fails.
static int open_frame(const struct conn *c, struct message *m, struct reader *r, int expected, int retry_allowed) {
    uint16_t type = recv_frame(c, m, TYPE_NAMES[expected], NULL);
    r->p = m->payload, r->len = m->length, r->pos = 8, r->frame = TYPE_NAMES[expected];
    if (type == T_ERROR) {
        r->frame = "ERROR";
        return error_frame(r, retry_allowed, "");
    }
    if (type != expected)
        fail_msg(m, "expected %s (%d), got %s (%u)", TYPE_NAMES[expected], expected, type_name(type), type);
    return 0;
}

// ---------------------------------------------------------------------------------------------- the manifest

struct region {
    uint8_t kind;
    uint64_t size;
    int32_t numa, device;
    int fd;                            // the message's (m->fds owns it); -1 once closed unattached (--table)
    int skip;                          // --table: it holds none of the named tables; not attached
    const uint8_t *host;               // CPU-readable view (mmap, or the CUDA VA with a CPU view), else NULL
    CUmemGenericAllocationHandle handle;
    int imported, mapped;
    uint64_t va_offset;
    size_t chunks;                     // registered chunks
};

struct table {
    struct str name, dtype;
    uint64_t bytes, offset, digest;
    int32_t region;
    int skip;                          // --table: not named; not verified, not content-checked
};

struct manifest {
    uint8_t sha256[32];
    uint32_t regions_n, tables_n;
    struct region *regions;
    struct table *tables;
    uint64_t region_bytes, table_bytes, vmm_bytes, memfd_bytes;
    int vmm_regions;
    // What is attached: every region and table, or with --table those of the named tables (select_tables).
    uint32_t att_regions, att_vmm_regions, att_tables;
    uint64_t att_bytes, att_vmm_bytes, att_table_bytes;
    uint64_t va_bytes;                 // the VA range reserved for the attached cuda-vmm regions (attach_vmm)
    // The regions laid back to back, for runs (parse_manifest): where region i ends, and the first region after i
    // whose kind, numa_node or device differs from its own (regions_n when none). A run's end is found by bisection.
    uint64_t *ends;
    uint32_t *other;
    uint32_t *gaps;  // table_host's, made at its first table over a run
};

// The last region that `bytes` from `offset` in `region` reach, the regions laid back to back (mf->ends); when they run
// past the last region, that region, and *short_by says how many bytes no region holds (else 0). offset is at most
// the region's size, and the region sizes' sum fits 64 bits (both checked first).
static uint32_t run_end(const struct manifest *mf, uint32_t region, uint64_t offset, uint64_t bytes, uint64_t *short_by) {
    uint64_t start = (region ? mf->ends[region - 1] : 0) + offset, total = mf->ends[mf->regions_n - 1];
    *short_by = bytes > total - start ? bytes - (total - start) : 0;
    if (*short_by) return mf->regions_n - 1;
    uint64_t end = start + bytes;
    uint32_t lo = region, hi = mf->regions_n - 1;
    while (lo < hi) {  // the first region whose end is at or past the table's
        uint32_t mid = lo + (hi - lo) / 2;
        if (mf->ends[mid] >= end) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

static const struct { const char *name; unsigned bits; } DTYPES[] = {
    {"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8}, {"I8", 8}, {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32}, {"F32", 32},
    {"C64", 64}, {"F64", 64}, {"I64", 64}, {"U64", 64}};

static unsigned dtype_bits(struct str d) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strlen(DTYPES[i].name) == d.n && !memcmp(DTYPES[i].name, d.p, d.n)) return DTYPES[i].bits;
    return 0;
}

static void seal_names(char *out, size_t cap, int seals) {
    static const struct { int bit; const char *name; } NAMES[] = {
        {F_SEAL_SEAL, "SEAL"}, {F_SEAL_SHRINK, "SHRINK"}, {F_SEAL_GROW, "GROW"}, {F_SEAL_WRITE, "WRITE"},
        {F_SEAL_FUTURE_WRITE, "FUTURE_WRITE"}};
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (seals & NAMES[i].bit) n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "|" : "", NAMES[i].name);
    if (!n) snprintf(out, cap, "none");
}

// docs/protocol.md, "How to map a region": before a memfd region is mapped its seals must make its bytes
// immutable (SEAL, SHRINK, GROW and WRITE) and it must hold at least the manifest's size. FUTURE_WRITE is not enough
// (it leaves writable a mapping made before it), unless --accept-future-write-seal (a daemon of an older build).
// An fd that is no memfd (F_GET_SEALS fails, EINVAL) is refused too.
static int accept_future_write_seal;

static int name_order(const void *a, const void *b) {
    const struct str *x = *(const struct str *const *)a, *y = *(const struct str *const *)b;
    int c = memcmp(x->p, y->p, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

// A name names one table: a manifest that lists one twice is refused (sorted, so 65,536 names cost no more than a
// sort).
static void check_names_unique(struct reader *r, const struct manifest *mf) {
    if (mf->tables_n < 2) return;
    const struct str **names = xcalloc(mf->tables_n, sizeof *names);
    for (uint32_t i = 0; i < mf->tables_n; i++) names[i] = &mf->tables[i].name;
    qsort(names, mf->tables_n, sizeof *names, name_order);
    for (uint32_t i = 1; i < mf->tables_n; i++)
        if (!name_order(&names[i - 1], &names[i]))
            rfail(r, "table '%.*s' is listed twice; a name names one table", (int)names[i]->n, names[i]->p);
    free(names);
}

static void check_memfd(struct message *m, uint32_t i, const struct region *g) {
    int seals = fcntl(g->fd, F_GET_SEALS);
    if (seals < 0) {
        int e = errno;
        const char *name = strerrorname_np(e);
        fail_msg(m, "region %u (%s, fd %d): fcntl(F_GET_SEALS) failed: %s (%s): the fd is no sealed memfd, so its "
                    "bytes could change under this client; refused", i, KIND_NAMES[g->kind], g->fd, name ? name : "E?",
                 strerror(e));
    }
    char missing[160] = "";
    size_t n = 0;
    int write_bits = accept_future_write_seal ? F_SEAL_WRITE | F_SEAL_FUTURE_WRITE : F_SEAL_WRITE;
    const char *write_name = accept_future_write_seal ? "WRITE or FUTURE_WRITE"
                             : (seals & F_SEAL_FUTURE_WRITE) ? "WRITE (FUTURE_WRITE leaves writable a mapping made before it)"
                                                             : "WRITE";
    const struct { int bits; const char *name; } NEED[] = {
        {F_SEAL_SEAL, "SEAL"}, {F_SEAL_SHRINK, "SHRINK"}, {F_SEAL_GROW, "GROW"}, {write_bits, write_name}};
    for (size_t k = 0; k < sizeof NEED / sizeof NEED[0]; k++)
        if (!(seals & NEED[k].bits)) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%s", n ? ", " : "", NEED[k].name);
    if (n) {
        char have[64];
        seal_names(have, sizeof have, seals);
        fail_msg(m, "region %u (%s, fd %d): its seals are %s (0x%x) and lack %s, so its bytes could change under "
                    "this client; refused", i, KIND_NAMES[g->kind], g->fd, have, (unsigned)seals, missing);
    }
    struct stat st;
    if (fstat(g->fd, &st) != 0) fail_errno("fstat", "region fd");
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < g->size)
        fail_msg(m, "region %u: the manifest says a %s of %llu bytes but fd %d is %s of %lld bytes", i,
                 KIND_NAMES[g->kind], (unsigned long long)g->size, g->fd, S_ISREG(st.st_mode) ? "a file" : "not a file",
                 (long long)st.st_size);
}

static void parse_manifest(struct message *m, struct reader *r, struct manifest *mf) {
    memset(mf, 0, sizeof *mf);
    memcpy(mf->sha256, take(r, 32, "fingerprint_sha256"), 32);
    uint32_t fp = u32(r, "fingerprint length");
    if (fp > MAX_BLOB) rfail(r, "fingerprint is %u bytes long, more than %u", fp, MAX_BLOB);
    const uint8_t *fingerprint = take(r, fp, "fingerprint");
    struct sha256 h;
    uint8_t sha[32];
    sha256_init(&h);
    sha256_update(&h, fingerprint, fp);
    sha256_final(&h, sha);
    if (memcmp(sha, mf->sha256, 32)) rfail(r, "fingerprint_sha256 is not the SHA-256 of the fingerprint it carries");
    mf->regions_n = u32(r, "region_count");
    if (mf->regions_n > MAX_REGIONS) rfail(r, "region_count %u exceeds the limit of %u", mf->regions_n, MAX_REGIONS);
    if (mf->regions_n != m->fds.n)
        fail_msg(m, "MANIFEST lists %u regions but the message carried %zu fds", mf->regions_n, m->fds.n);
    mf->regions = xcalloc(mf->regions_n, sizeof *mf->regions);
    long page = sysconf(_SC_PAGESIZE);
    for (uint32_t i = 0; i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        g->kind = u8(r, "region kind");
        g->size = u64(r, "region size");
        g->numa = i32(r, "region numa_node");
        g->device = i32(r, "region device");
        g->fd = m->fds.v[i];
        if (g->kind > K_VMM_DEVICE) rfail(r, "region %u: kind %u is not 0..3", i, g->kind);
        if (g->size == 0) rfail(r, "region %u: size is 0", i);
        if (g->kind <= K_MEMFD_HUGETLB && g->size % (uint64_t)page)
            rfail(r, "region %u: %s size %llu is not a whole number of %ld-byte pages", i, KIND_NAMES[g->kind],
                  (unsigned long long)g->size, page);
        if (g->numa < -1) rfail(r, "region %u: numa_node %d is below -1", i, g->numa);
        if (g->kind == K_VMM_DEVICE ? g->device < 0 : g->device != -1)
            rfail(r, "region %u: device %d for kind %u (%s): a GPU ordinal only for kind 3, else -1", i, g->device,
                  g->kind, KIND_NAMES[g->kind]);
        if (mf->region_bytes + g->size < mf->region_bytes) rfail(r, "region sizes overflow 64 bits");
        mf->region_bytes += g->size;
        if (g->kind >= K_VMM_HOST) mf->vmm_bytes += g->size, mf->vmm_regions++;
        else mf->memfd_bytes += g->size;
    }
    mf->ends = xcalloc(mf->regions_n + 1, sizeof *mf->ends);
    mf->other = xcalloc(mf->regions_n + 1, sizeof *mf->other);
    for (uint32_t i = 0; i < mf->regions_n; i++) mf->ends[i] = (i ? mf->ends[i - 1] : 0) + mf->regions[i].size;
    for (uint32_t i = mf->regions_n; i-- > 0;) {
        const struct region *a = &mf->regions[i], *b = i + 1 < mf->regions_n ? &mf->regions[i + 1] : NULL;
        mf->other[i] = !b ? mf->regions_n
                     : a->kind != b->kind || a->numa != b->numa || a->device != b->device ? i + 1 : mf->other[i + 1];
    }
    mf->tables_n = u32(r, "table_count");
    if (mf->tables_n > MAX_TABLES) rfail(r, "table_count %u exceeds the limit of %u", mf->tables_n, MAX_TABLES);
    if (mf->tables_n > (r->len - r->pos) / 42)  // a table takes at least 42 bytes
        rfail(r, "%u tables cannot fit in the %zu bytes left", mf->tables_n, r->len - r->pos);
    mf->tables = xcalloc(mf->tables_n, sizeof *mf->tables);
    for (uint32_t i = 0; i < mf->tables_n; i++) {
        struct table *t = &mf->tables[i];
        t->name = str16(r, "table name");
        if (unsafe_text(t->name)) rfail(r, "table %u: its name holds a control character or a line separator", i);
        int nl = (int)t->name.n;
        t->dtype = str16(r, "dtype");
        if (unsafe_text(t->dtype)) rfail(r, "table '%.*s': its dtype holds a control character", nl, t->name.p);
        unsigned bits = dtype_bits(t->dtype);
        if (!bits) rfail(r, "table '%.*s': unknown dtype '%.*s'", nl, t->name.p, (int)t->dtype.n, t->dtype.p);
        uint8_t rank = u8(r, "rank");
        if (rank > MAX_RANK) rfail(r, "table '%.*s': rank %u exceeds %u", nl, t->name.p, rank, MAX_RANK);
        unsigned __int128 numel = 1;
        for (unsigned d = 0; d < rank; d++) {
            int64_t dim = (int64_t)u64(r, "shape");
            if (dim < 0) rfail(r, "table '%.*s': dimension %u is negative (%lld)", nl, t->name.p, d, (long long)dim);
            numel *= (uint64_t)dim;
            if (numel >> 63) rfail(r, "table '%.*s': the element count overflows 2^63", nl, t->name.p);
        }
        t->bytes = u64(r, "bytes");
        t->region = i32(r, "region");
        t->offset = u64(r, "offset");
        t->digest = u64(r, "digest");
        uint8_t kind = u8(r, "kind");
        int32_t numa = i32(r, "numa_node"), device = i32(r, "device");
        if ((numel * bits) % 8) rfail(r, "table '%.*s': %.*s with %llu elements is not a whole number of bytes", nl,
                                      t->name.p, (int)t->dtype.n, t->dtype.p, (unsigned long long)numel);
        if (numel * bits / 8 != t->bytes)
            rfail(r, "table '%.*s': bytes is %llu but %.*s x shape needs %llu", nl, t->name.p,
                  (unsigned long long)t->bytes, (int)t->dtype.n, t->dtype.p, (unsigned long long)(numel * bits / 8));
        if (t->region == -1) {
            if (t->bytes) rfail(r, "table '%.*s': region -1 but %llu bytes", nl, t->name.p, (unsigned long long)t->bytes);
            continue;
        }
        if (t->region < 0 || (uint32_t)t->region >= mf->regions_n)
            rfail(r, "table '%.*s': region %d is not -1 or 0..%u", nl, t->name.p, t->region, mf->regions_n - 1);
        const struct region *g = &mf->regions[t->region];
        if (t->offset > g->size || t->bytes > g->size - t->offset) {  // past its region's end: a run, or refused
            int next = (uint32_t)t->region + 1 < mf->regions_n;
            if (t->offset >= g->size || (kind != K_VMM_HOST && !next))
                rfail(r, "table '%.*s': [%llu, %llu + %llu) is outside region %d of %llu bytes", nl, t->name.p,
                      (unsigned long long)t->offset, (unsigned long long)t->offset, (unsigned long long)t->bytes,
                      t->region, (unsigned long long)g->size);
            if (kind != K_VMM_HOST)
                rfail(r, "table '%.*s': [%llu, %llu + %llu) is outside region %d of %llu bytes: a table of kind %u (%s) "
                         "lies in one region; only a cuda-vmm host table (kind 2) runs on into the regions after it",
                      nl, t->name.p, (unsigned long long)t->offset, (unsigned long long)t->offset,
                      (unsigned long long)t->bytes, t->region, (unsigned long long)g->size, kind,
                      kind <= K_VMM_DEVICE ? KIND_NAMES[kind] : "not a kind");
            // docs/protocol.md, "A table over several regions": the regions after it, as many as its remaining bytes
            // need, exist and have kind 2 and the table's numa_node and device (region `region` is checked below).
            // Found by bisection (run_end), not a walk: a lying peer's million tables over 65536 regions cost no more
            // than their count.
            uint64_t short_by;
            uint32_t last = run_end(mf, (uint32_t)t->region, t->offset, t->bytes, &short_by);
            uint32_t j = mf->other[t->region];
            if (j < mf->regions_n && (short_by || j <= last)) {
                const struct region *h = &mf->regions[j];
                if (h->kind != K_VMM_HOST)
                    rfail(r, "table '%.*s': its run from region %d goes on into region %u, which is kind %u (%s), not 2 "
                             "(cuda-vmm host): a table runs on only into cuda-vmm host regions", nl, t->name.p,
                          t->region, j, h->kind, KIND_NAMES[h->kind]);
                rfail(r, "table '%.*s': kind/numa_node/device %u/%d/%d differ from region %u's %u/%d/%d, which its "
                         "run from region %d goes on into", nl, t->name.p, kind, numa, device, j, h->kind, h->numa,
                      h->device, t->region);
            }
            if (short_by)
                rfail(r, "table '%.*s': [%llu, %llu + %llu) runs on from region %d past the last region, %u: the "
                         "run of regions %d..%u holds %llu of its bytes, %llu short", nl, t->name.p,
                      (unsigned long long)t->offset, (unsigned long long)t->offset, (unsigned long long)t->bytes,
                      t->region, mf->regions_n - 1, t->region, mf->regions_n - 1,
                      (unsigned long long)(t->bytes - short_by), (unsigned long long)short_by);
        }
        if (kind != g->kind || numa != g->numa || device != g->device)
            rfail(r, "table '%.*s': kind/numa_node/device %u/%d/%d differ from its region %d's %u/%d/%d", nl, t->name.p,
                  kind, numa, device, t->region, g->kind, g->numa, g->device);
        mf->table_bytes += t->bytes;
    }
    end_frame(r);
    check_names_unique(r, mf);
    for (uint32_t i = 0; i < mf->regions_n; i++)
        if (mf->regions[i].kind <= K_MEMFD_HUGETLB) check_memfd(m, i, &mf->regions[i]);
}

// The last region of a checked table's place (parse_manifest): its region, or for a kind 2 table over a run of
// regions the last of the run. Not for an empty table (region -1).
static uint32_t run_last(const struct manifest *mf, const struct table *t) {
    uint64_t short_by;
    return run_end(mf, (uint32_t)t->region, t->offset, t->bytes, &short_by);
}

// The CPU address of a table's first byte, or NULL when it is not CPU-readable (a cuda-vmm region without
// --cpu-view, a device region). A table over a run of regions is one range from its first region's view + offset:
// attach_vmm maps the attached cuda-vmm regions back to back in region order, and select_tables attaches every
// region of a selected table's run; that each region of the run follows the one before is checked here all the same.
static const uint8_t *table_host(struct manifest *mf, const struct table *t) {
    if (t->region < 0) return (const uint8_t *)"";
    const struct region *g = &mf->regions[t->region];
    if (!g->host) return NULL;
    uint32_t last = run_last(mf, t);
    if (last == (uint32_t)t->region) return g->host + t->offset;
    if (!mf->gaps) {  // once: gaps[j] counts the regions up to j whose view does not follow the one before's
        mf->gaps = xcalloc(mf->regions_n, sizeof *mf->gaps);
        for (uint32_t j = 1; j < mf->regions_n; j++)
            mf->gaps[j] = mf->gaps[j - 1] + (!mf->regions[j].host || !mf->regions[j - 1].host
                                             || mf->regions[j].host != mf->regions[j - 1].host + mf->regions[j - 1].size);
    }
    if (mf->gaps[last] != mf->gaps[t->region])  // checked in O(1) a table, whatever the runs' lengths
        fail("table '%.*s': the regions %d..%u of its run are not mapped back to back", (int)t->name.n, t->name.p,
             t->region, last);
    return g->host + t->offset;
}

// ---------------------------------------------------------------------------------------------- the digest sidecar

// docs/checkpoints.md, "The sidecar" and "The digest record, version 2", read as strictly as the Java
// DigestSidecar.readRecord: one JSON object (no key twice) of exactly the fields of its version,
//   version 1: format "engram-content-digests", version 1, algorithm "sha256-tree-v1", chunk_bytes 16777216 and
//              tables (name -> its sha256-tree-v1, 64 lower-case hex digits);
//   version 2: format, version 2, chunk_bytes and tables (name -> an object of exactly "engram-digest-v1", 16
//              lower-case hex digits, and "sha256-tree-v1", 64),
// every table name non-empty and unique. Anything else fails in one line: the file, the field and the problem in
// the Java reader's words, then what to do (write the record again, naming the checkpoint it lies beside).
#define SIDECAR_MAX (256ull << 20)
#define ENGRAM_KEY "engram-digest-v1"
#define TREE_KEY "sha256-tree-v1"
struct trusted { char *name; size_t n; char hex[65]; uint64_t engram; };  // engram: version 2 only
struct sidecar {
    const char *path; int version; struct trusted *v; size_t n;
    char *fix;                        // "write it again with engram-host inspect --write-digests CHECKPOINT"
};
struct json { const char *path, *fix; const uint8_t *p; size_t len, pos; };

static void jfail(const struct json *j, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void jfail(const struct json *j, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fail("%s: not a digest sidecar: JSON at byte %zu: %s; %s", j->path, j->pos, text, j->fix);
}

// A well-formed record that is not one this build reads: "PATH: PROBLEM; write it again with ...".
static void record_fail(const struct json *j, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void record_fail(const struct json *j, const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fail("%s: %s; %s", j->path, text, j->fix);
}

// The checkpoint a record lies beside (docs/checkpoints.md, "The sidecar"): <directory>/engram-digests.json is the
// directory's, <file>.engram-digests.json the file's; any other name, CHECKPOINT.
static char *record_fix(const char *path) {
    static const char DIR_FILE[] = "engram-digests.json", SUFFIX[] = ".engram-digests.json";
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(path), d = (size_t)(base - path);
    const char *ck = "CHECKPOINT";
    size_t ck_n = strlen(ck);
    if (!strcmp(base, DIR_FILE)) {
        while (d > 1 && path[d - 1] == '/') d--;
        ck = d ? path : ".", ck_n = d ? d : 1;
    } else if (strlen(base) > strlen(SUFFIX) && !strcmp(path + n - strlen(SUFFIX), SUFFIX)) {
        ck = path, ck_n = n - strlen(SUFFIX);
    }
    char *fix = xcalloc(ck_n + 64, 1);
    snprintf(fix, ck_n + 64, "write it again with engram-host inspect --write-digests %.*s", (int)ck_n, ck);
    return fix;
}

static int jpeek(struct json *j) {  // the next byte after white space, or -1 at the end
    while (j->pos < j->len && strchr(" \t\r\n", j->p[j->pos]) && j->p[j->pos]) j->pos++;
    return j->pos < j->len ? j->p[j->pos] : -1;
}

static void jexpect(struct json *j, char c) {
    if (jpeek(j) != c) jfail(j, "expected '%c'", c);
    j->pos++;
}

static unsigned jhex4(struct json *j) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++, j->pos++) {
        int c = j->pos < j->len ? j->p[j->pos] : -1;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) jfail(j, "bad \\u escape");
        v = v << 4 | (unsigned)d;
    }
    return v;
}

// A string at pos, decoded to UTF-8 in a new buffer (NUL-terminated; *n its length).
static char *jstring(struct json *j, size_t *n) {
    if (jpeek(j) != '"') jfail(j, "expected a string");
    size_t start = ++j->pos, k = 0, cap = 64;
    char *out = xcalloc(cap, 1);
    for (;;) {
        if (k + 5 > cap && !(out = realloc(out, cap *= 2))) fail("%s: out of memory for a string", j->path);
        if (j->pos >= j->len) { j->pos = start - 1; jfail(j, "unterminated string"); }
        uint8_t c = j->p[j->pos++];
        if (c == '"') break;
        if (c < 0x20) { j->pos--; jfail(j, "control character 0x%02x in a string", c); }
        if (c != '\\') { out[k++] = (char)c; continue; }
        int e = j->pos < j->len ? j->p[j->pos++] : -1;
        const char *esc = strchr("\"\\/bfnrt", e > 0 ? e : 'x');
        if (e > 0 && esc) { out[k++] = "\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrt"]; continue; }
        if (e != 'u') { j->pos--; jfail(j, "bad escape"); }
        unsigned cp = jhex4(j);
        if (cp >= 0xDC00 && cp <= 0xDFFF) jfail(j, "lone surrogate in a \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (j->pos + 2 > j->len || j->p[j->pos] != '\\' || j->p[j->pos + 1] != 'u') jfail(j, "lone surrogate in a \\u escape");
            j->pos += 2;
            unsigned lo = jhex4(j);
            if (lo < 0xDC00 || lo > 0xDFFF) jfail(j, "lone surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp < 0x80) out[k++] = (char)cp;
        else if (cp < 0x800) out[k++] = (char)(0xC0 | cp >> 6), out[k++] = (char)(0x80 | (cp & 0x3F));
        else if (cp < 0x10000)
            out[k++] = (char)(0xE0 | cp >> 12), out[k++] = (char)(0x80 | (cp >> 6 & 0x3F)), out[k++] = (char)(0x80 | (cp & 0x3F));
        else
            out[k++] = (char)(0xF0 | cp >> 18), out[k++] = (char)(0x80 | (cp >> 12 & 0x3F)),
            out[k++] = (char)(0x80 | (cp >> 6 & 0x3F)), out[k++] = (char)(0x80 | (cp & 0x3F));
    }
    if (!utf8_valid((const uint8_t *)out, k)) { j->pos = start - 1; jfail(j, "a string that is not valid UTF-8"); }
    out[k] = 0;
    *n = k;
    return out;
}

// The string at byte `at` (already checked), decoded; pos is left where it was.
static char *jstring_at(struct json *j, size_t at, size_t *n) {
    size_t pos = j->pos;
    j->pos = at;
    char *s = jstring(j, n);
    j->pos = pos;
    return s;
}

// Skips any value, strictly checked.
static void jskip(struct json *j, int depth) {
    int c = jpeek(j);
    size_t n;
    if (depth > 64) jfail(j, "nested more than 64 deep");
    if (c == '"') { free(jstring(j, &n)); return; }
    if (c == '{' || c == '[') {
        j->pos++;
        if (jpeek(j) == c + 2) { j->pos++; return; }
        for (;;) {
            if (c == '{') { free(jstring(j, &n)); jexpect(j, ':'); }
            jskip(j, depth + 1);
            int d = jpeek(j);
            j->pos++;
            if (d == c + 2) return;
            if (d != ',') { j->pos--; jfail(j, "expected ',' or '%c'", c + 2); }
        }
    }
    static const char *const WORDS[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if (j->len - j->pos >= strlen(WORDS[i]) && !memcmp(j->p + j->pos, WORDS[i], strlen(WORDS[i]))) {
            j->pos += strlen(WORDS[i]);
            return;
        }
    size_t s = j->pos;
    if (j->pos < j->len && j->p[j->pos] == '-') j->pos++;
    size_t d0 = j->pos;
    while (j->pos < j->len && j->p[j->pos] >= '0' && j->p[j->pos] <= '9') j->pos++;
    if (j->pos == d0 || (j->p[d0] == '0' && j->pos - d0 > 1)) { j->pos = s; jfail(j, c < 0 ? "unexpected end" : "unexpected character"); }
    if (j->pos < j->len && j->p[j->pos] == '.') {
        size_t f = ++j->pos;
        while (j->pos < j->len && j->p[j->pos] >= '0' && j->p[j->pos] <= '9') j->pos++;
        if (j->pos == f) jfail(j, "a digit must follow '.'");
    }
    if (j->pos < j->len && (j->p[j->pos] == 'e' || j->p[j->pos] == 'E')) {
        j->pos++;
        if (j->pos < j->len && (j->p[j->pos] == '+' || j->p[j->pos] == '-')) j->pos++;
        size_t f = j->pos;
        while (j->pos < j->len && j->p[j->pos] >= '0' && j->p[j->pos] <= '9') j->pos++;
        if (j->pos == f) jfail(j, "a digit must follow the exponent");
    }
}

// s (n bytes of UTF-8) for a message, in out: its first `max` code points (then "..."), control characters as
// \uXXXX so that the message stays one line. out needs 6 * max + 4 bytes.
static const char *shown(char *out, size_t cap, const char *s, size_t n, size_t max) {
    size_t k = 0, cps = 0;
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        uint8_t c = (uint8_t)s[i];
        if ((c & 0xC0) != 0x80 && cps++ == max) {
            k += (size_t)snprintf(out + k, cap - k, "...");
            break;
        }
        if (c < 0x20 || c == 0x7F) k += (size_t)snprintf(out + k, cap - k, "\\u%04x", c);
        else out[k++] = (char)c;
    }
    out[k] = 0;
    return out;
}

// A table name as the Java reader quotes it (Limits.quoted): 'name', or when it has more than 80 characters its
// first 64, "...'" and its length in UTF-16 units, as Java counts it.
static const char *quoted(char *out, size_t cap, const char *s, size_t n) {
    size_t cps = 0, units = 0;
    for (size_t i = 0; i < n; i++)
        if (((uint8_t)s[i] & 0xC0) != 0x80) cps++, units += (uint8_t)s[i] >= 0xF0 ? 2 : 1;
    char b[512];
    if (cps <= 80) snprintf(out, cap, "'%s'", shown(b, sizeof b, s, n, 80));
    else snprintf(out, cap, "'%s' (%zu characters)", shown(b, sizeof b, s, n, 64), units);
    return out;
}

// What the value in [at, end) is, in the Java reader's words (SafetensorsHeader.kind): the string "...", the
// number N, true, false, null, a list, an object. A static buffer.
static const char *kind_of(struct json *j, size_t at, size_t end) {
    static char out[320];
    char b[256];
    size_t n;
    switch (j->p[at]) {
    case '{': return "an object";
    case '[': return "a list";
    case 't': return "true";
    case 'f': return "false";
    case 'n': return "null";
    case '"': {
        char *s = jstring_at(j, at, &n);
        snprintf(out, sizeof out, "the string \"%s\"", shown(b, sizeof b, s, n, 40));
        free(s);
        return out;
    }
    default:
        snprintf(out, sizeof out, "the number %s", shown(b, sizeof b, (const char *)j->p + at, end - at, 40));
        return out;
    }
}

static int by_name(const void *a, const void *b) {
    const struct trusted *x = a, *y = b;
    int c = memcmp(x->name, y->name, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static int is_hex(const char *s, size_t n, size_t digits) {
    if (n != digits) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

static int key_is(const char *key, size_t n, const char *name) { return n == strlen(name) && !memcmp(key, name, n); }

// An object's members, once over (the document's syntax is already checked): for each of `names` whether it is
// there and where its value lies; a key twice is refused as the Java JSON reader refuses it. Returns the first key
// not among `names` (in the file's order, NULL if none; *order its place, *unknown_n its length) and fills order[].
static char *members(struct json *j, size_t at, const char *const *names, int count, int *seen, size_t *vat,
                     size_t *vend, size_t *order, size_t *unknown_order, size_t *unknown_n) {
    char *unknown = NULL;
    *unknown_order = SIZE_MAX;
    j->pos = at + 1;
    if (jpeek(j) == '}') return NULL;
    for (size_t k = 0;; k++) {
        jpeek(j);
        size_t key_at = j->pos, n;
        char *key = jstring(j, &n);
        int f = 0;
        while (f < count && !key_is(key, n, names[f])) f++;
        if (f < count && seen[f]) { free(key); free(unknown); j->pos = key_at; jfail(j, "duplicate key \"%s\"", names[f]); }
        jexpect(j, ':');
        jpeek(j);
        size_t v = j->pos;
        jskip(j, 1);
        if (f < count) seen[f] = 1, vat[f] = v, vend[f] = j->pos, order[f] = k;
        else if (!unknown) unknown = key, *unknown_n = n, *unknown_order = k, key = NULL;
        free(key);
        int d = jpeek(j);
        j->pos++;
        if (d == '}') return unknown;
    }
}

// A field of one accepted value: `want` is its JSON text (a string's is compared decoded); `readable` says what
// this build reads.
static void want_field(struct json *j, const char *name, int seen, size_t at, size_t end, const char *want,
                       const char *readable) {
    if (!seen) record_fail(j, "not a digest sidecar: no '%s'", name);
    int ok;
    if (want[0] == '"') {
        size_t n;
        char *s = j->p[at] == '"' ? jstring_at(j, at, &n) : NULL;
        ok = s && n == strlen(want) - 2 && !memcmp(s, want + 1, n);
        free(s);
    } else {
        ok = end - at == strlen(want) && !memcmp(j->p + at, want, end - at);
    }
    if (!ok)  // another version or algorithm: a later build may read it
        fail("%s: '%s' is %s, this build reads only %s; use a build that reads it, or %s", j->path, name,
             kind_of(j, at, end), readable, j->fix);
}

// A version 2 table: an object of exactly its engram digest v1 (16 hex digits) and its sha256-tree-v1 (64).
static void v2_table(struct json *j, size_t at, size_t end, const char *q, struct trusted *t) {
    static const char *const KEYS[2] = {ENGRAM_KEY, TREE_KEY};
    static const size_t DIGITS[2] = {16, 64};
    if (j->p[at] != '{')
        record_fail(j, "table %s: not an object of " ENGRAM_KEY " and " TREE_KEY " but %s", q, kind_of(j, at, end));
    int seen[2] = {0};
    size_t vat[2] = {0}, vend[2] = {0}, order[2], unknown_order, unknown_n = 0, pos = j->pos;
    char *unknown = members(j, at, KEYS, 2, seen, vat, vend, order, &unknown_order, &unknown_n);
    j->pos = pos;
    char b[512];
    if (unknown) {  // freed before failing, here and below, so that a leak checker's build exits 1 as well
        shown(b, sizeof b, unknown, unknown_n, 80);
        free(unknown);
        record_fail(j, "table %s: unexpected field '%s' (expected " ENGRAM_KEY ", " TREE_KEY ")", q, b);
    }
    for (int f = 0; f < 2; f++) {
        if (!seen[f]) record_fail(j, "table %s: no '%s' (expected " ENGRAM_KEY ", " TREE_KEY ")", q, KEYS[f]);
        size_t n = 0;
        char *hex = j->p[vat[f]] == '"' ? jstring_at(j, vat[f], &n) : NULL;
        if (!hex || !is_hex(hex, n, DIGITS[f])) {
            free(hex);
            record_fail(j, "table %s: %s is %s, not %zu lower-case hex digits", q, KEYS[f],
                        kind_of(j, vat[f], vend[f]), DIGITS[f]);
        }
        if (f == 0) t->engram = strtoull(hex, NULL, 16);
        else memcpy(t->hex, hex, 65);
        free(hex);
    }
}

static void read_sidecar(const char *path, struct sidecar *sc) {
    memset(sc, 0, sizeof *sc);
    sc->path = path;
    sc->fix = record_fix(path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fail("--verify-content %s: cannot open: %s (%s)%s%s", path, strerrorname_np(errno), strerror(errno),
             errno == ENOENT ? "; write it with " : "", errno == ENOENT ? sc->fix + strlen("write it again with ") : "");
    struct stat st;
    if (fstat(fd, &st) != 0) fail_errno("fstat", path);
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file", path);
    if ((uint64_t)st.st_size > SIDECAR_MAX)
        fail("%s: %lld bytes, over the limit of %llu for a digest sidecar", path, (long long)st.st_size, SIDECAR_MAX);
    uint8_t *buf = xcalloc((size_t)st.st_size + 1, 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail_errno("read", path);
        if (r == 0) fail("%s: shrank while it was read", path);
        got += (size_t)r;
    }
    close(fd);
    // The whole document's syntax first, as the Java reader parses it before it looks at a field.
    struct json j = {path, sc->fix, buf, got, 0};
    jpeek(&j);
    size_t root = j.pos;
    jskip(&j, 0);
    if (jpeek(&j) != -1) jfail(&j, "trailing characters after the value");
    if (buf[root] != '{') record_fail(&j, "not a digest sidecar: not a JSON object but %s", kind_of(&j, root, j.pos));
    enum { F_FORMAT, F_VERSION, F_ALGORITHM, F_CHUNK, F_TABLES, F_N };
    static const char *const FIELDS[F_N] = {"format", "version", "algorithm", "chunk_bytes", "tables"};
    int seen[F_N] = {0};
    size_t at[F_N] = {0}, end[F_N] = {0}, order[F_N] = {0}, unknown_order, unknown_n = 0;
    char *unknown = members(&j, root, FIELDS, F_N, seen, at, end, order, &unknown_order, &unknown_n);
    int v2 = seen[F_VERSION] && end[F_VERSION] - at[F_VERSION] == 1 && buf[at[F_VERSION]] == '2';
    char b[512], q[1024];
    if (v2 && seen[F_ALGORITHM] && order[F_ALGORITHM] < unknown_order)  // a field that version 2 does not have
        shown(b, sizeof b, "algorithm", strlen("algorithm"), 80);
    else if (unknown)
        shown(b, sizeof b, unknown, unknown_n, 80);
    if (unknown || (v2 && seen[F_ALGORITHM])) {
        free(unknown);
        free(buf);
        record_fail(&j, "unexpected field '%s' (expected %s)", b,
                    v2 ? "format, version, chunk_bytes, tables" : "format, version, algorithm, chunk_bytes, tables");
    }
    want_field(&j, "format", seen[F_FORMAT], at[F_FORMAT], end[F_FORMAT], "\"engram-content-digests\"",
               "\"engram-content-digests\"");
    if (!v2) {
        want_field(&j, "version", seen[F_VERSION], at[F_VERSION], end[F_VERSION], "1", "1 and 2");
        want_field(&j, "algorithm", seen[F_ALGORITHM], at[F_ALGORITHM], end[F_ALGORITHM], "\"" TREE_KEY "\"",
                   "\"" TREE_KEY "\"");
    }
    want_field(&j, "chunk_bytes", seen[F_CHUNK], at[F_CHUNK], end[F_CHUNK], "16777216", "16777216");
    if (!seen[F_TABLES]) record_fail(&j, "not a digest sidecar: no 'tables'");
    if (buf[at[F_TABLES]] != '{')
        record_fail(&j, "'tables' is not an object of table name to digest%s but %s", v2 ? "s" : "",
              kind_of(&j, at[F_TABLES], end[F_TABLES]));
    sc->version = v2 ? 2 : 1;
    j.pos = at[F_TABLES] + 1;
    size_t cap = 0;
    if (jpeek(&j) == '}') j.pos++;
    else for (;;) {
        struct trusted t;
        memset(&t, 0, sizeof t);
        t.name = jstring(&j, &t.n);
        if (!t.n) record_fail(&j, "a table has an empty name");
        quoted(q, sizeof q, t.name, t.n);
        jexpect(&j, ':');
        jpeek(&j);
        size_t v = j.pos;
        jskip(&j, 1);
        if (v2) {
            v2_table(&j, v, j.pos, q, &t);
        } else {
            size_t hn = 0;
            char *hex = buf[v] == '"' ? jstring_at(&j, v, &hn) : NULL;
            if (!hex || !is_hex(hex, hn, 64)) {
                free(hex);
                record_fail(&j, "table %s: digest is %s, not 64 lower-case hex digits", q, kind_of(&j, v, j.pos));
            }
            memcpy(t.hex, hex, 65);
            free(hex);
        }
        if (sc->n == cap) {
            cap = cap ? cap * 2 : 64;
            sc->v = realloc(sc->v, cap * sizeof *sc->v);
            if (!sc->v) fail("%s: out of memory for %zu tables", path, cap);
        }
        sc->v[sc->n++] = t;
        int d = jpeek(&j);
        j.pos++;
        if (d == '}') break;
    }
    free(buf);
    if (sc->n) qsort(sc->v, sc->n, sizeof *sc->v, by_name);
    for (size_t i = 1; i < sc->n; i++)
        if (!by_name(&sc->v[i - 1], &sc->v[i]))
            record_fail(&j, "table %s appears twice", quoted(q, sizeof q, sc->v[i].name, sc->v[i].n));
}

static const struct trusted *trusted_digest(const struct sidecar *sc, struct str name) {
    struct trusted key = {(char *)name.p, name.n, "", 0};
    return bsearch(&key, sc->v, sc->n, sizeof *sc->v, by_name);
}

// ---------------------------------------------------------------------------------------------- one repetition

struct options {
    const char *socket;                // the resolved path
    int device, cpu_view, reg, repeat, json, verify, wait_ms, ready_line;
    struct sidecar content;            // --verify-content: the trusted digests (content.path NULL without it)
    uint32_t daemon_uids[MAX_DAEMON_UIDS];  // --daemon-uid: uids besides root and this euid whose daemon is trusted
    int daemon_uids_n;
    const char *tables[MAX_SELECT];    // --table: the tables to attach (argv's strings); none: every table
    int tables_n;
};

struct timings {
    double context, handshake, manifest, import, reserve_map, gpu_access, cpu_access, mmap, reg, release, verify;
    double content;
};

// --verify-content: each table's outcome, its digest when computed, and the totals; with a version 2 record, also
// whether the manifest's engram digest v1 is the record's (E_NONE: no record entry, or version 1).
enum { C_OK, C_MISMATCH, C_NOT_CHECKED, C_MISSING };
static const char *const CONTENT_NAMES[] = {"ok", "mismatch", "not checked", "missing"};
enum { E_NONE, E_OK, E_MISMATCH };
static const char *const ENGRAM_NAMES[] = {"", "ok", "mismatch"};
struct content_result {               // names copied: the report comes after release, which frees the MANIFEST
    uint32_t n, *index;                // n entries, one per table attached (every table, or --table's), in manifest
                                       // order; index: each entry's table in the MANIFEST
    uint8_t *status, *engram; char (*hex)[65]; struct str *names; uint32_t counts[4], engram_counts[3];
    uint64_t bytes;
};

struct daemon_info {
    char backend[64], version[64], instance[256];
    int32_t pid;
    uint8_t state;
    uint16_t protocol;                 // the version WELCOME chose
    uint32_t uid;                      // SO_PEERCRED's (and, in version 2, WELCOME's)
};

static void copy_str(char *dst, size_t cap, struct str s) {
    size_t n = s.n < cap - 1 ? s.n : cap - 1;
    memcpy(dst, s.p, n);
    dst[n] = 0;
}

// "Transport": the client checks the daemon too. Right after connect, the daemon's uid (SO_PEERCRED) must be
// root's, this client's euid or one given with --daemon-uid; else someone else may be squatting the socket path.
static void check_daemon_uid(struct conn *c, const struct options *o) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(c->s, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) fail_errno("getsockopt", "SO_PEERCRED");
    if (len != sizeof cred) fail("getsockopt(SO_PEERCRED) gave %u bytes, not %zu", (unsigned)len, sizeof cred);
    c->peer_uid = cred.uid, c->peer_pid = cred.pid;
    uint32_t me = geteuid();
    if (cred.uid == 0 || cred.uid == me) return;
    for (int i = 0; i < o->daemon_uids_n; i++)
        if (o->daemon_uids[i] == cred.uid) return;
    char allowed[MAX_DAEMON_UIDS * 24 + 64];
    size_t n = (size_t)snprintf(allowed, sizeof allowed, "0 (root)");
    if (me != 0) n += (size_t)snprintf(allowed + n, sizeof allowed - n, ", %u (this client's euid)", me);
    for (int i = 0; i < o->daemon_uids_n; i++)
        n += (size_t)snprintf(allowed + n, sizeof allowed - n, ", %u (--daemon-uid)", o->daemon_uids[i]);
    fail("refusing the daemon on %s: its uid (SO_PEERCRED, pid %d) is %u, and this client trusts only the uids %s; "
         "if that user's daemon is meant to serve you, add --daemon-uid %u", o->socket, (int)cred.pid,
         (unsigned)cred.uid, allowed, (unsigned)cred.uid);
}

// connect, the daemon's uid, HELLO (encoded as version 1, versions 1 to 2), WELCOME (encoded in the version it
// chooses). The first frame may be an ERROR that the daemon sent at accept (NOT_ALLOWED, BUSY) or in answer to
// HELLO: encoded as version 1, it fails. With absent_ok, a socket nobody listens on (ENOENT, ECONNREFUSED) returns a
// conn whose s is -1 instead of failing.
static struct conn connect_and_hello(const struct options *o, struct daemon_info *info, int absent_ok) {
    struct conn c = {socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), 0, 0, 0};
    if (c.s < 0) fail_errno("socket", "AF_UNIX, SOCK_STREAM");
    struct timeval tv = {REPLY_TIMEOUT_S, 0};
    if (setsockopt(c.s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) || setsockopt(c.s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv))
        fail_errno("setsockopt", "SO_RCVTIMEO/SO_SNDTIMEO");
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, o->socket, strlen(o->socket));
    if (connect(c.s, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        if ((e == ENOENT || e == ECONNREFUSED) && absent_ok) {
            close(c.s);
            c.s = -1;
            return c;
        }
        if (e == ENOENT || e == ECONNREFUSED)
            fail("no daemon listens on %s: connect failed: %s (%s)", o->socket, strerrorname_np(e), strerror(e));
        errno = e;
        fail_errno("connect", o->socket);
    }
    check_daemon_uid(&c, o);
    static const char name[] = "engram-attach";
    uint16_t min = VERSION_MIN, max = VERSION_MAX, n = sizeof name - 1;  // HELLO: min, max, pid, str16 client
    int32_t pid = getpid();
    uint8_t body[2 + 2 + 4 + 2 + sizeof name - 1];
    memcpy(body, &min, 2), memcpy(body + 2, &max, 2), memcpy(body + 4, &pid, 4), memcpy(body + 8, &n, 2);
    memcpy(body + 10, name, sizeof name - 1);
    // A daemon that refused us at accept has written its ERROR and closed: the HELLO may find the socket gone
    // (EPIPE, ECONNRESET), and the ERROR is still there to read.
    send_frame(c.s, 1, T_HELLO, body, sizeof body, 1);
    struct message m;
    uint16_t header_version;
    uint16_t type = recv_frame(&c, &m, "WELCOME", &header_version);
    struct reader r = {m.payload, m.length, 8, "WELCOME"};
    if (type == T_ERROR) {
        r.frame = "ERROR";
        if (header_version != 1)
            rfail(&r, "the frame header's version is %u, but a frame sent before a version is chosen is version 1",
                  header_version);
        error_frame(&r, 0, " before WELCOME");
    }
    if (type != T_WELCOME) fail_msg(&m, "expected WELCOME (2), got %s (%u)", type_name(type), type);
    uint16_t version = u16(&r, "version");
    if (version < VERSION_MIN || version > VERSION_MAX)
        rfail(&r, "the daemon chose version %u; this client speaks %d to %d", version, VERSION_MIN, VERSION_MAX);
    if (header_version != version)
        rfail(&r, "the frame header's version is %u, but the WELCOME's version field chose %u: a WELCOME carries the "
                  "version it chooses", header_version, version);
    info->protocol = version;
    info->pid = i32(&r, "pid");
    copy_str(info->version, sizeof info->version, str16(&r, "daemon_version"));
    copy_str(info->backend, sizeof info->backend, str16(&r, "backend"));
    copy_str(info->instance, sizeof info->instance, str16(&r, "instance"));
    info->state = u8(&r, "state");
    info->uid = c.peer_uid;
    uint32_t uid = version >= 2 ? u32(&r, "uid") : c.peer_uid;
    end_frame(&r);
    if (info->state > 3) rfail(&r, "state %u is not 0..3", info->state);
    if (uid != c.peer_uid)
        rfail(&r, "uid is %u, but SO_PEERCRED says the daemon's uid is %u (pid %d): refusing a daemon that misstates "
                  "who it is", uid, c.peer_uid, (int)c.peer_pid);
    message_free(&m);
    c.version = version;
    return c;
}

// --table: after the whole MANIFEST is checked (parse_manifest: every region and table, named or not), marks what
// is not to be attached (skip) and closes the fd of every region that holds none of the named tables (a kind 2 table
// over a run of regions holds every region of its run), unimported and unmapped; its slot in m->fds becomes -1, so
// that message_free closes each fd exactly once. A name the manifest lacks fails (after closing every fd, as
// fail_msg does). Without --table everything is attached. Fills the att_* totals either way.
static void select_tables(const struct options *o, struct message *m, struct manifest *mf) {
    if (o->tables_n) {
        for (uint32_t i = 0; i < mf->regions_n; i++) mf->regions[i].skip = 1;
        for (uint32_t i = 0; i < mf->tables_n; i++) mf->tables[i].skip = 1;
        for (int k = 0; k < o->tables_n; k++) {
            size_t n = strlen(o->tables[k]);
            uint32_t i = 0;
            while (i < mf->tables_n && !(mf->tables[i].name.n == n && !memcmp(mf->tables[i].name.p, o->tables[k], n))) i++;
            if (i == mf->tables_n) {
                char b[512];
                fail_msg(m, "--table '%s': the daemon on %s serves no table of that name (it serves %u); list its tables "
                            "with `engram-host status --socket %s`, or run engram-attach without --table to attach "
                            "them all", shown(b, sizeof b, o->tables[k], n, 80), o->socket, mf->tables_n, o->socket);
            }
            mf->tables[i].skip = 0;
            if (mf->tables[i].region < 0) continue;
            // every region of its place: one, or a kind 2 table's run of regions (mapped back to back, attach_vmm)
            for (uint32_t j = (uint32_t)mf->tables[i].region, last = run_last(mf, &mf->tables[i]); j <= last; j++)
                mf->regions[j].skip = 0;
        }
    }
    for (uint32_t i = 0; i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        if (g->skip) {  // m->fds.v[i] is g->fd (parse_manifest): closed here, and only here
            close(g->fd);
            m->fds.v[i] = g->fd = -1;
            continue;
        }
        mf->att_regions++, mf->att_bytes += g->size;
        if (g->kind >= K_VMM_HOST) mf->att_vmm_regions++, mf->att_vmm_bytes += g->size;
    }
    for (uint32_t i = 0; i < mf->tables_n; i++)
        if (!mf->tables[i].skip) mf->att_tables++, mf->att_table_bytes += mf->tables[i].bytes;
}

// IMPORT (expectation any) until a MANIFEST comes; for --wait-ms, NOT_READY is asked again every 100 ms, and STOPPING
// (a restart under way) on a new connection, a socket nobody listens on meanwhile tried again every 100 ms.
static void import_manifest(struct conn *c, struct daemon_info *d, const struct options *o, struct message *m,
                            struct manifest *mf, double *ms) {
    double deadline = now_ms() + o->wait_ms;
    // flags 0, device (the client's GPU: its device tensors come too), expectation 0 (any)
    uint8_t body[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t dev = (uint32_t)(int32_t)o->device;
    for (int k = 0; k < 4; k++) body[4 + k] = (uint8_t)(dev >> (8 * k));
    for (;;) {
        double t0 = now_ms();
        send_frame(c->s, c->version, T_IMPORT, body, sizeof body, 0);
        struct reader r;
        int retry = open_frame(c, m, &r, T_MANIFEST, now_ms() < deadline);
        if (!retry) {
            parse_manifest(m, &r, mf);
            *ms = now_ms() - t0;
            return;
        }
        message_free(m);
        struct timespec pause = {0, RETRY_MS * 1000 * 1000};
        nanosleep(&pause, NULL);
        if (retry == 6) {  // STOPPING: the daemon closes this connection; its successor answers on a new one
            close(c->s);
            for (*c = connect_and_hello(o, d, now_ms() < deadline); c->s < 0;
                 *c = connect_and_hello(o, d, now_ms() < deadline))
                nanosleep(&pause, NULL);
        }
    }
}

static void attach_vmm(const struct options *o, struct manifest *mf, struct timings *t, CUdeviceptr *va) {
    double t0 = now_ms();
    mf->va_bytes = 0;
    for (uint32_t i = 0; i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        if (g->kind < K_VMM_HOST || g->skip) continue;  // skip: --table named none of its tables; its fd is closed
        if (g->size % vmm_granularity)
            fail("region %u: size %llu is not a multiple of the CUDA granularity %zu", i, (unsigned long long)g->size,
                 vmm_granularity);
        cu_check(cu.MemImportFromShareableHandle(&g->handle, (void *)(uintptr_t)g->fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                 "cuMemImportFromShareableHandle", "region %u, fd %d", i, g->fd);
        g->imported = 1;
        mf->va_bytes += g->size;
    }
    double t1 = now_ms();
    cu_check(cu.MemAddressReserve(va, mf->va_bytes, vmm_granularity, 0, 0), "cuMemAddressReserve", "%llu bytes",
             (unsigned long long)mf->va_bytes);
    uint64_t offset = 0;
    for (uint32_t i = 0; i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        if (g->kind < K_VMM_HOST || g->skip) continue;
        g->va_offset = offset;
        cu_check(cu.MemMap(*va + offset, g->size, 0, g->handle, 0), "cuMemMap", "region %u, %llu bytes at +%llu", i,
                 (unsigned long long)g->size, (unsigned long long)offset);
        g->mapped = 1;
        offset += g->size;
    }
    double t2 = now_ms();
    CUmemAccessDesc gpu = {{CU_MEM_LOCATION_TYPE_DEVICE, o->device}, CU_MEM_ACCESS_FLAGS_PROT_READ};
    for (uint32_t i = 0; i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        if (g->kind < K_VMM_HOST || g->skip) continue;
        cu_check(cu.MemSetAccess(*va + g->va_offset, g->size, &gpu, 1), "cuMemSetAccess", "region %u, GPU %d, read", i,
                 o->device);
    }
    double t3 = now_ms();
    for (uint32_t i = 0; o->cpu_view && i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        if (g->kind != K_VMM_HOST || g->skip) continue;
        CUmemAccessDesc host = {{CU_MEM_LOCATION_TYPE_HOST_NUMA, g->numa < 0 ? 0 : g->numa}, CU_MEM_ACCESS_FLAGS_PROT_READ};
        cu_check(cu.MemSetAccess(*va + g->va_offset, g->size, &host, 1), "cuMemSetAccess", "region %u, HOST_NUMA %d, read",
                 i, host.location.id);
        g->host = (const uint8_t *)(uintptr_t)(*va + g->va_offset);
    }
    double t4 = now_ms();
    t->import = t1 - t0, t->reserve_map = t2 - t1, t->gpu_access = t3 - t2, t->cpu_access = o->cpu_view ? t4 - t3 : 0;
}

static void attach_memfd(const struct options *o, struct manifest *mf, struct timings *t) {
    double t0 = now_ms();
    for (uint32_t i = 0; i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        if (g->kind > K_MEMFD_HUGETLB || g->skip) continue;  // skip: --table named none of its tables; fd closed
        void *p = mmap(NULL, g->size, PROT_READ, MAP_SHARED, g->fd, 0);
        if (p == MAP_FAILED) fail_errno("mmap", "PROT_READ, MAP_SHARED, a region fd");
        g->host = p;
    }
    double t1 = now_ms();
    for (uint32_t i = 0; o->reg && i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        if (g->kind > K_MEMFD_HUGETLB || g->skip) continue;
        CUdeviceptr first = 0;
        for (uint64_t off = 0; off < g->size; off += REGISTER_CHUNK) {
            uint64_t n = g->size - off < REGISTER_CHUNK ? g->size - off : REGISTER_CHUNK;
            void *p = (void *)(g->host + off);
            cu_check(cu.MemHostRegister(p, n, CU_MEMHOSTREGISTER_READ_ONLY | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE),
                     "cuMemHostRegister_v2", "region %u, %llu bytes at +%llu, READ_ONLY|DEVICEMAP|PORTABLE", i,
                     (unsigned long long)n, (unsigned long long)off);
            g->chunks++;  // counted at once, so that release() unregisters it should the next call fail
            CUdeviceptr d;
            cu_check(cu.MemHostGetDevicePointer(&d, p, 0), "cuMemHostGetDevicePointer_v2", "region %u at +%llu", i,
                     (unsigned long long)off);
            if (off == 0) first = d;
            else if (d != first + off)
                fail("region %u: the device pointers of its registered chunks are not contiguous (+%llu maps to 0x%llx, "
                     "expected 0x%llx)", i, (unsigned long long)off, d, first + off);
        }
    }
    t->mmap = t1 - t0, t->reg = o->reg ? now_ms() - t1 : 0;
}

// Digests every table readable from the CPU and compares with the manifest; returns how many were checked.
static uint32_t verify_tables(struct manifest *mf) {
    uint32_t checked = 0;
    for (uint32_t i = 0; i < mf->tables_n; i++) {
        const struct table *t = &mf->tables[i];
        if (t->skip) continue;
        const uint8_t *base = table_host(mf, t);
        if (!base) continue;
        uint64_t d = engram_digest(base, t->bytes);
        if (d != t->digest)
            fail("table '%.*s': the mapped bytes digest to %016llx but the manifest says %016llx", (int)t->name.n,
                 t->name.p, (unsigned long long)d, (unsigned long long)t->digest);
        checked++;
    }
    return checked;
}

// --verify-content: the sha256-tree-v1 digest of every CPU-readable table (memfd mappings; cuda-vmm host regions
// with --cpu-view; an empty table always) compared with the sidecar's; device tensors are "not checked". A table the
// sidecar lacks is "missing", whether readable or not. Single-threaded. With a version 2 record, every table it holds
// (CPU-readable or not) also has its engram digest v1 compared with the manifest's `digest`, which the daemon
// computed from the bytes at load: a difference means the daemon serves other bytes than the record describes.
static void verify_content(const struct options *o, struct manifest *mf, struct content_result *cr) {
    memset(cr, 0, sizeof *cr);
    cr->index = xcalloc(mf->tables_n, sizeof *cr->index);
    cr->status = xcalloc(mf->tables_n, 1);
    cr->engram = xcalloc(mf->tables_n, 1);
    cr->hex = xcalloc(mf->tables_n, sizeof *cr->hex);
    cr->names = xcalloc(mf->tables_n, sizeof *cr->names);
    for (uint32_t k = 0; k < mf->tables_n; k++) {
        const struct table *t = &mf->tables[k];
        if (t->skip) continue;  // --table did not name it
        uint32_t i = cr->n++;
        cr->index[i] = k;
        const uint8_t *base = table_host(mf, t);
        const struct trusted *want = trusted_digest(&o->content, t->name);
        char *name = xcalloc(t->name.n + 1, 1);
        cr->names[i] = (struct str){memcpy(name, t->name.p, t->name.n), t->name.n};
        if (base) {
            tree_digest(base, t->bytes, cr->hex[i]);
            cr->bytes += t->bytes;
        }
        cr->status[i] = !want ? C_MISSING : !base ? C_NOT_CHECKED : strcmp(want->hex, cr->hex[i]) ? C_MISMATCH : C_OK;
        cr->counts[cr->status[i]]++;
        if (want && o->content.version == 2) cr->engram[i] = want->engram == t->digest ? E_OK : E_MISMATCH;
        cr->engram_counts[cr->engram[i]]++;
    }
}

// Prints every mismatch and missing digest; returns how many there were.
static uint32_t content_problems(const struct options *o, const struct manifest *mf, const struct content_result *cr) {
    for (uint32_t i = 0; i < cr->n; i++) {
        const struct table *t = &mf->tables[cr->index[i]];
        if (cr->status[i] == C_MISMATCH)
            fprintf(stderr, "engram-attach: content check (sha256-tree-v1) failed: table '%.*s': the mapped bytes have "
                            "digest %s but %s says %s\n", (int)t->name.n, t->name.p, cr->hex[i], o->content.path,
                    trusted_digest(&o->content, t->name)->hex);
        else if (cr->status[i] == C_MISSING)
            fprintf(stderr, "engram-attach: content check (sha256-tree-v1) failed: table '%.*s' has no trusted digest in "
                            "%s (the mapped bytes have digest %s)\n", (int)t->name.n, t->name.p, o->content.path,
                    cr->hex[i][0] ? cr->hex[i] : "none: not CPU-readable");
        if (cr->engram[i] == E_MISMATCH)
            fprintf(stderr, "engram-attach: content check (engram-digest-v1) failed: table '%.*s': the manifest says "
                            "engram-digest-v1 %016llx but %s says %016llx: the daemon serves other bytes than the record "
                            "describes; give the record of the checkpoint it serves, or %s\n", (int)t->name.n,
                    t->name.p, (unsigned long long)t->digest, o->content.path,
                    (unsigned long long)trusted_digest(&o->content, t->name)->engram, o->content.fix);
    }
    return cr->counts[C_MISMATCH] + cr->counts[C_MISSING] + cr->engram_counts[E_MISMATCH];
}

static void release(struct manifest *mf, CUdeviceptr va) {
    for (uint32_t i = mf->regions_n; i-- > 0;) {
        struct region *g = &mf->regions[i];
        if (g->mapped) cu_check(cu.MemUnmap(va + g->va_offset, g->size), "cuMemUnmap", "region %u", i);
    }
    for (uint32_t i = mf->regions_n; i-- > 0;) {
        struct region *g = &mf->regions[i];
        if (g->imported) cu_check(cu.MemRelease(g->handle), "cuMemRelease", "region %u", i);
    }
    if (va) cu_check(cu.MemAddressFree(va, mf->va_bytes), "cuMemAddressFree", "%llu bytes", (unsigned long long)mf->va_bytes);
    for (uint32_t i = mf->regions_n; i-- > 0;) {
        struct region *g = &mf->regions[i];
        for (size_t c = g->chunks; c-- > 0;)
            cu_check(cu.MemHostUnregister((void *)(g->host + c * REGISTER_CHUNK)), "cuMemHostUnregister", "region %u", i);
    }
    for (uint32_t i = mf->regions_n; i-- > 0;) {
        struct region *g = &mf->regions[i];
        if (g->kind <= K_MEMFD_HUGETLB && g->host && munmap((void *)g->host, g->size) != 0) fail_errno("munmap", "a region");
    }
    free(mf->regions);
    free(mf->tables);
    free(mf->ends);
    free(mf->other);
    free(mf->gaps);
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void json_strn(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void report(const struct options *o, int rep, const struct daemon_info *d, const struct manifest *mf,
                   const struct timings *t, int verified, const struct content_result *cr) {
    double gbps = cr && t->content > 0 ? cr->bytes / (t->content * 1e6) : 0;
    double attach = t->import + t->reserve_map + t->gpu_access + t->cpu_access + t->mmap + t->reg;
    double gib = mf->att_bytes / GIB;  // what is attached: every region, or those of --table's tables
    char sha[65];
    for (int i = 0; i < 32; i++) sprintf(sha + 2 * i, "%02x", mf->sha256[i]);
    if (o->json) {
        printf("{\"rep\":%d,\"backend\":", rep);
        json_str(d->backend);
        printf(",\"daemon_pid\":%d,\"daemon_uid\":%u,\"protocol\":%u,\"daemon_state\":\"%s\",\"daemon_version\":",
               d->pid, d->uid, d->protocol, STATE_NAMES[d->state]);
        json_str(d->version);
        printf(",\"fingerprint\":\"%s\",\"regions\":%u,\"vmm_regions\":%d,\"tables\":%u,\"bytes\":%llu,"
               "\"table_bytes\":%llu,\"device\":%d,\"cpu_view\":%s,\"register\":%s,\"context_ms\":%.3f,"
               "\"handshake_ms\":%.3f,\"manifest_ms\":%.3f,\"import_ms\":%.3f,\"reserve_map_ms\":%.3f,"
               "\"gpu_access_ms\":%.3f,\"cpu_access_ms\":%.3f,\"mmap_ms\":%.3f,\"register_ms\":%.3f,"
               "\"attach_ms\":%.3f,\"ms_per_gib\":%.3f,\"total_ms\":%.3f,\"release_ms\":%.3f",
               sha, mf->regions_n, mf->vmm_regions, mf->tables_n, (unsigned long long)mf->region_bytes,
               (unsigned long long)mf->table_bytes, o->device, o->cpu_view ? "true" : "false", o->reg ? "true" : "false",
               t->context, t->handshake, t->manifest, t->import, t->reserve_map, t->gpu_access, t->cpu_access, t->mmap,
               t->reg, attach, gib > 0 ? attach / gib : 0, t->handshake + t->manifest + attach, t->release);
        printf(",\"attached_regions\":%u,\"attached_vmm_regions\":%u,\"attached_bytes\":%llu,\"attached_tables\":%u,"
               "\"attached_table_bytes\":%llu", mf->att_regions, mf->att_vmm_regions, (unsigned long long)mf->att_bytes,
               mf->att_tables, (unsigned long long)mf->att_table_bytes);
        if (o->tables_n) {
            printf(",\"selected_tables\":[");
            for (int k = 0; k < o->tables_n; k++) {
                if (k) putchar(',');
                json_str(o->tables[k]);
            }
            putchar(']');
        }
        if (o->verify) printf(",\"verified_tables\":%d,\"verify_ms\":%.3f", verified, t->verify);
        if (cr) {
            printf(",\"content_check\":{\"algorithm\":\"sha256-tree-v1\",\"sidecar\":");
            json_str(o->content.path);
            printf(",\"record_version\":%d,\"ok\":%u,\"mismatch\":%u,\"missing\":%u,\"not_checked\":%u,"
                   "\"engram_ok\":%u,\"engram_mismatch\":%u,\"bytes\":%llu,\"ms\":%.3f,\"gb_per_s\":%.3f,"
                   "\"threads\":1,\"tables\":[", o->content.version, cr->counts[C_OK], cr->counts[C_MISMATCH],
                   cr->counts[C_MISSING], cr->counts[C_NOT_CHECKED], cr->engram_counts[E_OK],
                   cr->engram_counts[E_MISMATCH], (unsigned long long)cr->bytes, t->content, gbps);
            for (uint32_t i = 0; i < cr->n; i++) {
                printf("%s{\"name\":", i ? "," : "");
                json_strn(cr->names[i].p, cr->names[i].n);
                printf(",\"content\":\"%s\"", CONTENT_NAMES[cr->status[i]]);
                if (cr->hex[i][0]) printf(",\"digest\":\"%s\"", cr->hex[i]);
                if (cr->engram[i]) printf(",\"engram_digest\":\"%s\"", ENGRAM_NAMES[cr->engram[i]]);
                printf("}");
            }
            printf("]}");
        }
        printf("}\n");
    } else {
        printf("rep %d: %u tables, %llu bytes in %u regions (%.3f GiB, %d cuda-vmm) from %s daemon %s (pid %d, uid %u, "
               "protocol %u, %s at WELCOME), fingerprint %s\n",
               rep, mf->tables_n, (unsigned long long)mf->table_bytes, mf->regions_n, mf->region_bytes / GIB,
               mf->vmm_regions, d->backend,
               d->version, d->pid, d->uid, d->protocol, STATE_NAMES[d->state], sha);
        if (o->tables_n) {
            printf("  selected       %u of %u tables (", mf->att_tables, mf->tables_n);
            for (int k = 0; k < o->tables_n; k++) printf("%s%s", k ? ", " : "", o->tables[k]);
            printf("), %llu bytes; attached %u of %u regions, %llu bytes (%.3f GiB); the other %u region fds closed "
                   "unmapped\n", (unsigned long long)mf->att_table_bytes, mf->att_regions, mf->regions_n,
                   (unsigned long long)mf->att_bytes, gib, mf->regions_n - mf->att_regions);
        }
        if (t->context > 0) printf("  context        %9.3f ms (dlopen, cuInit, primary context, granularity)\n", t->context);
        printf("  handshake      %9.3f ms (connect, HELLO, WELCOME)\n", t->handshake);
        printf("  manifest       %9.3f ms (IMPORT, MANIFEST and fds, validated)\n", t->manifest);
        if (mf->att_vmm_regions)
            printf("  import %.3f ms, reserve+map %.3f ms, GPU access %.3f ms, CPU access %.3f ms\n", t->import,
                   t->reserve_map, t->gpu_access, t->cpu_access);
        if (mf->att_regions > mf->att_vmm_regions) printf("  mmap %.3f ms, register %.3f ms\n", t->mmap, t->reg);
        printf("  attach         %9.3f ms (%.3f ms/GiB); release %.3f ms\n", attach, gib > 0 ? attach / gib : 0, t->release);
        if (o->verify) printf("  verified       %d of %u table digests (%.3f ms)\n", verified, mf->att_tables, t->verify);
        if (cr) {
            printf("  content        %u of %u tables ok against %s (sha256-tree-v1, %.3f ms, %.2f GB/s on 1 thread); "
                   "%u mismatch, %u missing, %u not checked (not CPU-readable)\n", cr->counts[C_OK], cr->n,
                   o->content.path, t->content, gbps, cr->counts[C_MISMATCH], cr->counts[C_MISSING],
                   cr->counts[C_NOT_CHECKED]);
            if (o->content.version == 2)
                printf("  engram digest  %u of %u tables the record holds agree with the manifest (engram-digest-v1); "
                       "%u differ\n", cr->engram_counts[E_OK], cr->engram_counts[E_OK] + cr->engram_counts[E_MISMATCH],
                       cr->engram_counts[E_MISMATCH]);
            for (uint32_t i = 0; i < cr->n; i++) {
                if (cr->status[i] != C_OK)
                    printf("    %-11s  %.*s\n", CONTENT_NAMES[cr->status[i]], (int)cr->names[i].n, cr->names[i].p);
                if (cr->engram[i] == E_MISMATCH)
                    printf("    %-11s  %.*s (engram-digest-v1)\n", "mismatch", (int)cr->names[i].n, cr->names[i].p);
            }
        }
    }
    fflush(stdout);
}

static void run_once(const struct options *o, int rep) {
    struct timings t;
    memset(&t, 0, sizeof t);
    struct daemon_info d;
    double t0 = now_ms();
    struct conn c = connect_and_hello(o, &d, 0);
    t.handshake = now_ms() - t0;
    struct message m;
    struct manifest mf;
    import_manifest(&c, &d, o, &m, &mf, &t.manifest);
    select_tables(o, &m, &mf);  // with --table, the other regions' fds are closed here, never imported or mapped
    uint32_t memfd_regions = mf.att_regions - mf.att_vmm_regions;
    if (mf.att_vmm_regions || (o->reg && memfd_regions)) t.context = cuda_context(o->device);
    CUdeviceptr va = 0;
    if (mf.att_vmm_regions) attach_vmm(o, &mf, &t, &va);
    if (memfd_regions) attach_memfd(o, &mf, &t);
    if (o->ready_line) {  // for whoever times a restart: the tables are usable from here on
        printf("attached %d\n", rep);
        fflush(stdout);
    }
    int verified = 0;
    if (o->verify) {
        double v0 = now_ms();
        verified = (int)verify_tables(&mf);
        t.verify = now_ms() - v0;
    }
    struct content_result cr;
    uint32_t problems = 0;
    if (o->content.path) {
        double c0 = now_ms();
        verify_content(o, &mf, &cr);
        t.content = now_ms() - c0;
        problems = content_problems(o, &mf, &cr);  // before release: the names live in the MANIFEST
    }
    double r0 = now_ms();
    release(&mf, va);
    message_free(&m);  // closes the fds
    t.release = now_ms() - r0;
    send_frame(c.s, c.version, T_BYE, NULL, 0, 1);  // a daemon that stopped meanwhile has ended the lease already
    close(c.s);
    report(o, rep, &d, &mf, &t, verified, o->content.path ? &cr : NULL);
    if (o->content.path) {
        for (uint32_t i = 0; i < cr.n; i++) free((void *)cr.names[i].p);
        free(cr.index);
        free(cr.names);
        free(cr.status);
        free(cr.engram);
        free(cr.hex);
    }
    if (problems) exit(1);
}

// ---------------------------------------------------------------------------------------------- one region, no protocol

// Attaches one region fd as a protocol import attaches it (attach_vmm, attach_memfd: the same calls), for the C
// baselines of JMH's AttachBench: the bench peer below and the in-process library (engram_attach_bench.c). kind is
// K_MEMFD, K_MEMFD_HUGETLB or K_VMM_HOST; flags: 1 CPU view (cuda-vmm host), 2 register (memfd); node: the NUMA node
// of a cuda-vmm host region's CPU view. The CUDA context must be made first (cuda_context) where one is needed, or
// this pays for it. *mf and *va receive what release() frees; the fd stays the caller's. Fails on anything else.
static void attach_one(int device, uint32_t kind, uint32_t flags, int fd, uint64_t size, int32_t node,
                       struct manifest *mf, CUdeviceptr *va, struct timings *t) {
    if (kind > K_VMM_HOST || size == 0 || (flags & ~3u))
        fail("attach of kind %u, flags 0x%x, %llu bytes: not one the C baseline serves (kinds 0-2, flags 1 and 2)", kind,
             flags, (unsigned long long)size);
    struct options o = {.device = device, .cpu_view = (int)(flags & 1), .reg = (int)((flags >> 1) & 1), .repeat = 1};
    if (kind == K_VMM_HOST || o.reg) cuda_context(device);
    memset(mf, 0, sizeof *mf);
    memset(t, 0, sizeof *t);
    *va = 0;
    mf->regions_n = 1;
    mf->regions = xcalloc(1, sizeof *mf->regions);
    mf->regions[0].kind = (uint8_t)kind, mf->regions[0].size = size, mf->regions[0].numa = node;
    mf->regions[0].device = -1, mf->regions[0].fd = fd;
    mf->region_bytes = size;
    if (kind == K_VMM_HOST) mf->vmm_regions = 1, mf->vmm_bytes = size;
    else mf->memfd_bytes = size;
    if (kind == K_VMM_HOST) attach_vmm(&o, mf, t, va);
    else attach_memfd(&o, mf, t);
}

// ---------------------------------------------------------------------------------------------- bench peer

// --bench-peer PATH: this client as a separate process for the JMH AttachBench (jmh/.../CPeer.java), which times
// its PING (cRoundTrip); the benchmark's C baseline of the attach is the library (engram_attach_bench.c).
// Connects to the benchmark's Unix socket at PATH and serves requests there, one at a time, until the
// benchmark closes the connection (then exits 0). Each request is one message of this file's framing
// (u32 payload_length, u32 fd_count, payload, fds by SCM_RIGHTS) with a 24-byte payload:
//   u32 op, u32 kind (0 memfd, 1 memfd-hugetlb, 2 cuda-vmm host), u32 flags (1 CPU view, 2 register),
//   i32 numa node of a cuda-vmm region, u64 size in bytes
// ops: 1 CONTEXT (libcuda, cuInit, primary context; no fd), 2 ATTACH (one fd: the region, attached exactly
// as a protocol import attaches it: the same functions), 3 RELEASE (the last ATTACH's region, and its fd
// closed), 4 PING (nothing: the request/answer cost that every timed ATTACH includes). Each request is
// answered by one message without fds whose payload is a JSON object with the request's own timings.
enum { P_CONTEXT = 1, P_ATTACH, P_RELEASE, P_PING };
#define PEER_REQUEST_BYTES 24

static void peer_reply(int s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void peer_reply(int s, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof text) fail("internal: bench peer reply too long");
    uint8_t header[8];
    uint32_t len = (uint32_t)n, zero = 0;
    memcpy(header, &len, 4), memcpy(header + 4, &zero, 4);
    send_all(s, header, 8, "bench peer reply", 0);
    send_all(s, (const uint8_t *)text, (size_t)n, "bench peer reply", 0);
}

static int bench_peer(const char *path, int device) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) fail_errno("socket", "AF_UNIX, SOCK_STREAM");
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, path, strlen(path));
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) fail_errno("connect", path);
    struct message held;       // the ATTACH request whose fd is attached, until RELEASE
    struct manifest mf;
    CUdeviceptr va = 0;
    int attached = 0;
    memset(&held, 0, sizeof held);
    for (;;) {
        uint8_t probe;
        ssize_t k;
        do k = recv(s, &probe, 1, MSG_PEEK); while (k < 0 && errno == EINTR);
        if (k == 0) break;  // the benchmark is done
        if (k < 0) fail_errno("recv", "bench peer request");
        struct message m;
        recv_message(s, &m, "bench peer request", MAX_PAYLOAD_V1);
        if (m.length != PEER_REQUEST_BYTES) fail_msg(&m, "bench peer request of %u bytes; expected %d", m.length, PEER_REQUEST_BYTES);
        uint32_t op = rd32(m.payload), kind = rd32(m.payload + 4), flags = rd32(m.payload + 8);
        int32_t node = (int32_t)rd32(m.payload + 12);
        uint64_t size = rd64(m.payload + 16);
        size_t want_fds = op == P_ATTACH ? 1 : 0;
        if (m.fds.n != want_fds) fail_msg(&m, "bench peer op %u came with %zu fds; expected %zu", op, m.fds.n, want_fds);
        double t0 = now_ms();
        if (op == P_CONTEXT) {
            double ms = cuda_context(device);
            message_free(&m);
            peer_reply(s, "{\"op\":\"context\",\"context_ms\":%.3f}", ms);
        } else if (op == P_PING) {
            message_free(&m);
            peer_reply(s, "{\"op\":\"ping\"}");
        } else if (op == P_ATTACH) {
            if (attached) fail_msg(&m, "bench peer: ATTACH while a region is still attached (RELEASE first)");
            if (kind == K_VMM_HOST || (flags & 2)) cuda_context(device);  // once, and not timed
            struct timings t;
            t0 = now_ms();
            attach_one(device, kind, flags, m.fds.v[0], size, node, &mf, &va, &t);
            double total = now_ms() - t0;
            held = m;
            attached = 1;
            peer_reply(s, "{\"op\":\"attach\",\"attach_ms\":%.3f,\"import_ms\":%.3f,\"reserve_map_ms\":%.3f,"
                          "\"gpu_access_ms\":%.3f,\"cpu_access_ms\":%.3f,\"mmap_ms\":%.3f,\"register_ms\":%.3f}",
                       total, t.import, t.reserve_map, t.gpu_access, t.cpu_access, t.mmap, t.reg);
        } else if (op == P_RELEASE) {
            message_free(&m);
            if (!attached) fail("bench peer: RELEASE with nothing attached");
            release(&mf, va);  // frees mf's arrays
            va = 0;
            message_free(&held);  // closes the region's fd
            attached = 0;
            peer_reply(s, "{\"op\":\"release\",\"release_ms\":%.3f}", now_ms() - t0);
        } else {
            fail_msg(&m, "bench peer: unknown op %u", op);
        }
    }
    if (attached) {
        release(&mf, va);
        message_free(&held);
    }
    close(s);
    return 0;
}

// ---------------------------------------------------------------------------------------------- main

static const char USAGE[] =
    "usage: engram-attach [--socket TEMPLATE] [--instance NAME] [--device N] [--daemon-uid UID]... [--cpu-view]\n"
    "                     [--register] [--repeat K] [--json] [--verify] [--verify-content SIDECAR] [--wait-ms MS]\n"
    "                     [--ready-line] [--accept-future-write-seal] [--table NAME]...\n"
    "  --socket TEMPLATE  the daemon's socket: a path, or a template with {instance} and {device} (default: the\n"
    "                 environment variable ENGRAM_HOST_SOCKET, else /run/engram-host/{instance}.sock for root,\n"
    "                 $XDG_RUNTIME_DIR/engram-host/{instance}.sock, else /tmp/engram-host-EUID/{instance}.sock)\n"
    "  --instance NAME  the daemon's instance name for {instance} (default 'default')\n"
    "  --device N     GPU ordinal for the CUDA context, access, IMPORT and {device} (default 0)\n"
    "  --daemon-uid UID  also trust a daemon running as UID (repeatable; root's and this euid's always are)\n"
    "  --cpu-view     also give the CPU read access to cuda-vmm host regions (HOST_NUMA)\n"
    "  --register     cuMemHostRegister the memfd mappings (needs a GPU)\n"
    "  --repeat K     connect, import, attach and release K times (default 1)\n"
    "  --json         one JSON object per repetition\n"
    "  --verify       digest every CPU-readable table through its mapping and compare with the manifest\n"
    "  --verify-content SIDECAR  compute the sha256-tree-v1 digest of every CPU-readable table through its mapping\n"
    "                 (memfd; cuda-vmm host with --cpu-view; device tensors are 'not checked') and compare with the\n"
    "                 digest record of `engram-host inspect --write-digests` (version 2 or 1); with version 2 also\n"
    "                 compare each table's engram-digest-v1 with the manifest's; a mismatch or a table the record\n"
    "                 lacks fails (exit 1)\n"
    "  --wait-ms MS   retry IMPORT while the daemon answers NOT_READY, or on a new connection STOPPING (a\n"
    "                 restart), up to MS (default 0)\n"
    "  --ready-line   print 'attached REP' as soon as every region is attached (before verify and release)\n"
    "  --table NAME   attach only the regions that hold the named tables (repeatable, at most 64; default: every\n"
    "                 table): the whole MANIFEST is still received and checked, the other regions' fds are closed\n"
    "                 unmapped; --verify, --verify-content, --cpu-view and --register then apply to the named tables\n"
    "                 alone; a name the daemon does not serve fails (exit 1); `engram-host status` lists the names\n"
    "  --accept-future-write-seal  also accept memfds sealed FUTURE_WRITE instead of WRITE (a daemon of an older\n"
    "                 build; FUTURE_WRITE leaves writable a mapping made before it)\n"
    "       engram-attach --bench-peer PATH [--device N]\n"
    "       engram-attach --self-test-sha256   check SHA-256 and sha256-tree-v1 against known vectors\n"
    "  --bench-peer   serve attach requests of the JMH AttachBench on its socket PATH (see bench_peer)\n";

static long int_arg(int argc, char **argv, int *i, long min, long max) {
    if (*i + 1 >= argc) fail("%s needs a value (see --help)", argv[*i]);
    const char *v = argv[++*i];
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *v == 0 || *end || x < min || x > max)
        fail("%s: '%s' is not an integer in %ld..%ld", argv[*i - 1], v, min, max);
    return x;
}

static int blank(const char *s) {  // NULL, empty or only white space (Java's isBlank, for ASCII)
    for (; s && *s; s++)
        if (!strchr(" \t\n\v\f\r", *s)) return 0;
    return 1;
}

// docs/protocol.md, "Socket path": the template from --socket, else $ENGRAM_HOST_SOCKET, else this euid's default,
// with {instance} and {device} filled in ({device_uuid} would need the driver's UUID of the GPU: refused). The
// result must be absolute and at most 107 bytes. Returns a static buffer. Resolved as the Java SocketPaths does
// (blank sources skipped, an XDG_RUNTIME_DIR with a brace counts as unset, an empty instance is 'default'), except
// that {device} is --device's value, 0 by default, as for everything else here.
static const char *resolve_socket(const char *flag, const char *instance, int device) {
    static char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char prefix[4096] = "", out[8192];
    const char *template, *from;
    for (const char *c = instance; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("._-", *c)))
            fail("--instance '%s' may hold only letters, digits, '.', '_' and '-'", instance);
    if (!*instance) instance = "default";
    const char *env = getenv("ENGRAM_HOST_SOCKET");
    if (!blank(flag)) {
        template = flag, from = "--socket";
    } else if (!blank(env)) {
        template = env, from = "ENGRAM_HOST_SOCKET";
    } else {  // the default: its directory part is literal
        uid_t euid = geteuid();
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        if (euid == 0) {
            snprintf(prefix, sizeof prefix, "/run/engram-host/");
        } else if (xdg && xdg[0] == '/' && !strpbrk(xdg, "{}")) {  // a brace could not be in a template: unset
            size_t n = strlen(xdg);
            while (n > 1 && xdg[n - 1] == '/') n--;
            if (n >= sizeof prefix - 32) fail("XDG_RUNTIME_DIR is %zu bytes long, too long for a socket path", n);
            snprintf(prefix, sizeof prefix, "%.*s%sengram-host/", (int)n, xdg, n > 1 ? "/" : "");
        } else {
            snprintf(prefix, sizeof prefix, "/tmp/engram-host-%u/", (unsigned)euid);
        }
        template = "{instance}.sock", from = "the default socket template";
    }
    size_t n = (size_t)snprintf(out, sizeof out, "%s", prefix);
    for (const char *c = template; *c && n < sizeof out - 1;) {
        const char *brace = *c == '{' ? strchr(c, '}') : NULL;
        if (!brace) {  // a '{' with no '}' after it is literal, like any other byte
            out[n++] = *c++;
            continue;
        }
        size_t len = (size_t)(brace - c - 1);
        const char *name = c + 1;
        if (len == 8 && !strncmp(name, "instance", 8)) {
            n += (size_t)snprintf(out + n, sizeof out - n, "%s", instance);
        } else if (len == 6 && !strncmp(name, "device", 6)) {
            n += (size_t)snprintf(out + n, sizeof out - n, "%d", device);
        } else if (len == 11 && !strncmp(name, "device_uuid", 11)) {
            fail("socket template '%s' (from %s) uses {device_uuid}, the GPU's UUID, which engram-attach does not "
                 "look up; pass the resolved path with --socket", template, from);
        } else {
            fail("socket template '%s' (from %s): unknown placeholder {%.*s}; known: {instance}, {device}, {device_uuid}",
                 template, from, (int)len, name);
        }
        c = brace + 1;
    }
    if (n >= sizeof out - 1) fail("socket template '%s' (from %s) resolves to more than %zu bytes", template, from, sizeof out);
    out[n] = 0;
    if (out[0] != '/') fail("socket path '%s' (from %s) must be absolute", out, from);
    if (n > sizeof path - 1)
        fail("socket path '%s' (from %s) is %zu bytes long, more than %zu, the limit of a Unix socket address", out, from,
             n, sizeof path - 1);
    memcpy(path, out, n + 1);
    return path;
}

#ifndef ENGRAM_ATTACH_LIB
int main(int argc, char **argv) {
    struct options o = {.repeat = 1};
    const char *peer = NULL, *socket_flag = NULL, *instance = "default", *content = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--bench-peer")) {
            if (i + 1 >= argc) fail("--bench-peer needs a value (see --help)");
            peer = argv[++i];
        } else if (!strcmp(a, "--socket")) {
            if (i + 1 >= argc) fail("--socket needs a value (see --help)");
            socket_flag = argv[++i];
        } else if (!strcmp(a, "--instance")) {
            if (i + 1 >= argc) fail("--instance needs a value (see --help)");
            instance = argv[++i];
        } else if (!strcmp(a, "--daemon-uid")) {
            if (o.daemon_uids_n == MAX_DAEMON_UIDS) fail("--daemon-uid: at most %d of them", MAX_DAEMON_UIDS);
            o.daemon_uids[o.daemon_uids_n++] = (uint32_t)int_arg(argc, argv, &i, 0, 4294967294L);
        } else if (!strcmp(a, "--device")) o.device = (int)int_arg(argc, argv, &i, 0, 1023);
        else if (!strcmp(a, "--repeat")) o.repeat = (int)int_arg(argc, argv, &i, 1, 1000000);
        else if (!strcmp(a, "--wait-ms")) o.wait_ms = (int)int_arg(argc, argv, &i, 0, 86400000);
        else if (!strcmp(a, "--cpu-view")) o.cpu_view = 1;
        else if (!strcmp(a, "--register")) o.reg = 1;
        else if (!strcmp(a, "--accept-future-write-seal")) accept_future_write_seal = 1;
        else if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--verify")) o.verify = 1;
        else if (!strcmp(a, "--verify-content")) {
            if (i + 1 >= argc) fail("--verify-content needs a value (see --help)");
            content = argv[++i];
        } else if (!strcmp(a, "--self-test-sha256")) return self_test_sha256();
        else if (!strcmp(a, "--ready-line")) o.ready_line = 1;
        else if (!strcmp(a, "--table")) {
            if (i + 1 >= argc) fail("--table needs a value (see --help)");
            const char *name = argv[++i];
            char b[512];
            if (!*name) fail("--table needs a table's name, not an empty string (`engram-host status` lists them)");
            if (o.tables_n == MAX_SELECT)
                fail("--table: at most %d tables may be named; name fewer, or leave out --table to attach every table",
                     MAX_SELECT);
            for (int k = 0; k < o.tables_n; k++)
                if (!strcmp(o.tables[k], name))
                    fail("--table '%s' is given twice; name each table once", shown(b, sizeof b, name, strlen(name), 80));
            o.tables[o.tables_n++] = name;
        }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else fail("unknown argument '%s' (see --help)", a);
    }
    if (peer) {
        if (socket_flag) fail("--bench-peer and --socket exclude each other");
        if (strlen(peer) >= sizeof(((struct sockaddr_un *)0)->sun_path)) fail("--bench-peer: '%s' is too long", peer);
        if (content) fail("--bench-peer and --verify-content exclude each other");
        if (o.tables_n) fail("--bench-peer and --table exclude each other");
        return bench_peer(peer, o.device);
    }
    if (content) read_sidecar(content, &o.content);  // before connecting: a bad sidecar fails at once
    o.socket = resolve_socket(socket_flag, instance, o.device);
    for (int rep = 1; rep <= o.repeat; rep++) run_once(&o, rep);
    for (size_t i = 0; i < o.content.n; i++) free(o.content.v[i].name);
    free(o.content.v);
    free(o.content.fix);
    return 0;
}
#endif  // ENGRAM_ATTACH_LIB
