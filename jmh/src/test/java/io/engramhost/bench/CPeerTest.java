package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.Posix;
import io.engramhost.protocol.RegionKind;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The C baseline's peer process (engram-attach --bench-peer) on the path that needs no GPU: a memfd
 * attached for the CPU in the child, released, and the child gone without leaving an fd here.
 */
@Timeout(60)
class CPeerTest {
    @Test
    void shouldAttachAMemfdInTheChildAndReleaseIt() {
        List<String> fdsBefore = io.engramhost.os.ProcessProbe.openFds();
        try (MemfdRegion region = MemfdRegion.create("engram.cpeer.test", 8L << 20, PageKind.SMALL, null)) {
            region.seal();
            try (CPeer peer = CPeer.start(0)) {
                assertEquals("{\"op\":\"ping\"}", peer.ping());
                for (int i = 0; i < 2; i++) {
                    String reply = peer.attach(RegionKind.MEMFD, region.fd(), region.size(), -1, 0);
                    assertTrue(reply.startsWith("{\"op\":\"attach\",\"attach_ms\":"), reply);
                    assertTrue(reply.contains("\"register_ms\":0.000"), reply);
                    long childMaps = childMappingsOf("engram.cpeer.test");
                    assertEquals(1, childMaps, "the child maps the memfd once while attached");
                    assertTrue(peer.release().startsWith("{\"op\":\"release\""));
                    assertEquals(0, childMappingsOf("engram.cpeer.test"), "released in the child");
                }
            }
        }
        assertEquals(List.of(), ProcessHandle.current().children().filter(ProcessHandle::isAlive).toList());
        List<String> fdsAfter = io.engramhost.os.ProcessProbe.openFds();
        assertEquals(fdsBefore.size(), fdsAfter.size(), () -> "fds before " + fdsBefore + ", after " + fdsAfter);
    }

    @Test
    void shouldReportTheChildsCauseWhenARequestIsWrong() {
        try (CPeer peer = CPeer.start(0)) {
            IllegalStateException e = assertThrows(IllegalStateException.class, peer::release);
            assertTrue(e.getMessage().contains("engram-attach: bench peer: RELEASE with nothing attached"),
                    e.getMessage());
            IllegalStateException exit = assertThrows(IllegalStateException.class, peer::close);
            assertTrue(exit.getMessage().startsWith("C peer exited 1"), exit.getMessage());
        }
    }

    /** How many lines of the one child's /proc/PID/maps name {@code memfd:NAME}. */
    private static long childMappingsOf(String name) {
        List<ProcessHandle> children = ProcessHandle.current().children().toList();
        assertEquals(1, children.size(), "one C peer child");
        try {
            return Files.readAllLines(Path.of("/proc/" + children.get(0).pid() + "/maps")).stream()
                    .filter(l -> l.contains("/memfd:" + name)).count();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }
}
