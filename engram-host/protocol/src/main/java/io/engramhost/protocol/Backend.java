package io.engramhost.protocol;

import java.util.Arrays;
import java.util.List;

/**
 * The memory a daemon serves its host tables from, as {@code serve --backend} names it: the one list of
 * backends that the CLI, the daemon's settings and the fingerprint use. Each serves regions of one
 * {@link RegionKind}, whose {@link RegionKind#backend()} is this backend's {@link #wireName()}.
 */
public enum Backend {
    /** Sealed memfds of 4 KiB pages. */
    MEMFD(RegionKind.MEMFD),
    /** Sealed hugetlb memfds (2 MiB pages). */
    MEMFD_HUGETLB(RegionKind.MEMFD_HUGETLB),
    /** CUDA VMM allocations in host memory (HOST_NUMA). */
    CUDA_VMM(RegionKind.VMM_HOST);

    private final RegionKind regionKind;

    Backend(RegionKind regionKind) {
        this.regionKind = regionKind;
    }

    /** The name as the CLI, the WELCOME, the STATUS document and the fingerprint spell it: {@code memfd-hugetlb}. */
    public String wireName() {
        return regionKind.backend();
    }

    /** The kind of the regions this backend serves. */
    public RegionKind regionKind() {
        return regionKind;
    }

    /** Every backend's {@link #wireName()}, in declaration order. */
    public static List<String> wireNames() {
        return Arrays.stream(values()).map(Backend::wireName).toList();
    }

    /** The backend named {@code wireName}; throws naming the allowed values otherwise. */
    public static Backend of(String wireName) {
        for (Backend b : values()) {
            if (b.wireName().equals(wireName)) {
                return b;
            }
        }
        throw new IllegalArgumentException("'" + wireName + "' is not one of " + String.join(", ", wireNames()));
    }

    /** The {@link #wireName()}, so that messages read as the CLI spells it. */
    @Override
    public String toString() {
        return wireName();
    }
}
