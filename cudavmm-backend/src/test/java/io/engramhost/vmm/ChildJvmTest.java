package io.engramhost.vmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.JvmFlags;
import io.engramhost.testing.ChildJvm;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The child JVM the cross-process GPU test relies on starts with the class path and flags. */
@Timeout(60)
class ChildJvmTest {
    @TempDir
    Path dir;

    /** Prints what the cross-process test needs from the child's JVM. */
    public static final class Probe {
        public static void main(String[] args) {
            System.out.println("arg=" + args[0]);
            System.out.println("tmpdir=" + System.getProperty("java.io.tmpdir"));
            System.out.println("import=" + ImportChild.class.getName());
            System.out.println("memfd=" + io.engramhost.os.Posix.memfdCreate("probe", 0).isOpen());
        }
    }

    @Test
    void shouldStartAJvmWithTheSameClassPathAndFlags() throws Exception {
        Path log = dir.resolve("child.log");
        Process p = ChildJvm.start(Probe.class, log, "hello");
        assertTrue(p.waitFor(50, TimeUnit.SECONDS), "child did not exit");
        String out = Files.readString(log);
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("arg=hello"), out);
        assertTrue(out.contains("tmpdir=" + System.getProperty("java.io.tmpdir")), out);
        assertTrue(out.contains("memfd=true"), out);
        assertEquals(java.util.List.of(), JvmFlags.get(), "the project needs no JVM flag today (NativeBindingsTest)");
    }
}
