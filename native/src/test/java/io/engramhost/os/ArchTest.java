package io.engramhost.os;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.testing.ChildJvm;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class ArchTest {
    private static final String REFUSAL = "engram-host runs on x86_64 (amd64) and aarch64 only; this JVM's os.arch is"
            + " 'riscv64', whose syscall numbers it does not know";

    @Test
    void shouldNameTheArchitecturesAJvmReports() {
        assertEquals(Arch.X86_64, Arch.of("amd64"));
        assertEquals(Arch.X86_64, Arch.of("x86_64"));
        assertEquals(Arch.AARCH64, Arch.of("aarch64"));
        assertEquals(Arch.of(System.getProperty("os.arch")), Arch.current());
        assertEquals("aarch64", Arch.AARCH64.toString());
        assertEquals(0xC00000B7, Arch.AARCH64.auditArch());
        assertEquals(0xC000003E, Arch.X86_64.auditArch());
    }

    @Test
    void shouldRefuseAnotherArchitectureNamingIt() {
        assertEquals(REFUSAL, assertThrows(UnsupportedOperationException.class, () -> Arch.of("riscv64")).getMessage());
    }

    /** Prints what a first syscall lookup does on a JVM that reports another architecture. */
    public static final class OtherArch {
        public static void main(String[] args) {
            System.out.println("loaded " + Syscall.MBIND.kernelName()); // the classes load; nothing fails yet
            try {
                System.out.println("number " + Syscall.MBIND.number());
            } catch (UnsupportedOperationException e) {
                System.out.println("refused: " + e.getMessage());
            }
        }
    }

    @Test
    void shouldFailAtFirstUseOnAnotherArchitecture() throws Exception {
        Process p = new ProcessBuilder(ChildJvm.command(OtherArch.class, List.of("-Dos.arch=riscv64")))
                .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(50, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("loaded mbind\nrefused: " + REFUSAL + "\n"), out);
    }
}
