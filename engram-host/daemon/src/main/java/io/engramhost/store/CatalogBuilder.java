package io.engramhost.store;

/**
 * Loads the tables a daemon will serve (the slow part of start-up), reporting progress. It may hold what it loads
 * from (a checkpoint's fds): {@link #build} gives that back when it returns or throws, and {@link #close} when the
 * daemon never builds (it failed to start).
 */
@FunctionalInterface
public interface CatalogBuilder extends AutoCloseable {
    Catalog build(LoadProgress progress) throws Exception;

    /** Gives back what the builder holds, without building; the default holds nothing. */
    @Override
    default void close() {
    }
}
