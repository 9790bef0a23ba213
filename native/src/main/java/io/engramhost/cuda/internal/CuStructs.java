package io.engramhost.cuda.internal;

import jnr.ffi.Memory;
import jnr.ffi.Pointer;
import jnr.ffi.Runtime;

/**
 * The driver structs engram-host fills, as zero-filled direct memory at the offsets of CUDA 13's
 * {@code cuda.h} (x86-64).
 *
 * <pre>
 * CUmemLocation        8 B: type u32 @0, id i32 @4
 * CUmemAllocationProp 32 B: type u32 @0 (PINNED=1), requestedHandleTypes u32 @4, location @8,
 *                           win32HandleMetaData ptr @16 (NULL), allocFlags @24 (8 B, zero)
 * CUmemAccessDesc     12 B: location @0, flags u32 @8
 * </pre>
 */
public final class CuStructs {
    public static final int LOCATION_SIZE = 8;
    public static final int ALLOCATION_PROP_SIZE = 32;
    public static final int ACCESS_DESC_SIZE = 12;

    public static final int PROP_TYPE_OFFSET = 0;
    public static final int PROP_HANDLE_TYPES_OFFSET = 4;
    public static final int PROP_LOCATION_OFFSET = 8;
    public static final int PROP_WIN32_META_OFFSET = 16;
    public static final int PROP_ALLOC_FLAGS_OFFSET = 24;
    public static final int ACCESS_LOCATION_OFFSET = 0;
    public static final int ACCESS_FLAGS_OFFSET = 8;

    /** CU_MEM_ALLOCATION_TYPE_PINNED. */
    public static final int ALLOCATION_TYPE_PINNED = 1;

    public static final Runtime RUNTIME = Runtime.getSystemRuntime();

    private CuStructs() {
    }

    /** Zero-filled direct memory of {@code bytes}. */
    public static Pointer zeroed(int bytes) {
        return Memory.allocateDirect(RUNTIME, bytes, true);
    }

    /** A CUmemAllocationProp for a pinned allocation at (locationType, locationId). */
    public static Pointer allocationProp(int locationType, int locationId, int handleTypes) {
        Pointer p = zeroed(ALLOCATION_PROP_SIZE);
        p.putInt(PROP_TYPE_OFFSET, ALLOCATION_TYPE_PINNED);
        p.putInt(PROP_HANDLE_TYPES_OFFSET, handleTypes);
        p.putInt(PROP_LOCATION_OFFSET, locationType);
        p.putInt(PROP_LOCATION_OFFSET + 4, locationId);
        return p;
    }

    /** An array of CUmemAccessDesc, one per (type, id, flags) triple. */
    public static Pointer accessDescs(int[] types, int[] ids, int[] flags) {
        Pointer p = zeroed(ACCESS_DESC_SIZE * types.length);
        for (int i = 0; i < types.length; i++) {
            int at = i * ACCESS_DESC_SIZE;
            p.putInt(at + ACCESS_LOCATION_OFFSET, types[i]);
            p.putInt(at + ACCESS_LOCATION_OFFSET + 4, ids[i]);
            p.putInt(at + ACCESS_FLAGS_OFFSET, flags[i]);
        }
        return p;
    }
}
