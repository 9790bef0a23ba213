package io.engramhost.store;

import io.engramhost.util.Bytes;
import io.engramhost.util.Lap;

/**
 * Where the daemon's load of its host tables spent its time, in nanoseconds. The regions are created one after
 * another while the load's threads read the checkpoint into those already made and digest it as they read, so
 * creation and reading overlap: {@code createNanos} is the creation calls' own time, {@code readNanos} the time from
 * the first read to the last (waits for a region included). Then placement is verified and the regions sealed.
 * STATUS reports it as its {@code load} object.
 *
 * @param createNanos creating every region (the calls' own time)
 * @param createBytes the regions' bytes
 * @param readNanos from the first read to the last, each piece digested as it was read
 * @param readBytes the tensors' bytes read
 * @param directBytes of those, read with O_DIRECT (the rest through the page cache)
 * @param verifySealNanos verifying placement ({@code move_pages}) and sealing the regions
 */
public record LoadTimings(long createNanos, long createBytes, long readNanos, long readBytes, long directBytes,
        long verifySealNanos) {
    private static final double GIB = 1L << 30;

    /** The read's rate in GiB/s; 0 when it took no measurable time. */
    public double readGibPerSecond() {
        return rate(readBytes, readNanos);
    }

    /** The creation's rate in GiB/s; 0 when it took no measurable time. */
    public double createGibPerSecond() {
        return rate(createBytes, createNanos);
    }

    private static double rate(long bytes, long nanos) {
        return nanos > 0 ? bytes / Lap.seconds(nanos) / GIB : 0.0;
    }

    /** STATUS's {@code load} object ({@link LoadReport.Timings}): seconds, GiB/s and bytes. */
    public LoadReport.Timings toReport() {
        return new LoadReport.Timings(Lap.seconds(createNanos), createGibPerSecond(), Lap.seconds(readNanos),
                readGibPerSecond(), directBytes, Lap.seconds(verifySealNanos));
    }

    /** One line for the log: each phase's time and rate. */
    public String describe() {
        return String.format("loaded: regions created in %.2f s (%s, %.2f GiB/s), read and digested in %.2f s (%s,"
                + " %.2f GiB/s, %s of it with O_DIRECT), placement verified and sealed in %.2f s",
                Lap.seconds(createNanos), Bytes.format(createBytes), createGibPerSecond(), Lap.seconds(readNanos),
                Bytes.format(readBytes), readGibPerSecond(), Bytes.format(directBytes), Lap.seconds(verifySealNanos));
    }
}
