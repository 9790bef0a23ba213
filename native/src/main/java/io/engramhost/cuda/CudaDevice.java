package io.engramhost.cuda;

import io.engramhost.util.Bytes;
import java.util.Locale;

/**
 * One GPU as the driver reports it: identity, nearest host NUMA node, and the capabilities the
 * backends depend on.
 *
 * @param ordinal              the CUDA device ordinal
 * @param name                 e.g. {@code NVIDIA H200}
 * @param pciBusId             e.g. {@code 0000:1b:00.0} (lower case, as sysfs writes it)
 * @param uuid                 e.g. {@code GPU-5d1e...}, as nvidia-smi prints it
 * @param hostNumaId           the host NUMA node nearest the GPU; -1 when the system has no NUMA
 * @param computeCapability    e.g. {@code 9.0}
 * @param totalMemory          device memory in bytes
 * @param multiprocessors      SM count
 * @param vmm                  VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
 * @param posixFdHandles       HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
 * @param hostNumaVmm          HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
 * @param readOnlyHostRegister READ_ONLY_HOST_REGISTER_SUPPORTED
 */
public record CudaDevice(int ordinal, String name, String pciBusId, String uuid, int hostNumaId,
        String computeCapability, long totalMemory, int multiprocessors, boolean vmm, boolean posixFdHandles,
        boolean hostNumaVmm, boolean readOnlyHostRegister) {

    /** The sysfs path of the GPU's PCI function, for its numa_node. */
    public String sysfsPath() {
        return "/sys/bus/pci/devices/" + pciBusId.toLowerCase(Locale.ROOT);
    }

    /** {@code GPU 0 (NVIDIA H200, 0000:1b:00.0)}. */
    public String label() {
        return "GPU " + ordinal + " (" + name + ", " + pciBusId + ")";
    }

    @Override
    public String toString() {
        return label() + " " + uuid + " cc " + computeCapability + ", " + Bytes.format(totalMemory) + ", "
                + multiprocessors + " SMs, host NUMA " + hostNumaId + ", vmm=" + vmm + " posixFd=" + posixFdHandles
                + " hostNumaVmm=" + hostNumaVmm + " readOnlyRegister=" + readOnlyHostRegister;
    }
}
