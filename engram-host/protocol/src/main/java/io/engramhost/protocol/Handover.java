package io.engramhost.protocol;

import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The daemon-to-daemon handover messages (docs/protocol.md, "Handing over to a successor daemon"): the
 * successor's TAKEOVER, the predecessor's HANDOVER_CATALOG and HANDOVER_COMMIT, and the successor's
 * HANDOVER_ABORT. READY and DONE have empty bodies ({@link Frames#empty}). The catalog and the commit end with
 * a SHA-256 of everything before it in the frame, checked before a field is read.
 */
public final class Handover {
    /** The handover layout this build writes and reads; a takeover needs both daemons to share one. */
    public static final int LAYOUT = 1;
    /** Host-only key plus GPUs 0 to {@link ProtocolDescriptor#MAX_DEVICE}. */
    public static final int MAX_SERVED = ProtocolDescriptor.MAX_DEVICE + 2;
    /** Connections one COMMIT hands over: every fd of a message but the lock's. */
    public static final int MAX_CONNECTIONS = ProtocolDescriptor.MAX_FDS - 1;
    /** The load report carried along for STATUS: a JSON object, at most 16 MiB. */
    public static final int MAX_REPORT = 16 << 20;
    private static final int SHA256_BYTES = 32;

    private Handover() {
    }

    /** TAKEOVER: the successor's handover layouts, the client protocol versions it speaks, its build. */
    public record Takeover(int minLayout, int maxLayout, int minProtocol, int maxProtocol, String build) {
        public static Takeover ofThisBuild(String build) {
            return new Takeover(LAYOUT, LAYOUT, ProtocolDescriptor.MIN_VERSION, ProtocolDescriptor.MAX_VERSION, build);
        }

        public ByteBuffer encode() {
            return new FrameWriter(MessageType.TAKEOVER, 2).u16(minLayout).u16(maxLayout).u16(minProtocol)
                    .u16(maxProtocol).shortString(build).toBuffer();
        }

        public static Takeover decode(FrameReader r) {
            Takeover t = new Takeover(r.u16("min_layout"), r.u16("max_layout"), r.u16("min_protocol"),
                    r.u16("max_protocol"), r.shortString("build"));
            r.end();
            if (t.minLayout < 1 || t.minLayout > t.maxLayout) {
                throw new ProtocolException("TAKEOVER: layouts " + t.minLayout + "-" + t.maxLayout + " are not a range");
            }
            if (t.minProtocol < 1 || t.minProtocol > t.maxProtocol) {
                throw new ProtocolException("TAKEOVER: protocol versions " + t.minProtocol + "-" + t.maxProtocol
                        + " are not a range");
            }
            return t;
        }

        /**
         * Why this build (layout {@link #LAYOUT}, client protocol versions {@code min}-{@code max}) must not hand
         * over to the successor that sent this, or null when it may: the successor must read this layout, and
         * speak every client version this daemon speaks, since connections of any of them move over.
         */
        public String incompatibility(int min, int max) {
            if (LAYOUT < minLayout || LAYOUT > maxLayout) {
                return "the successor (" + build + ") reads handover layouts " + minLayout + "-" + maxLayout
                        + ", this daemon writes layout " + LAYOUT;
            }
            if (minProtocol > min || maxProtocol < max) {
                return "the successor (" + build + ") speaks client protocol versions " + minProtocol + "-" + maxProtocol
                        + ", but this daemon's clients may use " + min + "-" + max;
            }
            return null;
        }
    }

    /** One catalog entry: what a client on {@code device} (-1: none) is sent, its regions as indices into the fds. */
    public record Served(int device, Manifest manifest, int[] regionFds) {
    }

    /**
     * HANDOVER_CATALOG. Its fds: fd 0 is the listening socket, fds 1.. are the regions, each once, in the order
     * {@code regionFds} index them (index 0 is the message's fd 1).
     */
    public record Catalog(String build, String backend, String fingerprintSha256, int regionCount, List<Served> served,
            String report) {
        public byte[] encode() {
            FrameWriter w = new FrameWriter(MessageType.HANDOVER_CATALOG, 2).u16(LAYOUT).shortString(build)
                    .shortString(backend).shortString(fingerprintSha256).i32(regionCount).i32(served.size());
            for (Served s : served) {
                byte[] m = toArray(s.manifest().encode(2));
                w.i32(s.device()).blob(m).i32(s.regionFds().length);
                for (int i : s.regionFds()) {
                    w.i32(i);
                }
            }
            w.longString(report);
            return sealed(w.toArray());
        }

        /** Decodes and checks: the checksum, the layout, every manifest, every region index, the fd count. */
        public static Catalog decode(byte[] frame, int fdCount) {
            FrameReader r = checked(frame, MessageType.HANDOVER_CATALOG);
            int layout = r.u16("layout");
            if (layout != LAYOUT) {
                throw new ProtocolException("HANDOVER_CATALOG: layout " + layout + ", this build reads " + LAYOUT);
            }
            String build = r.shortString("build");
            String backend = r.shortString("backend");
            String sha = r.shortString("fingerprint_sha256");
            int regions = r.count("region_count", ProtocolDescriptor.MAX_FDS - 1);
            if (fdCount != regions + 1) {
                throw new ProtocolException("HANDOVER_CATALOG: " + fdCount + " fds for " + regions
                        + " regions and the listening socket");
            }
            int n = r.count("served_count", MAX_SERVED);
            List<Served> served = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                int device = r.i32("device");
                if (device < -1 || device > ProtocolDescriptor.MAX_DEVICE) {
                    throw new ProtocolException("HANDOVER_CATALOG: device " + device);
                }
                FrameReader m = FrameReader.of(r.blob("manifest", ProtocolDescriptor.MAX_FRAME));
                if (m.type() != MessageType.MANIFEST) {
                    throw new ProtocolException("HANDOVER_CATALOG: a manifest of type " + m.type());
                }
                Manifest manifest = Manifest.decode(m.requireVersion(2));
                int k = r.count("region_fd_count", ProtocolDescriptor.MAX_FDS);
                if (k != manifest.regions().size()) {
                    throw new ProtocolException("HANDOVER_CATALOG: device " + device + " has " + k + " fds for "
                            + manifest.regions().size() + " regions");
                }
                int[] idx = new int[k];
                for (int j = 0; j < k; j++) {
                    idx[j] = r.i32("region fd");
                    if (idx[j] < 0 || idx[j] >= regions) {
                        throw new ProtocolException("HANDOVER_CATALOG: region fd index " + idx[j] + " of " + regions);
                    }
                }
                if (!HexFormat.isSha256(sha) || !sha.equals(HexFormat.of(manifest.fingerprintSha256()))) {
                    throw new ProtocolException("HANDOVER_CATALOG: device " + device + "'s manifest has fingerprint "
                            + HexFormat.of(manifest.fingerprintSha256()) + ", the catalog " + sha);
                }
                served.add(new Served(device, manifest, idx));
            }
            if (served.stream().noneMatch(s -> s.device() == -1)) {
                throw new ProtocolException("HANDOVER_CATALOG: no host-only manifest (device -1)");
            }
            if (served.stream().map(Served::device).distinct().count() != served.size()) {
                throw new ProtocolException("HANDOVER_CATALOG: a device listed twice");
            }
            String report = r.longString("report", MAX_REPORT);
            r.raw(SHA256_BYTES, "checksum");
            r.end();
            return new Catalog(build, backend, sha, regions, List.copyOf(served), report);
        }
    }

    /** One connection handed over: where it was in the conversation, its peer, and its lease if it is one. */
    public record Connection(ConnectionPhase phase, int version, int pid, int uid, int gid, long leaseId,
            long leaseSinceNanos) {
    }

    /** HANDOVER_COMMIT. Its fds: fd 0 is the lock file, fd i+1 is connection i. */
    public record Commit(long nextLeaseId, List<Connection> connections) {
        public byte[] encode() {
            FrameWriter w = new FrameWriter(MessageType.HANDOVER_COMMIT, 2).i64(nextLeaseId).i32(connections.size());
            for (Connection c : connections) {
                w.u8(c.phase().code()).u16(c.version()).i32(c.pid()).i32(c.uid()).i32(c.gid()).i64(c.leaseId())
                        .i64(c.leaseSinceNanos());
            }
            return sealed(w.toArray());
        }

        public static Commit decode(byte[] frame, int fdCount) {
            FrameReader r = checked(frame, MessageType.HANDOVER_COMMIT);
            long next = r.i64("next_lease_id");
            int n = r.count("connection_count", MAX_CONNECTIONS);
            if (fdCount != n + 1) {
                throw new ProtocolException("HANDOVER_COMMIT: " + fdCount + " fds for " + n + " connections and the lock");
            }
            List<Connection> out = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                Connection c = new Connection(ConnectionPhase.of(r.u8("phase")), r.u16("version"), r.i32("pid"), r.i32("uid"), r.i32("gid"),
                        r.i64("lease_id"), r.i64("lease_since_ns"));
                if (c.version() < ProtocolDescriptor.MIN_VERSION || c.version() > ProtocolDescriptor.MAX_VERSION) {
                    throw new ProtocolException("HANDOVER_COMMIT: connection version " + c.version());
                }
                if ((c.phase() == ConnectionPhase.LEASE) != (c.leaseId() > 0) || c.leaseId() >= next) {
                    throw new ProtocolException("HANDOVER_COMMIT: lease id " + c.leaseId() + " (phase " + c.phase()
                            + ", next " + next + ")");
                }
                out.add(c);
            }
            r.raw(SHA256_BYTES, "checksum");
            r.end();
            return new Commit(next, List.copyOf(out));
        }
    }

    /** HANDOVER_ABORT: the successor's reason, for the predecessor's log. */
    public static ByteBuffer abort(String reason) {
        String r = reason.length() > 1000 ? reason.substring(0, 1000) + "..." : reason;
        return new FrameWriter(MessageType.HANDOVER_ABORT, 2).shortString(r).toBuffer();
    }

    public static String decodeAbort(FrameReader r) {
        String s = r.shortString("reason");
        r.end();
        return s;
    }

    /** The frame with a SHA-256 of itself appended. */
    private static byte[] sealed(byte[] frame) {
        byte[] out = Arrays.copyOf(frame, frame.length + SHA256_BYTES);
        System.arraycopy(sha256(frame, frame.length), 0, out, frame.length, SHA256_BYTES);
        return out;
    }

    /** A reader over {@code frame} once its trailing checksum matches and its type and version are {@code type}, 2. */
    private static FrameReader checked(byte[] frame, MessageType type) {
        if (frame.length < ProtocolDescriptor.HEADER_BYTES + SHA256_BYTES) {
            throw new ProtocolException(type + ": " + frame.length + " bytes, too short for its checksum");
        }
        byte[] want = Arrays.copyOfRange(frame, frame.length - SHA256_BYTES, frame.length);
        if (!MessageDigest.isEqual(want, sha256(frame, frame.length - SHA256_BYTES))) {
            throw new ProtocolException(type + ": the checksum does not match the content (corrupted in transit, or"
                    + " not written by an engram-host daemon)");
        }
        FrameReader r = FrameReader.of(frame);
        if (r.type() != type) {
            throw new ProtocolException("expected " + type + ", got " + r.type());
        }
        return r.requireVersion(2);
    }

    private static byte[] sha256(byte[] b, int n) {
        try {
            MessageDigest d = MessageDigest.getInstance("SHA-256");
            d.update(b, 0, n);
            return d.digest();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static byte[] toArray(ByteBuffer b) {
        byte[] out = new byte[b.remaining()];
        b.duplicate().get(out);
        return out;
    }

    /** Lower-case hex, as fingerprints are written everywhere else. */
    private static final class HexFormat {
        static String of(byte[] b) {
            return java.util.HexFormat.of().formatHex(b);
        }

        static boolean isSha256(String s) {
            return s.length() == 64 && s.chars().allMatch(c -> (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
        }
    }
}
