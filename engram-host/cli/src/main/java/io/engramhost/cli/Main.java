package io.engramhost.cli;

import java.io.PrintWriter;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code engram-host}: the operator's and the engine's command line. Exit codes: 0 ok, 1 runtime
 * failure, 2 usage error. Every error is one line on stderr; {@code --verbose} adds the stack trace.
 */
@Command(name = "engram-host", mixinStandardHelpOptions = true, scope = CommandLine.ScopeType.INHERIT,
        versionProvider = VersionInfo.class,
        description = "Keeps Engram tables resident and hands them to engines over Unix sockets.",
        subcommands = {ServeCommand.class, ImportCommand.class, StatusCommand.class, StopCommand.class, VerifyCommand.class,
                InspectCommand.class, TopologyCommand.class, GenerateCommand.class, DemoCommand.class,
                CommandLine.HelpCommand.class})
public final class Main implements Runnable {
    @Option(names = "--verbose", description = "Print stack traces with errors.", scope = CommandLine.ScopeType.INHERIT)
    boolean verbose;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public void run() {
        throw new CommandLine.ParameterException(spec.commandLine(), "a command is needed: "
                + String.join(", ", spec.subcommands().keySet()));
    }

    public static void main(String[] args) {
        int code = run(args);
        io.engramhost.client.EngramClient.awaitWarmup(2000); // not cut off by the exit (it would print a trace)
        System.exit(code);
    }

    /** Runs the CLI and returns its exit code (for tests and the demo). */
    public static int run(String... args) {
        CommandLine cl = new CommandLine(new Main());
        cl.setExecutionExceptionHandler((e, commandLine, parseResult) -> {
            PrintWriter err = commandLine.getErr();
            boolean verbose = parseResult.hasMatchedOption("--verbose");
            err.println("engram-host " + commandLine.getCommandName() + ": " + oneLine(e));
            if (verbose) {
                e.printStackTrace(err);
            }
            err.flush();
            return 1;
        });
        cl.setParameterExceptionHandler((e, args2) -> {
            PrintWriter err = e.getCommandLine().getErr();
            err.println("engram-host " + e.getCommandLine().getCommandName() + ": " + e.getMessage());
            err.println("Try 'engram-host " + e.getCommandLine().getCommandName() + " --help'.");
            err.flush();
            return 2;
        });
        return cl.execute(args);
    }

    static String oneLine(Throwable e) {
        String m = e.getMessage();
        if (m == null || m.isBlank()) {
            m = e.getClass().getSimpleName();
        }
        return m.replace(System.lineSeparator(), " | ").replace("\n", " | ");
    }
}
