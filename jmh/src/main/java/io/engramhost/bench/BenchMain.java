package io.engramhost.bench;

import java.io.IOException;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.LocalDate;
import java.time.temporal.ChronoUnit;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.RunnerException;
import org.openjdk.jmh.runner.format.OutputFormatFactory;
import org.openjdk.jmh.runner.options.CommandLineOptionException;
import org.openjdk.jmh.runner.options.CommandLineOptions;
import org.openjdk.jmh.runner.options.VerboseMode;

/**
 * Runs the benchmarks with the project's JVM flags and Chronicle's in every fork, writes the JMH results as JSON and a
 * metadata file beside them (machine, JVM, version, commit, comparisons). Exit status 0 only when every
 * selected benchmark ran.
 */
public final class BenchMain {
    private BenchMain() {
    }

    public static void main(String[] args) {
        System.exit(run(List.of(args), System.out, System.err));
    }

    static int run(List<String> args, PrintStream out, PrintStream err) {
        if (args.contains("--help")) {
            out.println(BenchOptions.USAGE);
            return 0;
        }
        BenchOptions.Parsed p;
        try {
            p = BenchOptions.parse(args, LocalDate.now(), hostname());
        } catch (CommandLineOptionException | IllegalArgumentException e) {
            err.println("engram bench: " + e.getMessage());
            err.println(BenchOptions.USAGE);
            return 2;
        }
        if (p.onlyPrints()) {
            return print(p, out, err);
        }
        try {
            // JMH takes its lock in java.io.tmpdir and fails obscurely when that is missing.
            Files.createDirectories(Path.of(System.getProperty("java.io.tmpdir")));
        } catch (IOException e) {
            err.println("engram bench: cannot create java.io.tmpdir: " + e.getMessage());
            return 2;
        }
        Map<String, Object> meta = RunMetadata.collect(p.suite(), p.args(), p.resultFile());
        meta.put("status", "running");
        RunMetadata.write(p.metadataFile(), meta);
        out.println("engram bench: suite " + p.suite().lowerName() + " (" + BenchOptions.describe(p.jmh()) + "); results "
                + p.resultFile() + ", metadata " + p.metadataFile());
        int rc;
        try {
            Collection<RunResult> results = new Runner(p.jmh()).run();
            meta.put("benchmarks_run", results.size());
            if (results.isEmpty()) {
                meta.put("status", "failed");
                meta.put("error", "no benchmark produced a result (see the errors above)");
                err.println("engram bench: no benchmark produced a result");
                rc = 1;
            } else {
                meta.put("status", "ok");
                rc = 0;
            }
        } catch (RunnerException | RuntimeException e) {
            meta.put("status", "failed");
            meta.put("error", String.valueOf(e.getMessage()));
            err.println("engram bench: the run failed: " + e.getMessage());
            rc = 1;
        }
        meta.put("finished", Instant.now().truncatedTo(ChronoUnit.SECONDS).toString());
        RunMetadata.write(p.metadataFile(), meta);
        return rc;
    }

    /** -h, -l, -lp, -lprof, -lrf: JMH's help and lists, with no run and no files written. */
    private static int print(BenchOptions.Parsed p, PrintStream out, PrintStream err) {
        CommandLineOptions cli = p.cli();
        try {
            if (cli.shouldHelp()) {
                out.println(BenchOptions.USAGE);
                cli.showHelp();
            } else if (cli.shouldListProfilers()) {
                cli.listProfilers();
            } else if (cli.shouldListResultFormats()) {
                cli.listResultFormats();
            } else {
                Runner r = new Runner(p.listing(), OutputFormatFactory.createFormatInstance(out, VerboseMode.NORMAL));
                if (cli.shouldListWithParams()) {
                    r.listWithParams(p.listing());
                } else {
                    r.list();
                }
            }
            return 0;
        } catch (IOException | RuntimeException e) {
            err.println("engram bench: " + e.getMessage());
            return 1;
        }
    }

    private static String hostname() {
        try {
            return InetAddress.getLocalHost().getHostName().split("\\.")[0];
        } catch (UnknownHostException e) {
            String h = RunMetadata.command("hostname");
            return h == null ? "unknown" : h;
        }
    }
}
