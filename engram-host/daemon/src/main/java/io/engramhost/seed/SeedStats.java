package io.engramhost.seed;

import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/** What an exporter's metrics see: bytes and ranges sent, peers connected, refusals by reason, its transport. */
public final class SeedStats {
    final AtomicLong bytesSent = new AtomicLong();
    final AtomicLong rangesSent = new AtomicLong();
    final Map<String, AtomicLong> refused = new ConcurrentHashMap<>();
    final AtomicInteger open = new AtomicInteger();
    volatile String transport = "none";

    void refused(String reason) {
        refused.computeIfAbsent(reason, k -> new AtomicLong()).incrementAndGet();
    }

    /** Table bytes sent to peers. */
    public long bytesSent() {
        return bytesSent.get();
    }

    /** Ranges sent to peers. */
    public long rangesSent() {
        return rangesSent.get();
    }

    /** Peers connected now. */
    public int open() {
        return open.get();
    }

    /** Peers refused so far, by reason ({@code not-authenticated}, {@code bad-request}, ...; docs/seeding.md). */
    public Map<String, Long> refused() {
        Map<String, Long> out = new TreeMap<>();
        refused.forEach((k, v) -> out.put(k, v.get()));
        return out;
    }

    /** The transport serving: {@code epoll}, {@code nio}, or {@code none} before the exporter starts. */
    public String transport() {
        return transport;
    }
}
