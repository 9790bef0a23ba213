package io.engramhost.util;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Test;
import org.w3c.dom.Element;
import org.w3c.dom.Node;

/**
 * One version everywhere: what {@link BuildInfo} gives (Maven's project version, filtered at build time) is the root
 * pom's version, the Python package's ({@code python/pyproject.toml} and {@code engram_host.__version__}, in PEP 440's
 * spelling), and the client artifact's version the README and docs/java.md name.
 */
class BuildInfoTest {
    @Test
    void theVersionIsThePomsThePythonPackagesAndTheDocs() throws Exception {
        Path root = repository();
        String version = BuildInfo.version();
        assertNotEquals(BuildInfo.UNKNOWN, version, "build.properties was not filtered: build native with Maven");
        assertEquals(pomVersion(root.resolve("pom.xml")), version, "the root pom's <version>");
        String python = pep440(version);
        assertEquals(python, match(root.resolve("python/pyproject.toml"), "(?m)^version = \"([^\"]*)\"$"),
                "python/pyproject.toml's version (PEP 440 of " + version + ")");
        assertEquals(python, match(root.resolve("python/engram_host/__init__.py"), "(?m)^__version__ = \"([^\"]*)\"$"),
                "engram_host.__version__ (PEP 440 of " + version + ")");
        for (String doc : List.of("README.md", "docs/java.md")) {
            List<String> named = all(root.resolve(doc), "io\\.engramhost:engram-client:([^`\\s]+)");
            assertTrue(!named.isEmpty(), doc + " names the client artifact");
            named.forEach(v -> assertEquals(version, v, doc + ": io.engramhost:engram-client:" + v));
        }
    }

    @Test
    void theCommitIsAShortHashOrUnknown() {
        String c = BuildInfo.commit();
        assertTrue(c.equals(BuildInfo.UNKNOWN) || c.matches("[0-9a-f]{4,40}"), c);
    }

    /** Maven's {@code 1.2.3-SNAPSHOT} is PEP 440's {@code 1.2.3.dev0}; a release is spelt the same in both. */
    static String pep440(String maven) {
        return maven.endsWith("-SNAPSHOT") ? maven.substring(0, maven.length() - "-SNAPSHOT".length()) + ".dev0"
                : maven;
    }

    private static Path repository() {
        Path p = Path.of(System.getProperty("user.dir")).toAbsolutePath();
        while (p != null && !Files.exists(p.resolve("bin/engram-host"))) {
            p = p.getParent();
        }
        assumeTrue(p != null, "not run inside the repository (no bin/engram-host above " + System.getProperty("user.dir")
                + "): the pom and the Python package are not here to compare");
        return p;
    }

    /** The project's own {@code <version>}, a child of {@code <project>} (not its parent's or a dependency's). */
    private static String pomVersion(Path pom) throws Exception {
        Element project = DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(pom.toFile())
                .getDocumentElement();
        for (Node n = project.getFirstChild(); n != null; n = n.getNextSibling()) {
            if (n instanceof Element e && e.getTagName().equals("version")) {
                return e.getTextContent().trim();
            }
        }
        throw new AssertionError(pom + " has no <version>");
    }

    private static String match(Path file, String regex) throws Exception {
        List<String> found = all(file, regex);
        assertEquals(1, found.size(), file + ": " + regex + " matched " + found);
        return found.get(0);
    }

    private static List<String> all(Path file, String regex) throws Exception {
        Matcher m = Pattern.compile(regex).matcher(Files.readString(file));
        List<String> out = new ArrayList<>();
        while (m.find()) {
            out.add(m.group(1));
        }
        return out;
    }
}
