// engram-attach's private header: the constants, types and calls its units share. engram-attach is a C client of
// engram-host's wire protocol (docs/protocol.md, versions 2 and 1), written from
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
//
// The units: wire.c (errors, messages with fds, frames and their fields, ERROR, PARTs), manifest.c (the MANIFEST's
// checks, a table's place, --table's selection), attach_memfd.c (seals, mmap, registration, release),
// attach_cuda.c (the driver binding, the cuda-vmm import), digest.c (engram digest v1, SHA-256, sha256-tree-v1),
// sidecar.c (the digest record), verify.c (--verify, --verify-content), session.c (connect, HELLO, IMPORT, one
// repetition and its report), bench_peer.c (JMH's --bench-peer), main.c (arguments, the socket path). The
// constants are tested against docs/protocol-spec.json (test_constants.c, check_spec.py).
#ifndef ENGRAM_ATTACH_H
#define ENGRAM_ATTACH_H
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

enum { T_HELLO = 1, T_WELCOME, T_IMPORT, T_MANIFEST, T_STATUS, T_STATUS_REPLY, T_STOP, T_STOP_ACK, T_ERROR, T_BYE, T_PART };
enum { K_MEMFD = 0, K_MEMFD_HUGETLB = 1, K_VMM_HOST = 2, K_VMM_DEVICE = 3 };
#define ERROR_CODES 11u                  // ERROR_NAMES' length: the codes 1..10 and "?"

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

// The libcuda calls engram-attach makes, bound by cuda_bind (attach_cuda.c).
struct cuda_api {
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
};

struct sha256 { uint32_t h[8]; uint64_t bytes; uint8_t buf[64]; size_t n; };

// ---------------------------------------------------------------------------------------------- messages

struct fds { int *v; size_t n, cap; };

// deadline: now_ms() by which the whole message, its fillers and PARTs included, must have arrived.
struct message { uint8_t *payload; uint32_t length; struct fds fds; double deadline; };

// ---------------------------------------------------------------------------------------------- frame reading

struct reader { const uint8_t *p; size_t len, pos; const char *frame; };


struct str { const char *p; uint32_t n; };

// A connection to the daemon: version is 0 until WELCOME has chosen one.
struct conn { int s; uint16_t version; uint32_t peer_uid; int32_t peer_pid; };

// ---------------------------------------------------------------------------------------------- the manifest

struct dtype { const char *name; unsigned bits; };

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
struct trusted { char *name; size_t n; char hex[65]; uint64_t engram; };  // engram: version 2 only
struct sidecar {
    const char *path; int version; struct trusted *v; size_t n;
    char *fix;                        // "write it again with engram-host inspect --write-digests CHECKPOINT"
};

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
enum { E_NONE, E_OK, E_MISMATCH };
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

#ifdef ENGRAM_ATTACH_LIB
// Built into the benchmarks' in-process library (engram_attach_bench.c), fail() must not end the process that loaded
// it (a JVM): it keeps the message and jumps back to the library call that set lib_escape, which returns an error.
#include <setjmp.h>
extern _Thread_local jmp_buf *lib_escape;
extern _Thread_local char lib_error[1024];
#endif

// ---------------------------------------------------------------------------------------------- the calls, by unit

// digest.c
uint64_t engram_digest(const uint8_t *p, uint64_t len);
void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
void sha256_final(struct sha256 *s, uint8_t out[32]);
void tree_digest(const uint8_t *p, uint64_t len, char out[65]);
int self_test_sha256(void);

// wire.c
extern const char *const TYPE_NAMES[12];
extern const char *const KIND_NAMES[4];
extern const char *const ERROR_NAMES[ERROR_CODES];
extern const char *const STATE_NAMES[4];
void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void fail_errno(const char *call, const char *context) __attribute__((noreturn));
double now_ms(void);
void *xcalloc(size_t n, size_t size);
void fail_msg(struct message *m, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
void recv_message(int s, struct message *m, const char *what, uint32_t limit);
void message_free(struct message *m);
int send_all(int s, const uint8_t *p, size_t len, const char *what, int closed_ok);
int send_frame(int s, uint16_t version, int type, const uint8_t *body, size_t body_len, int closed_ok);
void rfail(const struct reader *r, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
int utf8_valid(const uint8_t *s, size_t n);
struct str str16(struct reader *r, const char *field);
void end_frame(const struct reader *r);
int unsafe_text(struct str s);
int error_frame(struct reader *r, int retry_allowed, const char *when);
const char *type_name(uint16_t type);
uint16_t recv_frame(const struct conn *c, struct message *m, const char *what, uint16_t *version_out);
int open_frame(const struct conn *c, struct message *m, struct reader *r, int expected, int retry_allowed);

// attach_cuda.c
extern struct cuda_api cu;
extern int cuda_ready;
extern CUcontext cuda_primary;
void cu_check(CUresult r, const char *call, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
double cuda_context(int device);
void attach_vmm(const struct options *o, struct manifest *mf, struct timings *t, CUdeviceptr *va);

// manifest.c
extern const struct dtype DTYPES[20];
void parse_manifest(struct message *m, struct reader *r, struct manifest *mf);
uint32_t run_end(const struct manifest *mf, uint32_t region, uint64_t offset, uint64_t bytes, uint64_t *short_by);
const uint8_t *table_host(struct manifest *mf, const struct table *t);
void select_tables(const struct options *o, struct message *m, struct manifest *mf);

// attach_memfd.c
extern int accept_future_write_seal;
void check_memfd(struct message *m, uint32_t i, const struct region *g);
void attach_memfd(const struct options *o, struct manifest *mf, struct timings *t);
void release(struct manifest *mf, CUdeviceptr va);
void attach_one(int device, uint32_t kind, uint32_t flags, int fd, uint64_t size, int32_t node, struct manifest *mf,
                CUdeviceptr *va, struct timings *t);

// sidecar.c
const char *shown(char *out, size_t cap, const char *s, size_t n, size_t max);
void read_sidecar(const char *path, struct sidecar *sc);
const struct trusted *trusted_digest(const struct sidecar *sc, struct str name);

// session.c
void run_once(const struct options *o, int rep);

// verify.c
uint32_t verify_tables(struct manifest *mf);
void verify_content(const struct options *o, struct manifest *mf, struct content_result *cr);
uint32_t content_problems(const struct options *o, const struct manifest *mf, const struct content_result *cr);

// bench_peer.c
int bench_peer(const char *path, int device);

// Little-endian reads (the wire is little-endian, and so is every host this builds for), and a frame's fields.
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }  // x86-64: little-endian
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire is little-endian, and so must this host be");
static inline const uint8_t *take(struct reader *r, size_t n, const char *field) {
    if (r->len - r->pos < n) rfail(r, "truncated: %s needs %zu bytes, %zu left", field, n, r->len - r->pos);
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}
static inline uint8_t u8(struct reader *r, const char *f) { return *take(r, 1, f); }
static inline uint16_t u16(struct reader *r, const char *f) { const uint8_t *p = take(r, 2, f); return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t u32(struct reader *r, const char *f) { return rd32(take(r, 4, f)); }
static inline int32_t i32(struct reader *r, const char *f) { return (int32_t)u32(r, f); }
static inline uint64_t u64(struct reader *r, const char *f) { return rd64(take(r, 8, f)); }

#endif  // ENGRAM_ATTACH_H
