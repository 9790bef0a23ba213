package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Java snippets of README.md and docs/java.md compile as written, against the client's runtime class path alone
 * (what an engine depending on engram-client gets; the cli pom writes it, target/client-classpath.txt): each
 * {@code ```java} block's {@code import} lines open a class of its own, and the rest of the block is the body of a
 * method that declares no checked exception, so a snippet that needs a name, an import or a try it does not show fails
 * here.
 */
@Timeout(120)
class JavaSnippetsTest {
    private static final Path ROOT = Path.of(System.getProperty("user.dir")).toAbsolutePath().getParent().getParent();
    private static final Pattern BLOCK = Pattern.compile("(?m)^([ \\t]*)```java\\n(.*?)^[ \\t]*```$", Pattern.DOTALL);

    static List<String> snippets(Path markdown) throws Exception {
        List<String> out = new ArrayList<>();
        Matcher m = BLOCK.matcher(Files.readString(markdown));
        while (m.find()) {
            String indent = m.group(1);
            StringBuilder b = new StringBuilder();
            for (String line : m.group(2).split("\n", -1)) {
                b.append(line.startsWith(indent) ? line.substring(indent.length()) : line.strip()).append('\n');
            }
            out.add(b.toString());
        }
        return out;
    }

    /** A class holding {@code snippet}: its imports first, the rest in {@code static void run()}. */
    static String wrap(String name, String snippet) {
        StringBuilder imports = new StringBuilder();
        StringBuilder body = new StringBuilder();
        for (String line : snippet.split("\n")) {
            (line.startsWith("import ") ? imports : body).append(line).append('\n');
        }
        return imports + "\nfinal class " + name + " {\n    static void run() {\n" + body + "    }\n}\n";
    }

    @Test
    void shouldCompileTheReadmesAndJavaMdsSnippetsAsWritten(@TempDir Path dir) throws Exception {
        List<String> readme = snippets(ROOT.resolve("README.md"));
        List<String> javaMd = snippets(ROOT.resolve("docs/java.md"));
        assertEquals(1, readme.size(), "README.md's Java snippet");
        assertEquals(2, javaMd.size(), "docs/java.md's two Java snippets");
        List<String> sources = new ArrayList<>();
        List<String> all = new ArrayList<>(readme);
        all.addAll(javaMd);
        for (int i = 0; i < all.size(); i++) {
            Path f = dir.resolve("src/Snippet" + i + ".java");
            Files.createDirectories(f.getParent());
            Files.writeString(f, wrap("Snippet" + i, all.get(i)));
            sources.add(f.toString());
        }
        String classPath = Files.readString(Path.of("target/client-classpath.txt")).strip();
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        ByteArrayOutputStream diagnostics = new ByteArrayOutputStream();
        List<String> args = new ArrayList<>(List.of("-d", dir.resolve("classes").toString(), "-cp", classPath,
                "-proc:none"));
        args.addAll(sources);
        int rc = javac.run(null, diagnostics, diagnostics, args.toArray(String[]::new));
        assertEquals(0, rc, "a snippet does not compile as written:\n" + diagnostics.toString(StandardCharsets.UTF_8)
                + "\n" + String.join("\n----\n", all));
        for (int i = 0; i < all.size(); i++) {
            assertTrue(Files.isRegularFile(dir.resolve("classes/Snippet" + i + ".class")), "Snippet" + i);
        }
    }
}
