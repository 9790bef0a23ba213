package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.json.JsonReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(30)
class RunMetadataTest {
    @Test
    void shouldDescribeMachineJvmAndProject(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("sub/cpu.meta.json");
        RunMetadata.write(file, RunMetadata.collect(Suite.SMOKE, List.of("--suite", "smoke"), dir.resolve("cpu.json")));
        @SuppressWarnings("unchecked")
        Map<String, Object> m = (Map<String, Object>) JsonReader.parse(Files.readString(file));
        assertEquals("smoke", m.get("suite"));
        assertEquals("cpu.json", m.get("results"));
        assertTrue(String.valueOf(m.get("machine")).startsWith("Linux "), "uname -a: " + m.get("machine"));
        assertTrue(((Number) m.get("cores")).intValue() >= 1);
        assertTrue(((Number) m.get("memory_bytes")).longValue() > 1L << 30);
        assertEquals(System.getProperty("java.version"), m.get("java_version"));
        assertTrue(String.valueOf(m.get("project_version")).matches("\\d+\\.\\d+\\.\\d+.*"), "filtered: "
                + m.get("project_version"));
        assertTrue(m.containsKey("git_commit"));
        assertEquals(Comparisons.ALL.size(), ((List<?>) m.get("comparisons")).size());
        assertNotNull(m.get("started"));
    }

    @Test
    void shouldReturnNullForACommandThatFails() {
        assertEquals(null, RunMetadata.command("false"));
        assertEquals(null, RunMetadata.command("/nonexistent/command"));
        assertEquals("hi", RunMetadata.command("echo", " hi "));
    }
}
