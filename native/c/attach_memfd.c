// engram-attach: memfd regions (docs/protocol.md, "How to map a region"): the seals and size checked, mmap read-only,
// cuMemHostRegister with --register; the release of every region; one region attached without the protocol (JMH).
#include "engram_attach.h"

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
int accept_future_write_seal;

void check_memfd(struct message *m, uint32_t i, const struct region *g) {
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

void attach_memfd(const struct options *o, struct manifest *mf, struct timings *t) {
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

void release(struct manifest *mf, CUdeviceptr va) {
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

// ---------------------------------------------------------------------------------------------- one region, no protocol

// Attaches one region fd as a protocol import attaches it (attach_vmm, attach_memfd: the same calls), for the C
// baselines of JMH's AttachBench: the bench peer below and the in-process library (engram_attach_bench.c). kind is
// K_MEMFD, K_MEMFD_HUGETLB or K_VMM_HOST; flags: 1 CPU view (cuda-vmm host), 2 register (memfd); node: the NUMA node
// of a cuda-vmm host region's CPU view. The CUDA context must be made first (cuda_context) where one is needed, or
// this pays for it. *mf and *va receive what release() frees; the fd stays the caller's. Fails on anything else.
void attach_one(int device, uint32_t kind, uint32_t flags, int fd, uint64_t size, int32_t node,
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
