package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.engramhost.cuda.internal.CuStructs;
import jnr.ffi.Pointer;
import org.junit.jupiter.api.Test;

/** The struct layouts of cuda.h (CUDA 13, x86-64), byte by byte. */
class CuStructsTest {
    @Test
    void shouldLayOutAllocationPropAsCudaH() {
        Pointer p = CuStructs.allocationProp(Location.TYPE_HOST_NUMA, 5, MemHandle.HANDLE_TYPE_POSIX_FD);
        assertEquals(32, CuStructs.ALLOCATION_PROP_SIZE);
        assertEquals(1, p.getInt(0), "type PINNED @0");
        assertEquals(1, p.getInt(4), "requestedHandleTypes POSIX_FD @4");
        assertEquals(3, p.getInt(8), "location.type HOST_NUMA @8");
        assertEquals(5, p.getInt(12), "location.id @12");
        assertEquals(0L, p.getLong(16), "win32HandleMetaData NULL @16");
        assertEquals(0L, p.getLong(24), "allocFlags zero @24");
    }

    @Test
    void shouldLayOutAccessDescriptorsTwelveBytesApart() {
        Pointer p = CuStructs.accessDescs(new int[] {1, 3}, new int[] {0, 2}, new int[] {1, 3});
        assertEquals(1, p.getInt(0));
        assertEquals(0, p.getInt(4));
        assertEquals(1, p.getInt(8));
        assertEquals(3, p.getInt(12));
        assertEquals(2, p.getInt(16));
        assertEquals(3, p.getInt(20));
    }

    @Test
    void shouldPointEachKernelParameterAtItsValue() {
        Pointer[] params = new KernelArgs().add(0x1122334455667788L).addInt(-7).add(42).toParams();
        Pointer values = params[1];
        assertEquals(values.address(), params[0].getAddress(0));
        assertEquals(values.address() + 8, params[0].getAddress(8));
        assertEquals(0x1122334455667788L, Patterns.MEMORY.getLong(params[0].getAddress(0)));
        assertEquals(-7, Patterns.MEMORY.getInt(params[0].getAddress(8)));
        assertEquals(42L, Patterns.MEMORY.getLong(params[0].getAddress(16)));
    }
}
