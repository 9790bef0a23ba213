// engram-attach: libcuda, dlopen'd when a step needs it (types as CUDA 13's cuda.h has them, no cuda.h needed), and
// the cuda-vmm import of docs/protocol.md, "How to map a region".
#include "engram_attach.h"

struct cuda_api cu;
int cuda_ready;                 // context retained and current
CUcontext cuda_primary;         // the device's primary context, once retained
static size_t vmm_granularity;  // of a POSIX-fd allocation on the device

void cu_check(CUresult r, const char *call, const char *fmt, ...) {
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
double cuda_context(int device) {
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

void attach_vmm(const struct options *o, struct manifest *mf, struct timings *t, CUdeviceptr *va) {
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
