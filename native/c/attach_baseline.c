// attach_baseline: the driver calls of engram-host's attach paths, timed from C, as the floor that
// the Java path (io.engramhost.vmm.VmmImport, io.engramhost.cuda.HostRegistration) is compared to.
//
//   cuda-vmm: cuMemCreate(HOST_NUMA, POSIX fd) of N GiB, export, import, reserve one VA range,
//             map, cuMemSetAccess(GPU, READ); then again with CPU (HOST_NUMA) access as well.
//   memfd:    memfd_create + ftruncate + fill (MAP_POPULATE write) + mmap PROT_READ +
//             cuMemHostRegister(READ_ONLY|DEVICEMAP|PORTABLE) in chunks of at most 64 GiB.
//
// libcuda.so.1 is dlopen'd (never the toolkit's stub). Output: one JSON object per line.
// Usage: attach_baseline [--gib N] [--node N] [--device N] [--no-vmm] [--no-memfd]
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define GIB (1ull << 30)
#define MAX_CHUNK (64ull << 30)

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuGetErrorName)(CUresult, const char **);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
static CUresult (*p_cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
static CUresult (*p_cuMemRelease)(CUmemGenericAllocationHandle);
static CUresult (*p_cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
static CUresult (*p_cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
static CUresult (*p_cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
static CUresult (*p_cuMemAddressFree)(CUdeviceptr, size_t);
static CUresult (*p_cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static CUresult (*p_cuMemUnmap)(CUdeviceptr, size_t);
static CUresult (*p_cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
static CUresult (*p_cuMemHostRegister)(void *, size_t, unsigned);
static CUresult (*p_cuMemHostUnregister)(void *);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void check(CUresult r, const char *call) {
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        if (p_cuGetErrorName) p_cuGetErrorName(r, &name);
        fprintf(stderr, "%s failed: %s (%d)\n", call, name, (int)r);
        printf("{\"error\":\"%s failed: %s (%d)\"}\n", call, name, (int)r);
        exit(1);
    }
}

static void *sym(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "libcuda.so.1 lacks %s\n", name);
        exit(2);
    }
    return f;
}

static void load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("{\"error\":\"libcuda.so.1 not found: %s\"}\n", dlerror());
        exit(2);
    }
#define BIND(var, name) *(void **)(&var) = sym(lib, name)
    BIND(p_cuInit, "cuInit");
    BIND(p_cuGetErrorName, "cuGetErrorName");
    BIND(p_cuDeviceGet, "cuDeviceGet");
    BIND(p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    BIND(p_cuCtxSetCurrent, "cuCtxSetCurrent");
    BIND(p_cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity");
    BIND(p_cuMemCreate, "cuMemCreate");
    BIND(p_cuMemRelease, "cuMemRelease");
    BIND(p_cuMemExportToShareableHandle, "cuMemExportToShareableHandle");
    BIND(p_cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle");
    BIND(p_cuMemAddressReserve, "cuMemAddressReserve");
    BIND(p_cuMemAddressFree, "cuMemAddressFree");
    BIND(p_cuMemMap, "cuMemMap");
    BIND(p_cuMemUnmap, "cuMemUnmap");
    BIND(p_cuMemSetAccess, "cuMemSetAccess");
    BIND(p_cuMemHostRegister, "cuMemHostRegister_v2");
    BIND(p_cuMemHostUnregister, "cuMemHostUnregister");
#undef BIND
}

// One attach of an exported fd: import, reserve + map, GPU access, optionally CPU access.
static void attach(int fd, size_t size, size_t gran, int device, int node, int cpu, double create_s, double export_ms) {
    double t0 = now();
    CUmemGenericAllocationHandle h;
    check(p_cuMemImportFromShareableHandle(&h, (void *)(long)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "cuMemImportFromShareableHandle");
    double t1 = now();
    CUdeviceptr va;
    check(p_cuMemAddressReserve(&va, size, gran, 0, 0), "cuMemAddressReserve");
    check(p_cuMemMap(va, size, 0, h, 0), "cuMemMap");
    double t2 = now();
    CUmemAccessDesc gpu = {{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READ};
    check(p_cuMemSetAccess(va, size, &gpu, 1), "cuMemSetAccess(GPU)");
    double t3 = now();
    if (cpu) {
        CUmemAccessDesc host = {{CU_MEM_LOCATION_TYPE_HOST_NUMA, node}, CU_MEM_ACCESS_FLAGS_PROT_READ};
        check(p_cuMemSetAccess(va, size, &host, 1), "cuMemSetAccess(HOST_NUMA)");
    }
    double t4 = now();
    double gib = (double)size / GIB;
    printf("{\"path\":\"cuda-vmm%s\",\"gib\":%.2f,\"create_s\":%.3f,\"export_ms\":%.3f,\"import_ms\":%.3f,"
           "\"reserve_map_ms\":%.3f,\"gpu_access_ms\":%.3f,\"cpu_access_ms\":%.3f,\"total_ms\":%.3f,"
           "\"ms_per_gib\":%.3f}\n",
           cpu ? "+cpu" : "", gib, create_s, export_ms, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3,
           cpu ? (t4 - t3) * 1e3 : 0.0, (t4 - t0) * 1e3, (t4 - t0) * 1e3 / gib);
    fflush(stdout);
    check(p_cuMemUnmap(va, size), "cuMemUnmap");
    check(p_cuMemAddressFree(va, size), "cuMemAddressFree");
    check(p_cuMemRelease(h), "cuMemRelease(imported)");
}

static void vmm(size_t bytes, int device, int node) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = node;
    size_t gran;
    check(p_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity");
    size_t size = (bytes + gran - 1) / gran * gran;
    double t0 = now();
    CUmemGenericAllocationHandle h;
    check(p_cuMemCreate(&h, size, &prop, 0), "cuMemCreate(HOST_NUMA)");
    double t1 = now();
    int fd = -1;
    check(p_cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "cuMemExportToShareableHandle");
    double t2 = now();
    attach(fd, size, gran, device, node, 0, t1 - t0, (t2 - t1) * 1e3);
    attach(fd, size, gran, device, node, 1, t1 - t0, (t2 - t1) * 1e3);
    close(fd);
    check(p_cuMemRelease(h), "cuMemRelease");
}

static void memfd(size_t bytes) {
    double t0 = now();
    int fd = memfd_create("attach_baseline", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
        perror("memfd_create/ftruncate");
        exit(1);
    }
    void *w = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (w == MAP_FAILED) {
        perror("mmap(MAP_POPULATE)");
        exit(1);
    }
    for (size_t off = 0; off < bytes; off += 4096) ((volatile char *)w)[off] = (char)off;
    munmap(w, bytes);
    double t1 = now();
    void *r = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED) {
        perror("mmap(PROT_READ)");
        exit(1);
    }
    double t2 = now();
    size_t chunks = 0;
    for (size_t off = 0; off < bytes; off += MAX_CHUNK, chunks++) {
        size_t n = bytes - off < MAX_CHUNK ? bytes - off : MAX_CHUNK;
        check(p_cuMemHostRegister((char *)r + off, n,
                                  CU_MEMHOSTREGISTER_READ_ONLY | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE),
              "cuMemHostRegister(READ_ONLY|DEVICEMAP|PORTABLE)");
    }
    double t3 = now();
    double gib = (double)bytes / GIB;
    printf("{\"path\":\"memfd-4k\",\"gib\":%.2f,\"fill_s\":%.3f,\"mmap_ms\":%.3f,\"register_ms\":%.3f,"
           "\"chunks\":%zu,\"ms_per_gib\":%.3f}\n",
           gib, t1 - t0, (t2 - t1) * 1e3, (t3 - t2) * 1e3, chunks, (t3 - t1) * 1e3 / gib);
    fflush(stdout);
    for (size_t off = 0; off < bytes; off += MAX_CHUNK) check(p_cuMemHostUnregister((char *)r + off), "cuMemHostUnregister");
    munmap(r, bytes);
    close(fd);
}

int main(int argc, char **argv) {
    double gib = 16;
    int node = 0, device = 0, do_vmm = 1, do_memfd = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gib") && i + 1 < argc) gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--node") && i + 1 < argc) node = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-vmm")) do_vmm = 0;
        else if (!strcmp(argv[i], "--no-memfd")) do_memfd = 0;
        else {
            fprintf(stderr, "usage: %s [--gib N] [--node N] [--device N] [--no-vmm] [--no-memfd]\n", argv[0]);
            return 2;
        }
    }
    size_t bytes = (size_t)(gib * GIB);
    load();
    double t0 = now();
    check(p_cuInit(0), "cuInit");
    CUdevice dev;
    check(p_cuDeviceGet(&dev, device), "cuDeviceGet");
    CUcontext ctx;
    check(p_cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(p_cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    printf("{\"path\":\"context\",\"init_and_primary_context_ms\":%.3f}\n", (now() - t0) * 1e3);
    fflush(stdout);
    if (do_vmm) vmm(bytes, device, node);
    if (do_memfd) memfd(bytes);
    return 0;
}
