package io.engramhost.bench;

import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import org.openjdk.jmh.results.format.ResultFormatType;
import org.openjdk.jmh.runner.options.ChainedOptionsBuilder;
import org.openjdk.jmh.runner.options.CommandLineOptionException;
import org.openjdk.jmh.runner.options.CommandLineOptions;
import org.openjdk.jmh.runner.options.Options;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;

/**
 * BenchMain's command line: its own flags ({@code --suite}, {@code --out}, {@code --name}) and, after
 * them or mixed in, any JMH option or benchmark regexp, which win over the suite's presets. Every fork
 * gets the project's JVM flags and Chronicle's appended ({@link BenchProperties#forkJvmFlags}); results are JSON in
 * {@code <out>/<name>.json}.
 */
final class BenchOptions {
    static final String USAGE = """
            usage: BenchMain [--suite cpu|smoke|gpu|all] [--out DIR] [--name NAME] [JMH options] [regexp...]
              --suite  which benchmarks (default cpu; smoke = cpu with 1 fork, short iterations, small params, C1 only)
              --out    directory for NAME.json (JMH results) and NAME.meta.json (default bench/results/<date>-<host>)
              --name   file name stem (default: the suite's name)
              JMH options (-f, -wi, -i, -p name=v,..., -e regexp, ...) override the suite's presets; -h lists them.
              -l, -lp  list the benchmarks (with -lp their parameters) matching the regexps, of every suite
                       unless --suite is given; nothing is run or written. -lprof, -lrf: JMH's lists.""";

    /**
     * The parsed command line: what to run and where its files go; {@code cli} the JMH part alone, and
     * {@code listing} what -l and -lp list: the suite's selection where --suite was given, else every
     * benchmark the regexps match.
     */
    record Parsed(Suite suite, Path resultFile, Path metadataFile, Options jmh, List<String> args,
            CommandLineOptions cli, CommandLineOptions listing) {
        /** -h, -l, -lp, -lprof or -lrf: the command prints and runs nothing. */
        boolean onlyPrints() {
            return cli.shouldHelp() || cli.shouldList() || cli.shouldListWithParams() || cli.shouldListProfilers()
                    || cli.shouldListResultFormats();
        }
    }

    private BenchOptions() {
    }

    static Parsed parse(List<String> args, LocalDate today, String host) throws CommandLineOptionException {
        Suite suite = Suite.CPU;
        boolean suiteGiven = false;
        Path out = null;
        String name = null;
        List<String> jmhArgs = new ArrayList<>();
        for (int i = 0; i < args.size(); i++) {
            String a = args.get(i);
            switch (a) {
                case "--suite" -> {
                    suite = Suite.of(value(args, ++i, a));
                    suiteGiven = true;
                }
                case "--out" -> out = Path.of(value(args, ++i, a));
                case "--name" -> name = fileStem(value(args, ++i, a));
                default -> jmhArgs.add(a);
            }
        }
        if (out == null) {
            out = Path.of("bench", "results", today + "-" + fileStem(host));
        }
        if (name == null) {
            name = suite.lowerName();
        }
        Path results = out.resolve(name + ".json");
        CommandLineOptions cli = new CommandLineOptions(jmhArgs.toArray(String[]::new));
        return new Parsed(suite, results, out.resolve(name + ".meta.json"), build(suite, cli, results),
                List.copyOf(args), cli, suiteGiven ? listing(suite, cli, jmhArgs) : cli);
    }

    /** The JMH arguments with the suite's selection added as build() adds it (JMH's -lp takes its own options). */
    private static CommandLineOptions listing(Suite suite, CommandLineOptions cli, List<String> jmhArgs)
            throws CommandLineOptionException {
        List<String> a = new ArrayList<>(jmhArgs);
        if (cli.getIncludes().isEmpty()) {
            a.addAll(suite.includes());
        }
        for (String e : suite.excludes()) {
            a.add("-e");
            a.add(e);
        }
        return new CommandLineOptions(a.toArray(String[]::new));
    }

    private static String value(List<String> args, int i, String flag) {
        if (i >= args.size() || args.get(i).startsWith("-")) {
            throw new IllegalArgumentException(flag + " needs a value");
        }
        return args.get(i);
    }

    /** Keeps a name usable as a file name: letters, digits, '.', '_' and '-'. */
    static String fileStem(String s) {
        String clean = s.replaceAll("[^A-Za-z0-9._-]", "_");
        if (clean.isEmpty() || clean.startsWith(".")) {
            throw new IllegalArgumentException("'" + s + "' cannot name a results file");
        }
        return clean;
    }

    private static Options build(Suite suite, CommandLineOptions cli, Path results) {
        ChainedOptionsBuilder b = new OptionsBuilder().parent(cli);
        if (cli.getIncludes().isEmpty()) {
            suite.includes().forEach(b::include);
        }
        suite.excludes().forEach(b::exclude);
        List<String> append = new ArrayList<>(BenchProperties.forkJvmFlags());
        if (suite == Suite.SMOKE) {
            // its numbers are not judged: forks of one second spend less on C2's compiling (a -jvmArgsAppend given
            // after it wins)
            append.add("-XX:TieredStopAtLevel=1");
        }
        if (cli.getJvmArgsAppend().hasValue()) {
            append.addAll(cli.getJvmArgsAppend().get());
        }
        b.jvmArgsAppend(append.toArray(String[]::new));
        b.resultFormat(ResultFormatType.JSON).result(results.toString());
        if (!cli.shouldFailOnError().hasValue()) {
            // CPU suites must run everywhere: any error fails the run. On a GPU machine one path may lack
            // a prerequisite (huge pages): it reports its cause and the others still run.
            b.shouldFailOnError(suite == Suite.CPU || suite == Suite.SMOKE);
        }
        if (suite == Suite.SMOKE) {
            smoke(b, cli);
        }
        return b.build();
    }

    /** One fork, one short warmup, two short measurements, the smallest parameters: where the user set none. */
    private static void smoke(ChainedOptionsBuilder b, CommandLineOptions cli) {
        TimeValue t = TimeValue.milliseconds(Suite.SMOKE_ITERATION_MILLIS);
        if (!cli.getForkCount().hasValue()) {
            b.forks(1);
        }
        if (!cli.getWarmupIterations().hasValue()) {
            b.warmupIterations(1);
        }
        if (!cli.getWarmupTime().hasValue()) {
            b.warmupTime(t);
        }
        if (!cli.getMeasurementIterations().hasValue()) {
            b.measurementIterations(2);
        }
        if (!cli.getMeasurementTime().hasValue()) {
            b.measurementTime(t);
        }
        for (Map.Entry<String, String> p : Suite.SMOKE_PARAMS.entrySet()) {
            if (!cli.getParameter(p.getKey()).hasValue()) {
                b.param(p.getKey(), p.getValue());
            }
        }
    }

    static String describe(Options o) {
        Collection<String> inc = o.getIncludes();
        return "includes " + inc + ", excludes " + o.getExcludes();
    }
}
