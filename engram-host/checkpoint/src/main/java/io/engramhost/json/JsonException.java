package io.engramhost.json;

/**
 * JSON text that is not valid, or valid JSON this reader refuses (too deep, an integer beyond 64 bits,
 * a duplicate key). The message names the byte position, e.g. {@code at byte 17: expected ':' after key}.
 */
public final class JsonException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final long position;
    private final String problem;

    public JsonException(long position, String problem) {
        super("at byte " + position + ": " + problem);
        this.position = position;
        this.problem = problem;
    }

    /** The problem without the position. */
    public String problem() {
        return problem;
    }

    /** Zero-based byte offset into the input where the problem was found. */
    public long position() {
        return position;
    }
}
