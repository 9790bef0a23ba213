package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.protocol.ErrorCode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * docs/troubleshooting.md covers every error the daemon and the CLI can print, and stays so.
 *
 * <p>The messages are read from the sources of the daemon-side modules ({@link #MODULES}): every {@code throw new
 * X(...)} and every {@code LOG.log(ERROR|WARNING, ...)}. A message's key is the first three words of its first
 * string literal that has two words or more (leading punctuation dropped), so {@code path + ": header JSON at byte "
 * + n} gives {@code header JSON at}: the words an operator sees and searches for, not the values that vary. Each key
 * must appear on the page (whitespace collapsed), unless {@code troubleshooting-internal.txt} (next to this
 * class, in test resources) lists it as a check of engram-host's own code that nothing outside it can trigger. A new
 * message with new first words fails here until it is documented or listed there, with the reason; a stale entry
 * there fails too. Messages made only of values (no literal of two words) cannot be keyed and are not checked.
 *
 * <p>Every {@link ErrorCode} must have its row on the page ({@code | `NAME` |}).
 */
class TroubleshootingDocTest {
    /** The modules whose messages serve and the CLI print. */
    static final List<String> MODULES = List.of("engram-host/daemon", "engram-host/cli", "engram-host/checkpoint",
            "numa", "memfd-backend", "cudavmm-backend");
    private static final Pattern SITE = Pattern.compile(
            "throw\\s+new\\s+[\\w.]+\\s*\\(|LOG\\.log\\(\\s*(?:ERROR|WARNING)\\s*,");
    private static final Pattern LITERAL = Pattern.compile("\"((?:[^\"\\\\]|\\\\.)*)\"");
    private static final Pattern WORD = Pattern.compile("[A-Za-z_][A-Za-z_-]+");

    @Test
    void shouldDocumentEveryMessageOfTheDaemonAndTheCli() throws IOException {
        Path root = repositoryRoot();
        String section = troubleshooting(root);
        Map<String, List<String>> keys = messageKeys(root);
        // the scan itself works: it finds messages the section is known to hold, and many of them
        assertTrue(keys.containsKey("cannot listen on") && keys.containsKey("socket directory"), keys.keySet()::toString);
        assertTrue(keys.size() > 100, "only " + keys.size() + " message keys found: is the scan broken?");

        Map<String, String> internal = internalKeys();
        List<String> missing = new ArrayList<>();
        keys.forEach((key, sites) -> {
            if (!section.contains(key) && !internal.containsKey(key)) {
                missing.add("'" + key + "' (" + String.join(", ", sites) + ")");
            }
        });
        assertEquals(List.of(), missing, "messages whose first words are not in docs/troubleshooting.md:"
                + " document them there (message, meaning, what to do), or, for a check no operator can"
                + " cause, list them in troubleshooting-internal.txt with the reason");
        Set<String> stale = new TreeSet<>(internal.keySet());
        stale.removeAll(keys.keySet());
        assertEquals(Set.of(), stale, "troubleshooting-internal.txt lists keys no message has any more");
    }

    @Test
    void shouldDocumentEveryErrorCode() throws IOException {
        String section = troubleshooting(repositoryRoot());
        List<String> missing = new ArrayList<>();
        for (ErrorCode code : ErrorCode.values()) {
            if (!section.contains("| `" + code.name() + "` |")) {
                missing.add(code.name());
            }
        }
        assertEquals(List.of(), missing, "error codes without their row in docs/troubleshooting.md's Error codes");
    }

    /** Message key to the places that print it (file:line), in key order. */
    static Map<String, List<String>> messageKeys(Path root) throws IOException {
        Map<String, List<String>> keys = new TreeMap<>();
        for (String module : MODULES) {
            Path src = root.resolve(module).resolve("src/main/java");
            assertTrue(Files.isDirectory(src), src::toString);
            List<Path> files;
            try (Stream<Path> s = Files.walk(src)) {
                files = s.filter(p -> p.toString().endsWith(".java")).sorted().toList();
            }
            for (Path f : files) {
                String text = Files.readString(f);
                Matcher site = SITE.matcher(text);
                while (site.find()) {
                    int end = text.indexOf(';', site.end());
                    String key = key(text.substring(site.end(), end < 0 ? text.length() : end));
                    if (key != null) {
                        int line = (int) text.substring(0, site.start()).chars().filter(c -> c == '\n').count() + 1;
                        keys.computeIfAbsent(key, k -> new ArrayList<>()).add(f.getFileName() + ":" + line);
                    }
                }
            }
        }
        return keys;
    }

    /** The first three words of the statement's first literal of two words or more; null without one. */
    static String key(String statement) {
        Matcher l = LITERAL.matcher(statement);
        while (l.find()) {
            String t = l.group(1).replaceFirst("^[^A-Za-z{-]+", "");
            if (WORD.matcher(t).results().count() >= 2) {
                String[] words = t.strip().split("\\s+");
                String key = String.join(" ", List.of(words).subList(0, Math.min(3, words.length)));
                return key.replaceFirst("[ '\":=(,]+$", "");
            }
        }
        return null;
    }

    private static Map<String, String> internalKeys() throws IOException {
        Map<String, String> out = new TreeMap<>();
        try (InputStream in = TroubleshootingDocTest.class.getResourceAsStream("/troubleshooting-internal.txt")) {
            assertTrue(in != null, "troubleshooting-internal.txt");
            for (String line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
                if (line.isBlank() || line.startsWith("#")) {
                    continue;
                }
                int hash = line.indexOf('#');
                assertTrue(hash > 0 && !line.substring(hash + 1).isBlank(), "an entry without its reason: " + line);
                assertEquals(null, out.put(line.substring(0, hash).strip(), line.substring(hash + 1).strip()),
                        "twice: " + line);
            }
        }
        return out;
    }

    /** docs/troubleshooting.md, whitespace collapsed. */
    private static String troubleshooting(Path root) throws IOException {
        String doc = Files.readString(root.resolve("docs/troubleshooting.md"));
        assertTrue(doc.contains("\n## Error codes\n"), "docs/troubleshooting.md has no '## Error codes' section");
        return String.join(" ", doc.split("\\s+"));
    }

    private static Path repositoryRoot() {
        Path p = Path.of("").toAbsolutePath();
        while (p != null && !Files.isRegularFile(p.resolve("docs/troubleshooting.md"))) {
            p = p.getParent();
        }
        assertTrue(p != null, "no docs/troubleshooting.md above " + Path.of("").toAbsolutePath());
        return p;
    }
}
