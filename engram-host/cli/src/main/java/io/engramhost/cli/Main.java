package io.engramhost.cli;

import io.engramhost.client.EngramClient;
import io.engramhost.client.FingerprintMismatchException;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.util.Text;
import java.io.PrintWriter;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/**
 * {@code engram-host}: the operator's and the engine's command line. Exit codes: 0 ok, 1 runtime
 * failure, 2 usage error. Every error is one line on stderr; {@code --verbose} adds the stack trace.
 * Its name, description and inherited options are {@link RootCommand}'s; this class adds the commands.
 */
@Command(subcommands = {ServeCommand.class, ImportCommand.class, StatusCommand.class, StopCommand.class,
        VerifyCommand.class, InspectCommand.class, TopologyCommand.class, GenerateCommand.class, DemoCommand.class,
        CommandLine.HelpCommand.class})
public final class Main extends RootCommand {
    public static void main(String[] args) {
        System.exit(launch(DaemonHooks.NONE, args));
    }

    /**
     * What {@link #main} does before it exits with the code this returns: the CLI run as a process, with
     * {@code hooks} in any daemon that {@code serve} starts (the test launcher's; the shipped CLI passes none).
     */
    public static int launch(DaemonHooks hooks, String[] args) {
        if (ImportCommand.asksForGpuView(args)) {
            // Loading the CUDA driver (libcuda's binding, cuInit) does not depend on the other arguments: begun before
            // picocli parses them, it runs beside the parse. The device's context follows once the import knows it.
            EngramClient.prepareCudaDriver();
        }
        int code = run(hooks, args);
        EngramClient.awaitGpuPreparation(2000); // a driver call is not cut off by the exit
        return code;
    }

    /** Runs the CLI and returns its exit code (for tests and the demo). */
    public static int run(String... args) {
        return run(DaemonHooks.NONE, args);
    }

    /**
     * Runs the CLI with {@code hooks} in any daemon that {@code serve} starts, and returns its exit code: the test
     * launcher ({@code bin/engram-host-test}) passes the test jar's hooks; the shipped CLI passes none.
     */
    public static int run(DaemonHooks hooks, String... args) {
        CommandLine cl = commandLine(args);
        ((RootCommand) cl.getCommand()).hooks = hooks;
        cl.setExecutionExceptionHandler((e, commandLine, parseResult) -> {
            PrintWriter err = commandLine.getErr();
            boolean verbose = parseResult.hasMatchedOption("--verbose");
            // A mismatch is a summary and a few differences, one a line (docs/checkpoints.md); the rest is one line.
            err.println(who(commandLine) + ": " + (e instanceof FingerprintMismatchException ? e.getMessage() : oneLine(e)));
            if (verbose) {
                e.printStackTrace(err);
            }
            err.flush();
            return 1;
        });
        cl.setParameterExceptionHandler((e, args2) -> {
            PrintWriter err = e.getCommandLine().getErr();
            err.println(who(e.getCommandLine()) + ": " + e.getMessage());
            err.println("Try '" + who(e.getCommandLine()) + " --help'.");
            err.flush();
            return 2;
        });
        return cl.execute(args);
    }

    /**
     * The command line that parses {@code args}. Picocli reads the annotations, options, mixins and converters of
     * every command it is given when the {@link CommandLine} is made, which takes a good part of a command's start.
     * So when the first argument names one of the commands ({@code import}, {@code status}, ...), the root gets that
     * command alone; anything else ({@code help}, an option, no argument, a typo) gets every command, as the root's
     * usage, {@code help} and picocli's suggestions need.
     */
    static CommandLine commandLine(String... args) {
        Class<?> named = args.length > 0 ? command(args[0]) : null;
        if (named == null) {
            return new CommandLine(new Main());
        }
        CommandLine cl = new CommandLine(new RootCommand());
        cl.addSubcommand(named);
        return cl;
    }

    /** The class of the command called {@code name} (not picocli's {@code help}), or null. */
    private static Class<?> command(String name) {
        for (Class<?> c : Main.class.getAnnotation(Command.class).subcommands()) {
            Command a = c.getAnnotation(Command.class);
            if (c != CommandLine.HelpCommand.class && a != null && a.name().equals(name)) {
                return c;
            }
        }
        return null;
    }

    /** How a message names the command: {@code engram-host NAME}, or {@code engram-host} for the root itself. */
    private static String who(CommandLine cl) {
        return cl.getParent() == null ? "engram-host" : "engram-host " + cl.getCommandName();
    }

    static String oneLine(Throwable e) {
        String m = e.getMessage();
        if (m == null || m.isBlank()) {
            m = e.getClass().getSimpleName();
        }
        return Text.oneLine(m.replace(System.lineSeparator(), " | ").replace("\n", " | "));   // a file's or peer's text
    }
}
