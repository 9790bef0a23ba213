package io.engramhost.client;

import java.util.List;

/**
 * A content check ({@link ContentCheck}) found a table whose bytes do not have the trusted digest, or a
 * table with no trusted digest at all. The tables were closed before this was thrown. The message is one
 * line naming the first such table and both digests; {@link #problems()} lists every one.
 */
public final class ContentMismatchException extends EngramClientException {
    private static final long serialVersionUID = 1L;
    private final transient List<String> problems;

    ContentMismatchException(String message, List<String> problems) {
        super(message);
        this.problems = List.copyOf(problems);
    }

    /** One line per table that failed. */
    public List<String> problems() {
        return problems;
    }
}
