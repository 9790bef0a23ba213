// Kernels that engram-host's GPU tests and benchmarks launch through the driver API
// (cuModuleLoadData + cuLaunchKernel, see io.engramhost.cuda.GpuKernels). Built to PTX by
// native/Makefile; the PTX is committed as a resource so the Maven build needs no nvcc.
//
// All kernels take plain device addresses: a cuMemMap'd VMM range, a cuMemHostRegister'd host
// range or a cuMemAlloc'd buffer read the same. Launch with blockDim a multiple of 32.
#include <stdint.h>

#define ENGRAM_GOLDEN 0x9E3779B97F4A7C15ull

// Word i of a buffer as it enters the checksum: rotated left by i mod 64, xor i * golden ratio.
// io.engramhost.cuda.GpuChecksum.mix is the same function in Java.
__device__ __forceinline__ uint64_t engram_mix(uint64_t w, uint64_t i) {
    unsigned r = (unsigned)(i & 63);
    uint64_t rot = (w << r) | (w >> ((64u - r) & 63u));
    return rot ^ (i * ENGRAM_GOLDEN);
}

__device__ __forceinline__ unsigned long long engram_warp_sum(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
}

__device__ __forceinline__ unsigned long long engram_warp_xor(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        v ^= __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
}

// checksum = length + sum over 8-byte little-endian words i of engram_mix(word_i, i) (mod 2^64);
// the last length % 8 bytes form one more word, zero-padded. base must be 8-byte aligned.
// *out must be zero before the launch; it receives the checksum.
extern "C" __global__ void engram_checksum(const uint8_t* __restrict__ base, uint64_t length,
                                           unsigned long long* __restrict__ out) {
    const uint64_t* words = (const uint64_t*)base;
    const uint64_t nwords = length >> 3;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long acc = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride) {
        acc += engram_mix(words[i], i);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned tail = (unsigned)(length & 7);
        if (tail != 0) {
            uint64_t w = 0;
            for (unsigned k = 0; k < tail; k++) {
                w |= (uint64_t)base[nwords * 8 + k] << (8 * k);
            }
            acc += engram_mix(w, nwords);
        }
        acc += length;
    }
    acc = engram_warp_sum(acc);
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(out, acc);
    }
}

// Sequential read for bandwidth: XOR of every 8-byte word of n16 16-byte units (16-byte loads).
// base must be 16-byte aligned; *out must be zero before the launch.
extern "C" __global__ void engram_read_seq(const ulonglong2* __restrict__ base, uint64_t n16,
                                           unsigned long long* __restrict__ out) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long acc = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        ulonglong2 v = base[i];
        acc ^= v.x ^ v.y;
    }
    acc = engram_warp_xor(acc);
    if ((threadIdx.x & 31) == 0) {
        atomicXor(out, acc);
    }
}

// Random row gather: out row r = table row row_ids[r], row_bytes each; one warp per row. Rows whose
// id is >= table_rows are left untouched and counted in *bad.
extern "C" __global__ void engram_gather(const uint8_t* __restrict__ table, uint64_t table_rows,
                                         uint32_t row_bytes, const uint64_t* __restrict__ row_ids,
                                         uint64_t count, uint8_t* __restrict__ out,
                                         unsigned long long* __restrict__ bad) {
    const uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const uint64_t warps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    const unsigned lane = threadIdx.x & 31;
    const bool wide = (row_bytes & 7) == 0 && ((uintptr_t)table & 7) == 0 && ((uintptr_t)out & 7) == 0;
    for (uint64_t r = warp; r < count; r += warps) {
        const uint64_t id = row_ids[r];
        if (id >= table_rows) {
            if (lane == 0) {
                atomicAdd(bad, 1ull);
            }
            continue;
        }
        const uint8_t* src = table + id * row_bytes;
        uint8_t* dst = out + r * row_bytes;
        if (wide) {
            const uint32_t n = row_bytes >> 3;
            for (uint32_t k = lane; k < n; k += 32) {
                ((uint64_t*)dst)[k] = ((const uint64_t*)src)[k];
            }
        } else {
            for (uint32_t k = lane; k < row_bytes; k += 32) {
                dst[k] = src[k];
            }
        }
    }
}
