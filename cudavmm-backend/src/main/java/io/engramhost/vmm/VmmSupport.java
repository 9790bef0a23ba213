package io.engramhost.vmm;

import io.engramhost.cuda.CudaDevice;
import java.util.ArrayList;
import java.util.List;

/**
 * Checks, before anything is created, that a GPU has what the cuda-vmm backend needs: virtual
 * memory management, POSIX fd handles and, for host tables, HOST_NUMA allocations.
 */
public final class VmmSupport {
    private VmmSupport() {
    }

    /** The capabilities host (HOST_NUMA) tables need that {@code device} lacks; empty when none. */
    public static List<String> missingForHostTables(CudaDevice device) {
        List<String> missing = missingForDeviceTables(device);
        if (!device.hostNumaVmm()) {
            missing.add("HOST_NUMA virtual memory management (CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0)");
        }
        return missing;
    }

    /** The capabilities device tables need that {@code device} lacks; empty when none. */
    public static List<String> missingForDeviceTables(CudaDevice device) {
        List<String> missing = new ArrayList<>();
        if (!device.vmm()) {
            missing.add("virtual memory management (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0)");
        }
        if (!device.posixFdHandles()) {
            missing.add("POSIX fd handles (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 0)");
        }
        return missing;
    }

    /** @throws VmmUnsupportedException naming each missing capability and pointing to {@code --backend memfd} */
    public static void check(CudaDevice device) {
        fail(device, "host tables", missingForHostTables(device));
    }

    /** As {@link #check}, for tables in device memory. */
    public static void checkDevice(CudaDevice device) {
        fail(device, "device tables", missingForDeviceTables(device));
    }

    private static void fail(CudaDevice device, String what, List<String> missing) {
        if (!missing.isEmpty()) {
            throw new VmmUnsupportedException(device.label() + " cannot hold cuda-vmm " + what + ": it lacks "
                    + String.join(" and ", missing) + ". Use --backend memfd instead.");
        }
    }
}
