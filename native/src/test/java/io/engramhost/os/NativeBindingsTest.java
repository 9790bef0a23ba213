package io.engramhost.os;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.cuda.internal.LibCuda;
import io.engramhost.os.internal.LibC;
import io.engramhost.os.internal.LibCHolder;
import io.engramhost.os.internal.LibCMore;
import io.engramhost.testing.ChildJvm;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * jnr-ffi's x86-64 stub compiler passes a garbage sixth argument (jnr-ffi issue 181). No jnr-ffi interface of the
 * project has a call with more than five arguments (mmap and syscall go through jffi's invokers: WideCalls), so a
 * JVM needs no {@code -Djnr.ffi.x86asm.enabled=false}: a child JVM with the stub compiler explicitly on passes
 * every argument of both.
 */
class NativeBindingsTest {
    private static final jnr.ffi.Pointer MEM = jnr.ffi.Pointer.wrap(LibCHolder.RUNTIME, 0L);

    @Test
    void shouldBindNoCallOfMoreThanFiveArgumentsThroughJnr() {
        List<String> wide = new ArrayList<>();
        for (Class<?> lib : List.of(LibC.class, LibCMore.class, LibCuda.class)) {
            for (Method m : lib.getDeclaredMethods()) {
                if (m.getParameterCount() > 5) {
                    wide.add(lib.getSimpleName() + "." + m.getName());
                }
            }
        }
        assertEquals(List.of(), wide, "bind these through io.engramhost.os.internal.WideCalls");
    }

    @Test
    void shouldPassSixArgumentsWithJnrsStubCompilerOn() throws Exception {
        List<String> cmd = ChildJvm.command(SixArguments.class, List.of("-Djnr.ffi.x86asm.enabled=true"));
        cmd.removeIf(a -> a.equals("-Djnr.ffi.x86asm.enabled=false"));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "child JVM did not finish");
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("mmap offset ok") && out.contains("syscall sixth ok"), out);
    }

    /** The child: mmap at an offset (the sixth argument), and mbind with flags 0 (the sixth of syscall's six). */
    public static final class SixArguments {
        public static void main(String[] args) {
            // Use jnr-ffi first, as an engine's own code might, before any call of ours.
            LibCHolder.LIBC.getpid();
            long page = Posix.pageSize();
            try (Fd fd = Posix.memfdCreate("six-args", 0)) {
                Posix.ftruncate(fd, 4 * page);
                try (Mapping w = Posix.mmap(4 * page, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0)) {
                    for (int p = 0; p < 4; p++) {
                        MEM.putLong(w.address() + p * page, 0x1111L * (p + 1));
                    }
                }
                try (Mapping m = Posix.mmap(page, Posix.PROT_READ, Posix.MAP_SHARED, fd, 3 * page)) {
                    if (MEM.getLong(m.address()) != 0x4444L) {
                        throw new AssertionError("mmap at offset 3 pages read " + Long.toHexString(MEM.getLong(m.address())));
                    }
                }
                System.out.println("mmap offset ok");
            }
            try (Mapping anon = Posix.mmapAnonymous(page, "mbind")) {
                // mbind(addr, len, MPOL_DEFAULT, NULL, 0, flags): a garbage sixth argument (flags) gives EINVAL.
                for (int i = 0; i < 1000; i++) {
                    Posix.syscall("mbind", Syscall.MBIND, anon.address(), page, 0, 0, 0, 0);
                }
                System.out.println("syscall sixth ok");
            }
        }
    }
}
