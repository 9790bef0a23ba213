package io.engramhost.protocol;

/** What a manifest region (one fd) is, and so how a client maps it. Stable wire codes. */
public enum RegionKind {
    /** A sealed memfd of 4 KiB pages: mmap it PROT_READ, MAP_SHARED. */
    MEMFD(0, "memfd"),
    /** A sealed hugetlb memfd: mmap it the same way. */
    MEMFD_HUGETLB(1, "memfd-hugetlb"),
    /** A CUDA VMM allocation in host memory (HOST_NUMA): cuMemImportFromShareableHandle, map, set access. */
    VMM_HOST(2, "cuda-vmm"),
    /** A CUDA VMM allocation in a GPU's memory: imported the same way. */
    VMM_DEVICE(3, "cuda-device"),
    /** Local only, never on the wire: a client's own anonymous memory, loaded from disk as a fallback. */
    DISK(255, "disk");

    private final int code;
    private final String backend;

    RegionKind(int code, String backend) {
        this.code = code;
        this.backend = backend;
    }

    public int code() {
        return code;
    }

    /** The backend name as the CLI spells it. */
    public String backend() {
        return backend;
    }

    public boolean memfd() {
        return this == MEMFD || this == MEMFD_HUGETLB;
    }

    public static RegionKind of(int code) {
        for (RegionKind k : values()) {
            if (k.code == code) {
                return k;
            }
        }
        throw new ProtocolException("MANIFEST: unknown region kind " + code);
    }
}
