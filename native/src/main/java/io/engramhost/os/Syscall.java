package io.engramhost.os;

import java.util.Locale;

/**
 * The system calls engram-host makes by number, through {@code syscall(2)}, because glibc has no
 * wrapper for them (or had none in the glibc versions engram-host supports). The numbers come from the
 * kernel's headers: {@code asm/unistd_64.h} for x86-64, {@code asm-generic/unistd.h} for aarch64;
 * a test pins each one to the header where the header is installed.
 */
public enum Syscall {
    //             x86_64  aarch64
    MBIND(237, 235),
    SET_MEMPOLICY(238, 237),
    GET_MEMPOLICY(239, 236),
    MOVE_PAGES(279, 239),
    PIDFD_OPEN(434, 434),
    PRCTL(157, 167);

    private final long x86_64;
    private final long aarch64;

    Syscall(long x86_64, long aarch64) {
        this.x86_64 = x86_64;
        this.aarch64 = aarch64;
    }

    /**
     * The number on this JVM's architecture.
     *
     * @throws UnsupportedOperationException on an architecture other than x86-64 and aarch64, naming it
     */
    public long number() {
        return number(Arch.current());
    }

    /** The number on {@code arch}. */
    public long number(Arch arch) {
        switch (arch) {
            case X86_64:
                return x86_64;
            case AARCH64:
                return aarch64;
            default:
                throw new IllegalStateException("no syscall numbers for " + arch);
        }
    }

    /** The kernel's name, as in {@code __NR_mbind}: {@code mbind}. */
    public String kernelName() {
        return name().toLowerCase(Locale.ROOT);
    }
}
