package io.engramhost.numa;

import io.engramhost.os.Errno;
import io.engramhost.os.Mapping;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.os.Syscall;
import java.lang.ref.Reference;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;
import jnr.ffi.Runtime;

/**
 * Applies a {@link NumaPolicy} to a range of this process's memory with mbind, and reads it back
 * with get_mempolicy. Apply before the first touch: pages already present stay where they are
 * unless {@link #MPOL_MF_MOVE} is given. On a shared mapping of a memfd the policy is set on the
 * file, so every later mapping of it allocates by the same policy.
 */
public final class Numa {
    /** mbind flag: fail (EIO) when existing pages do not follow the policy. */
    public static final int MPOL_MF_STRICT = 1;
    /** mbind flag: move existing pages of this process to follow the policy. */
    public static final int MPOL_MF_MOVE = 2;
    static final int MPOL_F_NODE = 1;
    static final int MPOL_F_ADDR = 2;
    /** Bits in a nodemask read back by get_mempolicy: the kernel's largest MAX_NUMNODES. */
    private static final int READ_MASK_BITS = 1024;
    static final Runtime RUNTIME = Runtime.getSystemRuntime();

    private Numa() {
    }

    /** Applies {@code policy} to the whole of {@code mapping}. */
    public static void apply(Mapping mapping, NumaPolicy policy) {
        apply(mapping.address(), mapping.length(), policy, 0);
    }

    /** mbind({@code address}, {@code length}, policy) with no flags: for memory not yet touched. */
    public static void apply(long address, long length, NumaPolicy policy) {
        apply(address, length, policy, 0);
    }

    /**
     * mbind with {@code flags} (0, or {@link #MPOL_MF_MOVE} and {@link #MPOL_MF_STRICT}). The policy must be
     * validated: interleave over "all nodes" has no nodemask until {@link NumaPolicy#validate} names them.
     */
    public static void apply(long address, long length, NumaPolicy policy, int flags) {
        checkRange(address, length, "mbind");
        List<Integer> nodes = policy.nodes();
        if (policy.mode() != NumaPolicy.MPOL_DEFAULT && nodes.isEmpty()) {
            throw new IllegalArgumentException("mbind: policy " + policy + " names no nodes; validate it against a Topology first");
        }
        int words = nodes.isEmpty() ? 0 : nodes.stream().mapToInt(Integer::intValue).max().orElseThrow() / 64 + 1;
        Pointer mask = words == 0 ? null : Memory.allocateDirect(RUNTIME, words * 8L, true);
        for (int node : nodes) {
            mask.putLong(node / 64 * 8L, mask.getLong(node / 64 * 8L) | 1L << (node % 64));
        }
        long maxnode = words == 0 ? 0 : words * 64L + 1; // the kernel drops one bit from maxnode
        long r = Posix.syscallErrno(Syscall.MBIND, address, length, policy.mode(),
                mask == null ? 0 : mask.address(), maxnode, flags);
        Reference.reachabilityFence(mask);
        if (r < 0) {
            throw failure("mbind", "mbind(0x" + Long.toHexString(address) + ", len=" + length + ", " + policy
                    + (flags == 0 ? "" : ", flags=" + flags) + ")", (int) -r);
        }
    }

    /** The policy in force at {@code address} (get_mempolicy with MPOL_F_ADDR). */
    public static NumaPolicy policyAt(long address) {
        Pointer mode = Memory.allocateDirect(RUNTIME, 8, true);
        Pointer mask = Memory.allocateDirect(RUNTIME, READ_MASK_BITS / 8, true);
        long r = Posix.syscallErrno(Syscall.GET_MEMPOLICY, mode.address(), mask.address(), READ_MASK_BITS,
                address, MPOL_F_ADDR, 0);
        if (r < 0) {
            throw failure("get_mempolicy", "get_mempolicy(0x" + Long.toHexString(address) + ", MPOL_F_ADDR)", (int) -r);
        }
        List<Integer> nodes = new ArrayList<>();
        for (int bit = 0; bit < READ_MASK_BITS; bit++) {
            if ((mask.getLong(bit / 64 * 8L) & 1L << (bit % 64)) != 0) {
                nodes.add(bit);
            }
        }
        int m = mode.getInt(0) & 0xff; // high bits are mode flags (MPOL_F_STATIC_NODES...)
        if (m == NumaPolicy.MPOL_DEFAULT) {
            return NumaPolicy.none();
        }
        if (m == NumaPolicy.MPOL_BIND && nodes.size() == 1) {
            return NumaPolicy.bind(nodes.get(0));
        }
        if (m == NumaPolicy.MPOL_PREFERRED && nodes.size() == 1) {
            return NumaPolicy.preferred(nodes.get(0));
        }
        if (m == NumaPolicy.MPOL_INTERLEAVE && !nodes.isEmpty()) {
            return NumaPolicy.interleave(nodes);
        }
        throw new NumaException("memory at 0x" + Long.toHexString(address) + " has policy mode " + m + " over nodes "
                + CpuList.format(nodes) + ", which engram-host does not use");
    }

    /**
     * Whether this process may call mbind and move_pages at all: empty when it may, else why not (a
     * container's seccomp profile, a missing capability, a kernel without NUMA). Probes a scratch page.
     */
    public static Optional<String> probe() {
        try (Mapping page = Posix.mmapAnonymous(Posix.pageSize(), "NUMA probe page")) {
            apply(page.address(), page.length(), NumaPolicy.none());
            Placement.verify(page.address(), page.length(), Posix.pageSize());
            return Optional.empty();
        } catch (NativeException e) {
            return Optional.of(e.getMessage());
        }
    }

    static void checkRange(long address, long length, String call) {
        if (address == 0 || address % Posix.pageSize() != 0) {
            throw new IllegalArgumentException(call + ": address 0x" + Long.toHexString(address)
                    + " is not page-aligned (" + Posix.pageSize() + ")");
        }
        if (length <= 0) {
            throw new IllegalArgumentException(call + ": length must be positive, was " + length);
        }
    }

    /** A failed NUMA syscall, with what the errno means for engram-host. */
    static NativeException failure(String syscall, String call, int errno) {
        String hint;
        switch (errno) {
            case Errno.EPERM:
                hint = "the process lacks CAP_SYS_NICE or a seccomp profile forbids " + syscall
                        + " (as in many containers); --numa none avoids it";
                break;
            case Errno.ENOSYS:
                hint = "the kernel has no NUMA support or a seccomp profile forbids " + syscall
                        + "; --numa none avoids it";
                break;
            case Errno.EINVAL:
                hint = "a node is not online, or the range is not page-aligned (a whole number of huge pages for hugetlb)";
                break;
            case Errno.EFAULT:
                hint = "part of the range is not mapped";
                break;
            case Errno.EIO:
                hint = "pages already touched could not be moved to follow the policy";
                break;
            default:
                hint = null;
        }
        return new NativeException(call, errno, hint);
    }
}
