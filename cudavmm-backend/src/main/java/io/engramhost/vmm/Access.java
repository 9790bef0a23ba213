package io.engramhost.vmm;

/**
 * How an engine maps imported tables. The GPU gets read-only access by default and read-write when
 * asked; the CPU gets a view only with {@link #cpuView()} (a second cuMemSetAccess, HOST_NUMA, about
 * three times the cost of the GPU's), and with the same protection as the GPU.
 *
 * <p>Read-only is a default, not a seal: any holder of the fd can map the allocation read-write. It
 * protects against an engine's own bugs, not against the engine.
 *
 * @param gpuWrite whether the GPU (and the CPU view) may write
 * @param cpuView  whether the CPU can read the tables at the same addresses
 */
public record Access(boolean gpuWrite, boolean cpuView) {
    /** GPU read-only, no CPU view: what an engine needs to read tables in kernels. */
    public static final Access READ_ONLY = new Access(false, false);
    public static final Access READ_WRITE = new Access(true, false);

    /** The same, plus a CPU view. */
    public Access withCpuView() {
        return new Access(gpuWrite, true);
    }

    @Override
    public String toString() {
        return (gpuWrite ? "read-write" : "read-only") + (cpuView ? " with CPU view" : "");
    }
}
