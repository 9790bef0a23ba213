package io.engramhost.cuda;

import static io.engramhost.cuda.Cuda.check;

import io.engramhost.cuda.internal.CuStructs;
import io.engramhost.cuda.internal.LibCuda;
import java.util.Locale;
import jnr.ffi.Pointer;

/** Reads a {@link CudaDevice} from the driver's attributes. */
final class DeviceQuery {
    static final int ATTR_MULTIPROCESSOR_COUNT = 16;
    static final int ATTR_COMPUTE_CAPABILITY_MAJOR = 75;
    static final int ATTR_COMPUTE_CAPABILITY_MINOR = 76;
    static final int ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102;
    static final int ATTR_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103;
    static final int ATTR_READ_ONLY_HOST_REGISTER_SUPPORTED = 113;
    static final int ATTR_HOST_NUMA_ID = 134;
    static final int ATTR_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 141;

    private DeviceQuery() {
    }

    static CudaDevice query(LibCuda lib, int ordinal) {
        Pointer out = CuStructs.zeroed(8);
        check(lib.cuDeviceGet(out, ordinal), "cuDeviceGet(" + ordinal + ")");
        int dev = out.getInt(0);

        Pointer nameBuf = CuStructs.zeroed(256);
        check(lib.cuDeviceGetName(nameBuf, 256, dev), "cuDeviceGetName(GPU " + ordinal + ")");
        String name = nameBuf.getString(0);
        Pointer bus = CuStructs.zeroed(32);
        check(lib.cuDeviceGetPCIBusId(bus, 32, dev), "cuDeviceGetPCIBusId(GPU " + ordinal + ")");
        String pciBusId = bus.getString(0).toLowerCase(Locale.ROOT);
        Pointer uuid = CuStructs.zeroed(16);
        check(lib.cuDeviceGetUuid_v2(uuid, dev), "cuDeviceGetUuid_v2(GPU " + ordinal + ")");
        Pointer mem = CuStructs.zeroed(8);
        check(lib.cuDeviceTotalMem_v2(mem, dev), "cuDeviceTotalMem(GPU " + ordinal + ")");

        return new CudaDevice(ordinal, name, pciBusId, formatUuid(uuid), attribute(lib, dev, ATTR_HOST_NUMA_ID),
                attribute(lib, dev, ATTR_COMPUTE_CAPABILITY_MAJOR) + "." + attribute(lib, dev, ATTR_COMPUTE_CAPABILITY_MINOR),
                mem.getLong(0), attribute(lib, dev, ATTR_MULTIPROCESSOR_COUNT),
                attribute(lib, dev, ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0,
                attribute(lib, dev, ATTR_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) != 0,
                attribute(lib, dev, ATTR_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0,
                attribute(lib, dev, ATTR_READ_ONLY_HOST_REGISTER_SUPPORTED) != 0);
    }

    /** An attribute's value; an attribute this driver does not know reads as 0 (-1 for the NUMA id). */
    static int attribute(LibCuda lib, int dev, int attribute) {
        Pointer out = CuStructs.zeroed(4);
        int r = lib.cuDeviceGetAttribute(out, attribute, dev);
        if (r == CudaErrors.INVALID_VALUE) {
            return attribute == ATTR_HOST_NUMA_ID ? -1 : 0;
        }
        check(r, "cuDeviceGetAttribute(" + attribute + ", GPU " + dev + ")");
        return out.getInt(0);
    }

    /** {@code GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}, as nvidia-smi prints a CUuuid. */
    static String formatUuid(Pointer uuid) {
        StringBuilder sb = new StringBuilder("GPU-");
        for (int i = 0; i < 16; i++) {
            if (i == 4 || i == 6 || i == 8 || i == 10) {
                sb.append('-');
            }
            sb.append(String.format(Locale.ROOT, "%02x", uuid.getByte(i) & 0xff));
        }
        return sb.toString();
    }
}
