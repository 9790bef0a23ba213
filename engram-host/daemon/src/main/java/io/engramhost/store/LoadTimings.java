package io.engramhost.store;

import io.engramhost.util.Lap;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Where the daemon's load of its host tables spent its time, in nanoseconds: creating the regions
 * (NUMA policy set before the first touch), reading the checkpoint into them, digesting every table,
 * then verifying placement and sealing. STATUS reports it as its {@code load} object.
 *
 * @param createNanos creating every region
 * @param readNanos reading {@code readBytes} of tensors from the checkpoint
 * @param readBytes the tensors' bytes read
 * @param digestNanos engram digest v1 of every table
 * @param verifySealNanos verifying placement ({@code move_pages}) and sealing the regions
 */
public record LoadTimings(long createNanos, long readNanos, long readBytes, long digestNanos, long verifySealNanos) {
    private static final double GIB = 1L << 30;

    /** The read's rate in GiB/s; 0 when it took no measurable time. */
    public double readGibPerSecond() {
        return readNanos > 0 ? readBytes / Lap.seconds(readNanos) / GIB : 0.0;
    }

    /**
     * STATUS's {@code load} object, in this order: {@code create_s}, {@code read_s}, {@code read_gib_s},
     * {@code digest_s}, {@code verify_seal_s} (seconds, and GiB/s for the read).
     */
    public Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("create_s", Lap.seconds(createNanos));
        m.put("read_s", Lap.seconds(readNanos));
        m.put("read_gib_s", readGibPerSecond());
        m.put("digest_s", Lap.seconds(digestNanos));
        m.put("verify_seal_s", Lap.seconds(verifySealNanos));
        return Collections.unmodifiableMap(m);
    }
}
