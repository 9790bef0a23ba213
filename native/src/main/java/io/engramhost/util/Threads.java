package io.engramhost.util;

/**
 * Makes a component's threads, each for its task and with its name. The daemon's (its {@code FatalExit}) are daemon
 * threads whose death by an error takes the daemon down; a test may make plain ones.
 */
@FunctionalInterface
public interface Threads {
    /** A new, unstarted thread that runs {@code task}, named {@code name}. */
    Thread thread(Runnable task, String name);
}
