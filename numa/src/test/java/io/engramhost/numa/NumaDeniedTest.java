package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Errno;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.os.Syscall;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The errors a container gives: the syscalls are really refused by the kernel, through a seccomp filter
 * on the calling thread like the one Docker's default profile installs.
 */
@Timeout(30)
class NumaDeniedTest {
    private static final long LEN = 16 * Posix.pageSize();

    @Test
    void shouldExplainEpermFromMbind() throws Exception {
        int fds = Fd.openCount();
        SeccompThread.Outcome<Object> o = SeccompThread.call(Map.of(Syscall.MBIND, Errno.EPERM), () -> {
            try (Mapping m = Posix.mmapAnonymous(LEN, "denied")) {
                Numa.apply(m, NumaPolicy.bind(0));
                return m.address();
            }
        });
        NativeException e = assertInstanceOf(NativeException.class, o.thrown());
        assertEquals(Errno.EPERM, e.errno());
        assertTrue(e.getMessage().matches("mbind\\(0x[0-9a-f]+, len=" + LEN + ", bind:0\\) failed: EPERM \\(Operation not"
                + " permitted\\); the process lacks CAP_SYS_NICE or a seccomp profile forbids mbind \\(as in many"
                + " containers\\); --numa none avoids it"), e.getMessage());
        assertEquals(fds, Fd.openCount());
    }

    @Test
    void shouldExplainEnosysFromMbind() throws Exception {
        SeccompThread.Outcome<Object> o = SeccompThread.call(Map.of(Syscall.MBIND, Errno.ENOSYS), () -> {
            try (Mapping m = Posix.mmapAnonymous(LEN, "denied")) {
                Numa.apply(m, NumaPolicy.interleave(java.util.List.of(0)));
                return null;
            }
        });
        NativeException e = assertInstanceOf(NativeException.class, o.thrown());
        assertTrue(e.getMessage().endsWith(", interleave:0) failed: ENOSYS (Function not implemented); the kernel has"
                + " no NUMA support or a seccomp profile forbids mbind; --numa none avoids it"), e.getMessage());
    }

    @Test
    void shouldExplainEpermFromMovePages() throws Exception {
        SeccompThread.Outcome<Object> o = SeccompThread.call(Map.of(Syscall.MOVE_PAGES, Errno.EPERM), () -> {
            try (Mapping m = Posix.mmapAnonymous(LEN, "denied")) {
                return Placement.verify(m, Posix.pageSize());
            }
        });
        NativeException e = assertInstanceOf(NativeException.class, o.thrown());
        assertTrue(e.getMessage().matches("move_pages\\(0x[0-9a-f]+, pages=16\\) failed: EPERM \\(Operation not"
                + " permitted\\); the process lacks CAP_SYS_NICE or a seccomp profile forbids move_pages \\(as in"
                + " many containers\\); --numa none avoids it"), e.getMessage());
    }

    @Test
    void shouldProbeTheCauseOnceAndNotThrow() throws Exception {
        SeccompThread.Outcome<Optional<String>> denied = SeccompThread.call(
                Map.of(Syscall.MBIND, Errno.EPERM, Syscall.GET_MEMPOLICY, Errno.EPERM), Numa::probe);
        assertTrue(denied.value().orElseThrow().contains("failed: EPERM (Operation not permitted); the process lacks"
                + " CAP_SYS_NICE"), denied.value().toString());
        SeccompThread.Outcome<Optional<String>> movePagesDenied = SeccompThread.call(
                Map.of(Syscall.MOVE_PAGES, Errno.ENOSYS), Numa::probe);
        assertTrue(movePagesDenied.value().orElseThrow().startsWith("move_pages("), movePagesDenied.value().toString());
    }
}
