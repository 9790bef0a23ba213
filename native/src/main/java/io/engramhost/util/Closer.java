package io.engramhost.util;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Owns resources in the order they were opened and closes them in the reverse order, each one even
 * when an earlier close throws. The first failure is rethrown with the later ones suppressed; a
 * checked exception from a {@code close()} is wrapped in an {@link IllegalStateException} naming
 * the resource. {@link #close()} is idempotent. Null resources are skipped.
 *
 * <pre>{@code
 * Closer<AutoCloseable> owned = new Closer<>();
 * try {
 *     MemHandle h = owned.add(MemHandle.create(...));
 *     VaRange r = owned.add(VaRange.reserve(...));
 *     return new Thing(h, r);            // on success the Thing owns them
 * } catch (RuntimeException e) {
 *     owned.closeAfter(e);               // r, then h; failures suppressed into e
 *     throw e;
 * }
 * }</pre>
 *
 * @param <T> the kind of resource held
 */
public final class Closer<T extends AutoCloseable> implements AutoCloseable {
    private final List<T> items = new ArrayList<>();

    /** Takes {@code resource} (may be null) to close later, after everything added after it; returns it. */
    public synchronized <U extends T> U add(U resource) {
        if (resource != null) {
            items.add(resource);
        }
        return resource;
    }

    /** What is held, in opening order (a copy). */
    public synchronized List<T> items() {
        return List.copyOf(items);
    }

    /** Closes everything held, last added first; the Closer is then empty. */
    @Override
    public void close() {
        List<T> held;
        synchronized (this) {
            held = new ArrayList<>(items);
            items.clear();
        }
        closeAll(held);
    }

    /** Closes everything held after {@code cause}; any failure is added to it as suppressed, nothing thrown. */
    public void closeAfter(Throwable cause) {
        try {
            close();
        } catch (RuntimeException e) {
            suppress(cause, e);
        }
    }

    /** Closes {@code inOpeningOrder} from last to first; rethrows the first failure, the others suppressed. */
    public static void closeAll(List<? extends AutoCloseable> inOpeningOrder) {
        RuntimeException first = null;
        for (int i = inOpeningOrder.size() - 1; i >= 0; i--) {
            AutoCloseable c = inOpeningOrder.get(i);
            if (c == null) {
                continue;
            }
            try {
                c.close();
            } catch (Exception e) {
                RuntimeException r = e instanceof RuntimeException re ? re
                        : new IllegalStateException("closing " + c + " failed: " + e, e);
                if (first == null) {
                    first = r;
                } else {
                    suppress(first, r);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    /** {@link #closeAll(List)} of {@code inOpeningOrder}: the last argument is closed first. */
    public static void closeAll(AutoCloseable... inOpeningOrder) {
        closeAll(Arrays.asList(inOpeningOrder));
    }

    /** Closes {@code inOpeningOrder} from last to first after {@code cause}, adding any failure to it. */
    public static void closeAllAfter(Throwable cause, List<? extends AutoCloseable> inOpeningOrder) {
        try {
            closeAll(inOpeningOrder);
        } catch (RuntimeException e) {
            suppress(cause, e);
        }
    }

    /** {@link #closeAllAfter(Throwable, List)} of {@code inOpeningOrder}: the last argument is closed first. */
    public static void closeAllAfter(Throwable cause, AutoCloseable... inOpeningOrder) {
        closeAllAfter(cause, Arrays.asList(inOpeningOrder));
    }

    private static void suppress(Throwable to, Throwable e) {
        if (to != e) {
            to.addSuppressed(e);
        }
    }
}
