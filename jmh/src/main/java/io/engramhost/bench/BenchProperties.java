package io.engramhost.bench;

import io.engramhost.os.JvmFlags;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;

/** What the build filtered into bench.properties: the JVM flags Chronicle Bytes asks for. */
final class BenchProperties {
    private BenchProperties() {
    }

    /**
     * The JVM flags of every fork: the project's ({@link JvmFlags#get()}) and those Chronicle Bytes asks for (the
     * parent pom's {@code engram.chronicle.jvm.flags}), which GatherBench's view of a table (TableView.openBytes)
     * reads through. No other JVM of the project needs Chronicle's.
     */
    static List<String> forkJvmFlags() {
        Properties p = load();
        String chronicle = p == null ? null : p.getProperty("chronicle.jvm.flags");
        if (chronicle == null) {
            throw new IllegalStateException("io/engramhost/bench/bench.properties has no chronicle.jvm.flags: build the"
                    + " jmh module with Maven (its resources are filtered)");
        }
        List<String> flags = new ArrayList<>(JvmFlags.get());
        Arrays.stream(chronicle.trim().split("\\s+")).filter(f -> !f.isEmpty()).forEach(flags::add);
        return flags;
    }

    private static Properties load() {
        try (InputStream in = BenchProperties.class.getResourceAsStream("bench.properties")) {
            if (in == null) {
                return null;
            }
            Properties p = new Properties();
            p.load(in);
            return p;
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read io/engramhost/bench/bench.properties", e);
        }
    }
}
