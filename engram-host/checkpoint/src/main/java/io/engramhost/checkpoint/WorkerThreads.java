package io.engramhost.checkpoint;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

/**
 * Runs one worker body on N daemon threads and waits for all of them. An interrupt of the waiting
 * thread does not abandon them (a read in flight still writes memory): it calls {@code onInterrupt}
 * (which tells the workers to stop taking work), keeps waiting, and restores the interrupt status.
 */
final class WorkerThreads {
    private WorkerThreads() {
    }

    /** What one worker keeps while it runs tasks (its buffers), closed when it stops. */
    interface Local extends AutoCloseable {
        @Override
        void close();
    }

    /** The {@code index}-th task, run with its worker's {@link Local} (null when the worker keeps none). */
    interface Task<L extends Local> {
        void run(int index, L local);
    }

    /**
     * Runs tasks 0 to {@code count - 1} on up to {@code threads} threads (the calling thread alone when one is
     * enough), each thread with its own {@code local} ({@code () -> null}: none), taking the next task until none
     * is left or one failed. Rethrows the first failure: a {@link CheckpointException} as it is, anything else as
     * one saying "{@code what}: MESSAGE". An interrupt stops the handing out of tasks ("{@code what} interrupted").
     */
    static <L extends Local> void forEach(int count, int threads, String what, Supplier<L> local, Task<L> task) {
        if (threads < 1) {
            throw new IllegalArgumentException("threads must be at least 1, was " + threads);
        }
        AtomicInteger next = new AtomicInteger();
        AtomicReference<RuntimeException> failure = new AtomicReference<>();
        Runnable worker = () -> {
            try (L l = local.get()) {
                while (failure.get() == null) {
                    int i = next.getAndIncrement();
                    if (i >= count) {
                        return;
                    }
                    task.run(i, l);
                }
            } catch (RuntimeException | Error e) {
                failure.compareAndSet(null, e instanceof CheckpointException ce ? ce
                        : new CheckpointException(what + ": " + e.getMessage(), e));
            }
        };
        int n = Math.min(threads, Math.max(count, 1));
        if (n <= 1) {
            worker.run();
        } else {
            // stop handing out tasks, but wait: a read in flight still runs
            runAll(n, "engram-" + what.replace(' ', '-') + "-", worker,
                    () -> failure.compareAndSet(null, new CheckpointException(what + " interrupted")));
        }
        if (failure.get() != null) {
            throw failure.get();
        }
    }

    static void runAll(int threads, String namePrefix, Runnable worker, Runnable onInterrupt) {
        List<Thread> workers = new ArrayList<>(threads);
        for (int i = 0; i < threads; i++) {
            Thread t = new Thread(worker, namePrefix + i);
            t.setDaemon(true);
            workers.add(t);
            t.start();
        }
        joinAll(workers, onInterrupt);
    }

    /**
     * Waits for every thread in {@code workers}. An interrupt does not abandon them: it calls {@code onInterrupt}
     * (which tells them to stop taking work), keeps waiting, and restores the interrupt status.
     */
    static void joinAll(List<Thread> workers, Runnable onInterrupt) {
        boolean interrupted = false;
        for (Thread t : workers) {
            while (true) {
                try {
                    t.join();
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;
                    onInterrupt.run();
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
