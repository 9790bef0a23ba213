package io.engramhost.numa;

import io.engramhost.os.Arch;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.os.Syscall;
import java.lang.ref.Reference;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicReference;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;
import jnr.ffi.Runtime;
import org.junit.jupiter.api.Assumptions;

/**
 * Runs code on a fresh thread under a seccomp filter that fails chosen syscalls with a chosen errno,
 * as Docker's default profile fails mbind and move_pages with EPERM. Filters are per thread: the rest
 * of the JVM is untouched, and the filter ends with the thread.
 */
final class SeccompThread {
    private static final int PR_SET_NO_NEW_PRIVS = 38;
    private static final int PR_SET_SECCOMP = 22;
    private static final int SECCOMP_MODE_FILTER = 2;
    private static final int SECCOMP_RET_ALLOW = 0x7fff0000;
    private static final int SECCOMP_RET_ERRNO = 0x00050000;
    private static final short BPF_LD_W_ABS = 0x20;
    private static final short BPF_JEQ_K = 0x15;
    private static final short BPF_RET_K = 0x06;

    private SeccompThread() {
    }

    /** {@code body}'s result or exception, run where each syscall in {@code denied} fails with its errno. */
    static <T> Outcome<T> call(Map<Syscall, Integer> denied, Callable<T> body) throws InterruptedException {
        AtomicReference<Outcome<T>> out = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                install(denied);
            } catch (NativeException e) {
                out.set(new Outcome<>(null, null, "cannot install a seccomp filter here: " + e.getMessage()));
                return;
            }
            try {
                out.set(new Outcome<>(body.call(), null, null));
            } catch (Exception e) {
                out.set(new Outcome<>(null, e, null));
            }
        }, "seccomp-denied");
        t.start();
        t.join();
        Outcome<T> o = out.get();
        if (o.skipCause != null) {
            Assumptions.abort(o.skipCause);
        }
        return o;
    }

    /** What the body returned or threw; a filter that could not be installed aborts the test. */
    record Outcome<T>(T value, Exception thrown, String skipCause) {
    }

    /** One deny rule per syscall, one errno each; everything else allowed; other architectures allowed. */
    private static void install(Map<Syscall, Integer> denied) {
        int k = denied.size();
        Runtime rt = Runtime.getSystemRuntime();
        Pointer prog = Memory.allocateDirect(rt, 8L * (3 + 2 * k + 1), true);
        int i = 0;
        put(prog, i++, BPF_LD_W_ABS, 0, 0, 4); // seccomp_data.arch
        put(prog, i++, BPF_JEQ_K, 0, 2 * k + 1, Arch.current().auditArch()); // else: allow
        put(prog, i++, BPF_LD_W_ABS, 0, 0, 0); // seccomp_data.nr
        for (Map.Entry<Syscall, Integer> rule : denied.entrySet()) {
            put(prog, i++, BPF_JEQ_K, 0, 1, (int) rule.getKey().number());
            put(prog, i++, BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | rule.getValue());
        }
        put(prog, i++, BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW);
        Pointer fprog = Memory.allocateDirect(rt, 16, true);
        fprog.putShort(0, (short) i);
        fprog.putLong(8, prog.address());
        Posix.syscall("prctl(PR_SET_NO_NEW_PRIVS)", Syscall.PRCTL, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0);
        Posix.syscall("prctl(PR_SET_SECCOMP)", Syscall.PRCTL, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog.address(), 0, 0, 0);
        Reference.reachabilityFence(prog);
        Reference.reachabilityFence(fprog);
    }

    private static void put(Pointer prog, int index, short code, int jt, int jf, int k) {
        long at = 8L * index;
        prog.putShort(at, code);
        prog.putByte(at + 2, (byte) jt);
        prog.putByte(at + 3, (byte) jf);
        prog.putInt(at + 4, k);
    }
}
