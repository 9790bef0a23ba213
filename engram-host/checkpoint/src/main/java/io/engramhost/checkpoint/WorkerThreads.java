package io.engramhost.checkpoint;

import java.util.ArrayList;
import java.util.List;

/**
 * Runs one worker body on N daemon threads and waits for all of them. An interrupt of the waiting
 * thread does not abandon them (a read in flight still writes memory): it calls {@code onInterrupt}
 * (which tells the workers to stop taking work), keeps waiting, and restores the interrupt status.
 */
final class WorkerThreads {
    private WorkerThreads() {
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
