package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.util.Bytes;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --memory-budget SIZE} (docs/operator-reference.md, "Sizing"), as an operator runs it, in separate processes: a
 * budget above all this machine's memory lets a small checkpoint through and the log and STATUS say the budget was
 * used; a budget below the checkpoint is refused before the socket, naming both numbers; a malformed SIZE is a usage
 * error naming the option; huge pages are checked as without it.
 */
@Timeout(300)
class MemoryBudgetProcessTest {
    /** MemTotal of this machine, in bytes. */
    private static long memTotal() throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/meminfo"))) {
            if (line.startsWith("MemTotal:")) {
                return Long.parseLong(line.split("\\s+")[1]) * 1024;
            }
        }
        throw new AssertionError("no MemTotal in /proc/meminfo");
    }

    private static Path checkpoint(Path dir) throws Exception {
        return CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 1000, 64, 3));
    }

    @Test
    void shouldServeWithABudgetAboveTheMachinesMemoryAndSaySo(@TempDir Path dir) throws Exception {
        Path index = checkpoint(dir);
        long gib = memTotal() / Bytes.GiB + 64; // more than this machine has, free or not
        Path socket = dir.resolve("run/m.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", index.toString(),
                "--memory-budget", gib + "g").awaitReady()) {
            String budget = Bytes.format(gib * Bytes.GiB);
            assertTrue(d.log().contains("; memory: ") && d.log().contains(" fits the --memory-budget of " + budget
                    + " on this machine (MemFree + file cache now "), d.log());
            CliRun json = CliRun.of("status", "--socket", socket.toString(), "--json");
            assertEquals(0, json.exit(), json.err());
            assertTrue(json.out().contains("\"memory_budget\":" + gib * Bytes.GiB), json.out());
            assertTrue(json.out().contains("\"memory_check\":\"") && json.out().contains("fits the --memory-budget of "
                    + budget), json.out());
            CliRun text = CliRun.of("status", "--socket", socket.toString());
            assertTrue(text.out().contains("memory     ") && text.out().contains("fits the --memory-budget of " + budget),
                    text.out());
        }
    }

    @Test
    void shouldRefuseACheckpointOverTheBudgetBeforeTheSocket(@TempDir Path dir) throws Exception {
        Path index = checkpoint(dir);
        Path socket = dir.resolve("run/m.sock");
        CliRun serve = CliRun.of("serve", "--checkpoint", index.toString(), "--numa", "none", "--socket",
                socket.toString(), "--memory-budget", "64K");
        assertEquals(1, serve.exit(), serve.err());
        assertEquals(1, serve.err().lines().count(), serve.err());
        assertTrue(serve.err().startsWith("engram-host serve: need ") && serve.err().contains(" on this machine but"
                + " --memory-budget gives only 64.0 KiB (MemFree + file cache now "), serve.err());
        assertFalse(Files.exists(socket.getParent()), "refused before the socket (or its directory) was created");
    }

    /** A device bound to the virtio-mem or balloon driver, as the daemon looks for it, read here on our own. */
    private static boolean growableMemoryHere() throws Exception {
        for (String driver : List.of("virtio_mem", "virtio_balloon")) {
            Path d = Path.of("/sys/bus/virtio/drivers", driver);
            if (Files.isDirectory(d)) {
                try (var entries = Files.list(d)) {
                    if (entries.anyMatch(e -> e.getFileName().toString().startsWith("virtio"))) {
                        return true;
                    }
                }
            }
        }
        return false;
    }

    @Test
    void shouldRefuseMoreThanTheMachineHasAndNameTheBudgetWhereMemoryCanGrow(@TempDir Path dir) throws Exception {
        // one U8 tensor of MemTotal + 64 GiB in a sparse file: valid, and larger than anything free here
        long n = memTotal() + 64 * Bytes.GiB;
        byte[] header = ("{\"big\":{\"dtype\":\"U8\",\"shape\":[" + n + "],\"data_offsets\":[0," + n + "]}}    ")
                .getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        Path file = dir.resolve("sparse.safetensors");
        try (java.io.RandomAccessFile raf = new java.io.RandomAccessFile(file.toFile(), "rw")) {
            raf.write(java.nio.ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(header.length).array());
            raf.write(header);
            raf.setLength(8 + header.length + n);
        }
        Path socket = dir.resolve("run/m.sock");
        CliRun serve = CliRun.of("serve", "--checkpoint", file.toString(), "--numa", "none", "--socket", socket.toString());
        assertEquals(1, serve.exit(), serve.err());
        assertTrue(serve.err().startsWith("engram-host serve: need " + Bytes.format(n) + " on this machine but only "),
                serve.err());
        String hint = " through which its host may add memory as it is used: if it does, serve --memory-budget SIZE"
                + " counts on SIZE instead";
        assertEquals(growableMemoryHere(), serve.err().strip().endsWith(hint), serve.err());
        assertFalse(Files.exists(socket.getParent()), "refused before the socket (or its directory) was created");
    }

    @Test
    void shouldRefuseAMalformedSizeAsAUsageErrorNamingTheOption(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("run/m.sock");
        for (String[] bad : List.of(new String[] {"0", "'0' is not a positive size"},
                new String[] {"-3G", "'-3G' is not a positive size"},
                new String[] {"lots", "'lots' is not a size: give bytes, or a number and a unit"},
                new String[] {"120GB", "'120GB' is not a size: GB means powers of 1000"},
                new String[] {"9000P", "'9000P' is over the largest size, 8.0 EiB"})) {
            CliRun serve = CliRun.of("serve", "--checkpoint", dir.resolve("unused").toString(), "--socket",
                    socket.toString(), "--memory-budget", bad[0]);
            assertEquals(2, serve.exit(), serve.err());
            assertTrue(serve.err().startsWith("engram-host serve: Invalid value for option '--memory-budget': " + bad[1]),
                    serve.err());
            assertFalse(Files.exists(socket.getParent()), "no socket directory for a usage error");
        }
    }

    @Test
    void shouldCheckHugePagesAsWithoutTheBudget(@TempDir Path dir) throws Exception {
        long reserved = Long.parseLong(Files.readString(Path.of("/proc/sys/vm/nr_hugepages")).trim());
        org.junit.jupiter.api.Assumptions.assumeTrue(reserved == 0, "vm.nr_hugepages=" + reserved + " here");
        Path index = checkpoint(dir);
        Path socket = dir.resolve("run/h.sock");
        CliRun serve = CliRun.of("serve", "--checkpoint", index.toString(), "--backend", "memfd-hugetlb", "--numa",
                "none", "--socket", socket.toString(), "--memory-budget", "1T");
        assertEquals(1, serve.exit(), serve.err());
        assertTrue(serve.err().contains("huge pages but only 0 are free") && serve.err().endsWith("; --memory-budget"
                + " applies to ordinary pages only: huge pages must be reserved before serve\n"), serve.err());
        assertFalse(Files.exists(socket.getParent()), "refused before the socket (or its directory) was created");
    }
}
