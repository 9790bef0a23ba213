package io.engramhost.os;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

/**
 * The JVM flags every engram-host JVM needs, as set once in the parent pom
 * ({@code engram.jvm.flags}) and filtered into this module's resources. Used to start child
 * JVMs (integration tests, JMH forks) the same way surefire and the launcher start theirs.
 */
public final class JvmFlags {
    private JvmFlags() {
    }

    public static List<String> get() {
        return read("jvm.options");
    }

    /** What a daemon JVM adds ({@code engram.daemon.jvm.flags}): its bounded heap and collector. */
    public static List<String> daemon() {
        return read("daemon.jvm.options");
    }

    private static List<String> read(String name) {
        try (InputStream in = JvmFlags.class.getResourceAsStream(name)) {
            if (in == null) {
                throw new IllegalStateException("resource io/engramhost/os/" + name + " is missing from the native jar");
            }
            String s = new String(in.readAllBytes(), StandardCharsets.UTF_8).trim();
            return Arrays.stream(s.split("\\s+")).filter(f -> !f.isEmpty()).toList();
        } catch (IOException e) {
            throw new IllegalStateException("cannot read io/engramhost/os/" + name, e);
        }
    }
}
