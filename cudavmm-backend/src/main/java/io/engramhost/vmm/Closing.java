package io.engramhost.vmm;

/** Closes several owners in the order given, each even when an earlier one throws. */
final class Closing {
    private Closing() {
    }

    /** Closes all; rethrows the first failure with the others suppressed. */
    static void all(AutoCloseable... owners) {
        RuntimeException first = null;
        for (AutoCloseable c : owners) {
            try {
                if (c != null) {
                    c.close();
                }
            } catch (Exception e) {
                RuntimeException r = e instanceof RuntimeException ? (RuntimeException) e : new IllegalStateException(e);
                if (first == null) {
                    first = r;
                } else {
                    first.addSuppressed(r);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    /** Closes all after {@code cause}, adding any failure to it as suppressed. */
    static void quietly(Throwable cause, AutoCloseable... owners) {
        try {
            all(owners);
        } catch (RuntimeException e) {
            cause.addSuppressed(e);
        }
    }
}
