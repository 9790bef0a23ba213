package io.engramhost.cli.log;

import java.util.Locale;

/** How the daemon's log lines are written ({@code serve --log-format}). */
public enum LogFormat {
    /** {@code 2025-01-02T03:04:05.678Z engram-host: message}; under systemd {@code <6>engram-host: message}. */
    TEXT,
    /** One JSON object a line: {@code ts}, {@code level}, {@code logger}, {@code msg}, {@code pid}. */
    JSON;

    public String wireName() {
        return name().toLowerCase(Locale.ROOT);
    }

    public static LogFormat of(String name) {
        for (LogFormat f : values()) {
            if (f.wireName().equalsIgnoreCase(name)) {
                return f;
            }
        }
        throw new IllegalArgumentException("unknown log format '" + name + "'; one of text, json");
    }
}
