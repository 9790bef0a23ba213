package io.engramhost.os;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * What this process holds open, for leak checks in tests and benchmarks: the fds of the kinds
 * engram-host creates, read from {@code /proc/self/fd}. ({@link Fd#openCount()} counts the fds owned
 * through {@link Fd}; this sees every fd, whoever opened it.)
 */
public final class ProcessProbe {
    private static final Path FD_DIR = Path.of("/proc/self/fd");

    static {
        // The JDK keeps one end of a socketpair open for good from its first FileChannel on
        // (sun.nio.ch.FileDispatcherImpl's pre-close fd): open one now, so that this JVM fd is there
        // before any count is taken rather than appearing inside the first counted work.
        try (FileChannel c = FileChannel.open(Path.of("/proc/self/stat"))) {
            c.size();
        } catch (IOException | UnsupportedOperationException noProc) {
            // no /proc: the counts are -1 anyway
        }
    }

    private ProcessProbe() {
    }

    /**
     * The number of fds this process has open of the kinds engram-host creates (memfds, sockets, pidfds
     * and other anonymous inodes, and regular files such as checkpoints and lock files). The JVM's own fds
     * (jar and library files it opens or closes lazily, pipes, /dev and /proc files, the cgroup files its container
     * support reads for a moment) are left out, so a
     * count taken before and after some work compares that work alone. -1 where /proc is not mounted.
     */
    public static int countOpenFds() {
        List<String> fds = openFds();
        return fds == null ? -1 : fds.size();
    }

    /**
     * The fds {@link #countOpenFds()} counts, each as {@code number -> target} (e.g. {@code 17 ->
     * /memfd:engram.t1 (deleted)}), in fd order; null where /proc is not mounted.
     */
    public static List<String> openFds() {
        Map<Integer, String> open = new TreeMap<>();
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(FD_DIR)) {
            for (Path e : entries) {
                String target;
                try {
                    target = Files.readSymbolicLink(e).toString();
                } catch (IOException | UnsupportedOperationException gone) {
                    continue; // closed while listing (e.g. the directory stream's own fd)
                }
                if (!isJvms(target)) {
                    open.put(Integer.parseInt(e.getFileName().toString()), target);
                }
            }
        } catch (NoSuchFileException e) {
            return null;
        } catch (IOException e) {
            throw new IllegalStateException("cannot list " + FD_DIR + ": " + e, e);
        }
        List<String> out = new ArrayList<>();
        open.forEach((fd, target) -> out.add(fd + " -> " + target));
        return out;
    }

    private static boolean isJvms(String target) {
        // /sys/fs/cgroup/: the JVM's container support opens those files for a moment, on its own threads
        return target.endsWith(".jar") || target.endsWith(".so") || target.endsWith(".jsa") || target.startsWith("pipe:")
                || target.startsWith("/dev/") || target.startsWith("/proc/") || target.startsWith("/sys/fs/cgroup/")
                || target.startsWith(System.getProperty("java.home"));
    }
}
