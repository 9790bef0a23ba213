package io.engramhost.numa;

/**
 * A NUMA request cannot be met or the machine's description cannot be read: a node that does not
 * exist, a node without memory, a table that does not fit, a malformed sysfs file. The message says
 * what is wrong and where.
 */
public class NumaException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public NumaException(String message) {
        super(message);
    }

    public NumaException(String message, Throwable cause) {
        super(message, cause);
    }
}
