package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.ContentCheck;
import io.engramhost.client.ContentMismatchException;
import io.engramhost.client.DaemonAbsentException;
import io.engramhost.client.EngramClient;
import io.engramhost.client.EngramClientException;
import io.engramhost.client.ImportedTables;
import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.CudaUnavailableException;
import io.engramhost.protocol.Expectation;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A Java engine catches one type: every failure the client's API meets at run time is an {@link EngramClientException}
 * (docs/java.md, "Errors"), against a real daemon process: no daemon ({@link DaemonAbsentException}), a checkpoint that
 * is not there, a content mismatch ({@link ContentMismatchException}), and a GPU view where there is no CUDA driver
 * (its cause the native layer's {@link CudaUnavailableException}).
 */
@Timeout(120)
class ClientExceptionsTest {
    private static final ClientOptions QUIET = ClientOptions.defaults().withNotices(n -> { }).withName("exceptions-test");

    @Test
    void shouldThrowOnlyEngramClientExceptionsForRunTimeFailures(@TempDir Path dir) throws Exception {
        EngramClientException absent = assertThrows(EngramClientException.class,
                () -> EngramClient.connect(dir.resolve("none.sock"), Expectation.any(), QUIET));
        assertInstanceOf(DaemonAbsentException.class, absent, absent.toString());

        EngramClientException noCheckpoint = assertThrows(EngramClientException.class,
                () -> io.engramhost.client.Expectations.ofCheckpoint(dir.resolve("no-model")));
        assertInstanceOf(CheckpointException.class, noCheckpoint.getCause(), noCheckpoint.toString());
        assertTrue(noCheckpoint.getMessage().contains(dir.resolve("no-model").toString()), noCheckpoint.getMessage());

        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("a"), new CheckpointGenerator.Spec(List.of(1), 500, 64, 1));
        Path other = CheckpointGenerator.writeSingle(dir.resolve("b"), new CheckpointGenerator.Spec(List.of(1), 500, 64, 2));
        try (DaemonProcess d = DaemonProcess.start(dir.resolve("run/e.sock"), dir.resolve("d.log"), "--checkpoint",
                ckpt.toString()).awaitReady()) {
            ImportedTables tables = EngramClient.connect(d.socket, Expectation.any(), QUIET);
            ContentCheck.Trusted wrong = ContentCheck.fromCheckpoint(List.of(other), tables.tables().keySet(), 1);
            EngramClientException mismatch = assertThrows(EngramClientException.class,
                    () -> ContentCheck.verify(tables, wrong, 1));
            assertInstanceOf(ContentMismatchException.class, mismatch, mismatch.toString());
            EngramClientException sidecar = assertThrows(EngramClientException.class,
                    () -> ContentCheck.fromSidecar(dir.resolve("no.engram-digests.json")));
            assertTrue(sidecar.getMessage().contains("no.engram-digests.json"), sidecar.getMessage());
        }
    }

    @Test
    void shouldThrowAnEngramClientExceptionForAGpuViewWithoutCuda(@TempDir Path dir) throws Exception {
        assumeFalse(Cuda.available(), "this machine has a CUDA driver: a GPU view works here");
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("a"), new CheckpointGenerator.Spec(List.of(1), 500, 64, 1));
        try (DaemonProcess d = DaemonProcess.start(dir.resolve("run/g.sock"), dir.resolve("d.log"), "--checkpoint",
                ckpt.toString()).awaitReady()) {
            ClientOptions gpu = QUIET.withGpu(0, false);
            EngramClientException e = assertThrows(EngramClientException.class,
                    () -> EngramClient.connect(d.socket, Expectation.any(), gpu));
            assertInstanceOf(CudaUnavailableException.class, e.getCause(), e.toString());
            assertEquals(e.getCause().getMessage() + "; for CPU views only, connect without a GPU view (no"
                    + " ClientOptions.withGpu; engram-host import without --gpu)", e.getMessage(),
                    "the driver's one line, then the way out");
            EngramClientException background = assertThrows(EngramClientException.class,
                    () -> EngramClient.connectInBackground(d.socket, Expectation.any(), gpu).await());
            assertInstanceOf(CudaUnavailableException.class, background.getCause(), background.toString());
            assertEquals(e.getMessage(), background.getMessage(), "the same line from the background attach");
        }
    }
}
