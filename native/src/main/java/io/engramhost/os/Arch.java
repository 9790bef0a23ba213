package io.engramhost.os;

import java.util.Locale;

/**
 * The CPU architectures engram-host runs on: x86-64 and aarch64 (Grace), both LP64 Linux. What
 * differs between them and matters here is the syscall numbers ({@link Syscall}) and the seccomp
 * audit arch. The structs passed through JNR (msghdr, iovec, cmsghdr, sockaddr_un, ucred, pollfd,
 * rlimit) and the flag values used ({@code O_*}, {@code MAP_*}, {@code SOCK_*}, {@code MSG_*},
 * {@code F_*} seals, errno) are the same on both: aarch64 uses the asm-generic values, which x86-64
 * shares for every constant engram-host uses. The page size is not the same (aarch64 kernels use 4, 16
 * or 64 KiB pages): ask {@link Posix#pageSize()}.
 */
public enum Arch {
    X86_64(0xC000003E),
    AARCH64(0xC00000B7);

    private static final String OS_ARCH = System.getProperty("os.arch");
    private static final Arch CURRENT = lookup(OS_ARCH);

    private final int auditArch;

    Arch(int auditArch) {
        this.auditArch = auditArch;
    }

    /**
     * The architecture of this JVM.
     *
     * @throws UnsupportedOperationException naming {@code os.arch} on any other architecture
     */
    public static Arch current() {
        if (CURRENT == null) {
            throw unsupported(OS_ARCH);
        }
        return CURRENT;
    }

    /**
     * The architecture a JVM's {@code os.arch} names: {@code amd64} or {@code x86_64}, and {@code aarch64}.
     *
     * @throws UnsupportedOperationException naming {@code osArch} for any other value
     */
    public static Arch of(String osArch) {
        Arch a = lookup(osArch);
        if (a == null) {
            throw unsupported(osArch);
        }
        return a;
    }

    private static Arch lookup(String osArch) {
        String a = osArch == null ? "" : osArch.toLowerCase(Locale.ROOT);
        switch (a) {
            case "amd64":
            case "x86_64":
                return X86_64;
            case "aarch64":
                return AARCH64;
            default:
                return null;
        }
    }

    private static UnsupportedOperationException unsupported(String osArch) {
        return new UnsupportedOperationException("engram-host runs on x86_64 (amd64) and aarch64 only; this JVM's"
                + " os.arch is '" + osArch + "', whose syscall numbers it does not know");
    }

    /** {@code O_DIRECT}: 040000 on x86-64, 0200000 on aarch64 (asm-generic and arm64 differ here). */
    public int oDirect() {
        return this == X86_64 ? 0x4000 : 0x10000;
    }

    /** The AUDIT_ARCH_* value a seccomp filter sees in {@code seccomp_data.arch}. */
    public int auditArch() {
        return auditArch;
    }

    /** The kernel's name: {@code x86_64}, {@code aarch64}. */
    @Override
    public String toString() {
        return name().toLowerCase(Locale.ROOT);
    }
}
