package io.engramhost.memfd;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;

/** The client side of the memfd backend: a received memfd mapped read-only and shared. */
public final class ReadOnlyMapping {
    private ReadOnlyMapping() {
    }

    /** Maps all {@code size} bytes of {@code fd} PROT_READ, MAP_SHARED; the Mapping owns the range. */
    public static Mapping map(Fd fd, long size, boolean populate) {
        return Posix.mmap(size, Posix.PROT_READ, Posix.MAP_SHARED | (populate ? Posix.MAP_POPULATE : 0), fd, 0);
    }
}
