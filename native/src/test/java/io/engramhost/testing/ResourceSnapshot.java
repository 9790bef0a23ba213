package io.engramhost.testing;

import io.engramhost.cuda.CudaResources;
import io.engramhost.os.Fd;
import io.engramhost.os.ProcessProbe;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * What a test may leave behind, counted at one moment: fds owned through {@link Fd}, the open fds of
 * the kinds engram-host creates ({@link ProcessProbe#openFds()}), live CUDA resources
 * ({@link CudaResources#live()}) and live threads whose name starts with {@value #THREAD_PREFIX}.
 *
 * @param ownedFds {@link Fd#openCount()}
 * @param openFds {@link ProcessProbe#openFds()}, {@code fd -> target} (empty without /proc)
 * @param cudaResources {@link CudaResources#live()}
 * @param threads the live {@value #THREAD_PREFIX} threads
 */
public record ResourceSnapshot(int ownedFds, List<String> openFds, int cudaResources, Set<Thread> threads) {
    /** The prefix of the name of every thread engram-host starts. */
    public static final String THREAD_PREFIX = "engram-";

    public static ResourceSnapshot take() {
        List<String> open = ProcessProbe.openFds();
        Set<Thread> threads = Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.isAlive() && t.getName().startsWith(THREAD_PREFIX)).collect(Collectors.toSet());
        return new ResourceSnapshot(Fd.openCount(), open == null ? List.of() : List.copyOf(open), CudaResources.live(),
                threads);
    }

    /** What this snapshot holds that {@code before} did not, one line per kind; empty when nothing leaked. */
    public List<String> leakedSince(ResourceSnapshot before) {
        List<String> leaks = new ArrayList<>();
        if (ownedFds > before.ownedFds) {
            leaks.add((ownedFds - before.ownedFds) + " owned fd(s) not closed (Fd.openCount " + before.ownedFds + " -> "
                    + ownedFds + ")");
        }
        List<String> newFds = openFds.stream().filter(f -> !before.openFds.contains(f)).toList();
        if (!newFds.isEmpty()) {
            leaks.add(newFds.size() + " fd(s) left open: " + newFds);
        }
        if (cudaResources > before.cudaResources) {
            leaks.add((cudaResources - before.cudaResources) + " CUDA resource(s) not released (CudaResources.live "
                    + before.cudaResources + " -> " + cudaResources + ")");
        }
        List<String> newThreads = threads.stream().filter(t -> !before.threads.contains(t))
                .sorted(Comparator.comparing(Thread::getName)).map(t -> t.getName() + (t.isDaemon() ? " (daemon)" : ""))
                .toList();
        if (!newThreads.isEmpty()) {
            leaks.add(newThreads.size() + " thread(s) still running: " + newThreads);
        }
        return leaks;
    }

    /**
     * What is still held that {@code before} did not hold, after waiting up to {@code grace} for it to
     * go (a thread that is ending, a close that another thread is doing); empty when nothing leaked.
     */
    public static List<String> leaksAfter(ResourceSnapshot before, Duration grace) throws InterruptedException {
        long deadline = System.nanoTime() + grace.toNanos();
        while (true) {
            List<String> leaks = take().leakedSince(before);
            if (leaks.isEmpty() || System.nanoTime() >= deadline) {
                return leaks;
            }
            Thread.sleep(20);
        }
    }
}
