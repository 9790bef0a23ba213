package io.engramhost.cuda.internal;

import jnr.ffi.Pointer;

/**
 * The CUDA driver calls engram-host makes, bound in {@code libcuda.so.1} under their versioned
 * names (the unversioned names are the old ABI). Every call returns a CUresult; 0 is success.
 * Handles, device pointers and sizes are {@code long}; out-parameters are {@link Pointer}s to
 * zero-filled direct memory. Use {@link io.engramhost.cuda.Cuda}, which checks every result.
 */
public interface LibCuda {
    int cuInit(int flags);

    int cuDriverGetVersion(Pointer version);

    int cuGetErrorName(int error, Pointer name);

    int cuDeviceGet(Pointer device, int ordinal);

    int cuDeviceGetCount(Pointer count);

    int cuDeviceGetAttribute(Pointer value, int attribute, int device);

    int cuDeviceGetPCIBusId(Pointer busId, int length, int device);

    int cuDeviceGetUuid_v2(Pointer uuid, int device);

    int cuDeviceGetName(Pointer name, int length, int device);

    int cuDeviceTotalMem_v2(Pointer bytes, int device);

    int cuDevicePrimaryCtxRetain(Pointer context, int device);

    int cuDevicePrimaryCtxRelease_v2(int device);

    int cuCtxSetCurrent(long context);

    int cuCtxSynchronize();

    int cuMemGetInfo_v2(Pointer free, Pointer total);

    // virtual memory management

    int cuMemGetAllocationGranularity(Pointer granularity, Pointer prop, int option);

    int cuMemCreate(Pointer handle, long size, Pointer prop, long flags);

    int cuMemRelease(long handle);

    int cuMemGetAllocationPropertiesFromHandle(Pointer prop, long handle);

    int cuMemExportToShareableHandle(Pointer shareableHandle, long handle, int handleType, long flags);

    /** {@code osHandle} is the fd itself, by value (the C parameter is a {@code void*}). */
    int cuMemImportFromShareableHandle(Pointer handle, long osHandle, int handleType);

    int cuMemAddressReserve(Pointer address, long size, long alignment, long fixedAddress, long flags);

    int cuMemAddressFree(long address, long size);

    int cuMemMap(long address, long size, long offset, long handle, long flags);

    int cuMemUnmap(long address, long size);

    int cuMemSetAccess(long address, long size, Pointer descriptors, long count);

    // pinned host memory

    int cuMemHostRegister_v2(long address, long bytes, int flags);

    int cuMemHostUnregister(long address);

    int cuMemHostGetDevicePointer_v2(Pointer devicePointer, long hostAddress, int flags);

    /** Exported without a version suffix ({@code void **pp, size_t bytesize, unsigned int Flags}). */
    int cuMemHostAlloc(Pointer hostAddress, long bytes, int flags);

    int cuMemFreeHost(long hostAddress);

    // device memory

    int cuMemAlloc_v2(Pointer devicePointer, long bytes);

    int cuMemFree_v2(long devicePointer);

    int cuMemcpyHtoD_v2(long dst, long srcHost, long bytes);

    int cuMemcpyDtoH_v2(long dstHost, long src, long bytes);

    int cuMemcpyDtoD_v2(long dst, long src, long bytes);

    int cuMemsetD8_v2(long dst, byte value, long count);

    // modules and kernels

    int cuModuleLoadData(Pointer module, Pointer image);

    int cuModuleUnload(long module);

    int cuModuleGetFunction(Pointer function, long module, String name);
}
