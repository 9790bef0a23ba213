package io.engramhost.testing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import java.lang.reflect.Proxy;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.io.TempDir;
import org.junit.platform.commons.support.AnnotationSupport;

@Timeout(30)
class ResourceSnapshotTest {
    @Test
    void shouldNameAnFdLeftOpenAndForgetItOnceClosed() {
        ResourceSnapshot before = ResourceSnapshot.take();
        assertEquals(List.of(), ResourceSnapshot.take().leakedSince(before));
        Fd fd = Posix.memfdCreate("left-open", 0);
        List<String> leaks = ResourceSnapshot.take().leakedSince(before);
        assertEquals(2, leaks.size(), leaks.toString());
        assertTrue(leaks.get(0).startsWith("1 owned fd(s) not closed (Fd.openCount "), leaks.get(0));
        assertEquals("1 fd(s) left open: [" + fd.get() + " -> /memfd:left-open (deleted)]", leaks.get(1));
        fd.close();
        assertEquals(List.of(), ResourceSnapshot.take().leakedSince(before));
    }

    @Test
    void shouldSeeFdsOpenedOutsideFd(@TempDir Path dir) throws Exception {
        ResourceSnapshot before = ResourceSnapshot.take();
        Path file = dir.resolve("data.bin");
        try (FileChannel c = FileChannel.open(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
            List<String> leaks = ResourceSnapshot.take().leakedSince(before);
            assertEquals(1, leaks.size(), leaks.toString());
            assertTrue(leaks.get(0).startsWith("1 fd(s) left open: [") && leaks.get(0).endsWith(" -> " + file + "]"),
                    leaks.get(0));
        }
        assertEquals(List.of(), ResourceSnapshot.take().leakedSince(before));
    }

    @Test
    void shouldWaitForAnEngramThreadThatIsEnding() throws Exception {
        ResourceSnapshot before = ResourceSnapshot.take();
        CountDownLatch stop = new CountDownLatch(1);
        Thread t = new Thread(() -> {
            try {
                stop.await();
                Thread.sleep(200);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "engram-test-worker");
        t.setDaemon(true);
        t.start();
        assertEquals(List.of("1 thread(s) still running: [engram-test-worker (daemon)]"),
                ResourceSnapshot.take().leakedSince(before));
        assertEquals(List.of("1 thread(s) still running: [engram-test-worker (daemon)]"),
                ResourceSnapshot.leaksAfter(before, Duration.ofMillis(50)), "still running after a short grace");
        stop.countDown();
        assertEquals(List.of(), ResourceSnapshot.leaksAfter(before, Duration.ofSeconds(10)), "ended within the grace");
        new Thread(() -> { }, "not-ours").start();
        assertEquals(List.of(), ResourceSnapshot.take().leakedSince(before), "only engram- threads count");
    }

    @Test
    void shouldFailATestThatLeaksButNotOneThatFailedAlready() throws Exception {
        LeakCheck check = new LeakCheck(Duration.ofMillis(100));
        ExtensionContext passed = context(Optional.empty());
        check.beforeEach(passed);
        try (Fd fd = Posix.memfdCreate("leaked-by-test", 0)) {
            AssertionError e = assertThrows(AssertionError.class, () -> check.afterEach(passed));
            assertTrue(e.getMessage().startsWith("leaky() left behind: 1 owned fd(s) not closed"), e.getMessage());
            assertTrue(e.getMessage().contains("/memfd:leaked-by-test (deleted)]"), e.getMessage());

            ExtensionContext failed = context(Optional.of(new IllegalStateException("the test's own failure")));
            check.beforeEach(failed);
            Fd another = Posix.memfdCreate("leaked-by-failed-test", 0);
            try {
                check.afterEach(failed); // its own failure is reported, not the leak
            } finally {
                another.close();
            }
        }
        check.beforeEach(passed);
        check.afterEach(passed);
    }

    @Test
    void shouldTagGpuTestsAndBoundThem() {
        @GpuTest
        final class Example {
        }
        assertEquals("gpu", AnnotationSupport.findAnnotation(Example.class, Tag.class).orElseThrow().value());
        assertEquals(GpuTest.TIMEOUT_SECONDS,
                AnnotationSupport.findAnnotation(Example.class, Timeout.class).orElseThrow().value());
    }

    /** The parts of an ExtensionContext that LeakCheck uses. */
    private static ExtensionContext context(Optional<Throwable> outcome) {
        Map<Object, Object> values = new HashMap<>();
        ExtensionContext.Store store = (ExtensionContext.Store) Proxy.newProxyInstance(
                ResourceSnapshotTest.class.getClassLoader(), new Class<?>[] {ExtensionContext.Store.class},
                (proxy, method, args) -> switch (method.getName()) {
                    case "put" -> values.put(args[0], args[1]);
                    case "remove" -> values.remove(args[0]);
                    default -> throw new UnsupportedOperationException(method.getName());
                });
        return (ExtensionContext) Proxy.newProxyInstance(ResourceSnapshotTest.class.getClassLoader(),
                new Class<?>[] {ExtensionContext.class}, (proxy, method, args) -> switch (method.getName()) {
                    case "getStore" -> store;
                    case "getUniqueId" -> "[test:leaky()]";
                    case "getDisplayName" -> "leaky()";
                    case "getExecutionException" -> outcome;
                    default -> throw new UnsupportedOperationException(method.getName());
                });
    }
}
