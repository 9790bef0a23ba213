package io.engramhost.cli;

import io.engramhost.cli.log.EngramLoggerFinder;
import io.engramhost.cli.log.LogFormat;
import io.engramhost.cli.log.LogLevels;
import java.lang.System.Logger.Level;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.Option;
import picocli.CommandLine.TypeConversionException;

/** {@code serve --log-level} and {@code --log-format}: what the daemon logs and how (docs/operator-reference.md, Logs). */
final class LogOptions {
    @Option(names = "--log-level", defaultValue = "info", paramLabel = "LEVEL", converter = LevelConverter.class,
            completionCandidates = LevelNames.class,
            description = "Lines at this level or more severe: ${COMPLETION-CANDIDATES} (default: ${DEFAULT-VALUE}).")
    Level level;

    @Option(names = "--log-format", defaultValue = "text", paramLabel = "FORMAT", converter = FormatConverter.class,
            completionCandidates = FormatNames.class,
            description = "text or json: one JSON object a line (default: ${DEFAULT-VALUE}).")
    LogFormat format;

    /** From now on every log line of the process is at {@link #level} or above, in {@link #format}. */
    void install() {
        EngramLoggerFinder.configure(level, format);
    }

    static final class LevelConverter implements ITypeConverter<Level> {
        @Override
        public Level convert(String value) {
            try {
                return LogLevels.of(value);
            } catch (IllegalArgumentException e) {
                throw new TypeConversionException(e.getMessage());
            }
        }
    }

    static final class LevelNames implements Iterable<String> {
        @Override
        public Iterator<String> iterator() {
            return LogLevels.CHOICES.stream().map(l -> l.getName().toLowerCase(Locale.ROOT)).iterator();
        }
    }

    static final class FormatConverter implements ITypeConverter<LogFormat> {
        @Override
        public LogFormat convert(String value) {
            try {
                return LogFormat.of(value);
            } catch (IllegalArgumentException e) {
                throw new TypeConversionException(e.getMessage());
            }
        }
    }

    static final class FormatNames implements Iterable<String> {
        @Override
        public Iterator<String> iterator() {
            return List.of(LogFormat.values()).stream().map(LogFormat::wireName).iterator();
        }
    }
}
