package io.engramhost.seed;

import io.engramhost.util.Text;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Set;

/**
 * The seeding protocol's frames and their bounds (docs/seeding.md, "Wire format"). Every frame is an 8-byte header,
 * {@code u8 type, u8 0, u16 0, u32 payload length}, then the payload; integers little-endian. DATA's payload is its
 * 12-byte head and then the range's bytes, which the exporter sends straight from the region (sendfile).
 */
public final class SeedWire {
    public static final int HEADER = 8;
    /** "EGSD" read little-endian. */
    public static final int MAGIC = 0x44534745;
    public static final int VERSION = 1;

    public static final int HELLO = 1;
    public static final int CHALLENGE = 2;
    public static final int PROOF = 3;
    public static final int MANIFEST_REQUEST = 4;
    public static final int MANIFEST = 5;
    public static final int RANGE = 6;
    public static final int DATA = 7;
    public static final int ERROR = 8;

    public static final int HELLO_BYTES = 4 + 2 + 2 + SeedAuth.NONCE_BYTES + SeedAuth.ID_BYTES;
    public static final int CHALLENGE_BYTES = 2 + 2 + SeedAuth.NONCE_BYTES + SeedAuth.ID_BYTES + SeedAuth.MAC_BYTES;
    public static final int RANGE_BYTES = 16;
    public static final int DATA_HEAD_BYTES = 12;
    /** The largest payload an exporter reads: HELLO's. Anything longer is refused at its header. */
    public static final int MAX_REQUEST_PAYLOAD = HELLO_BYTES;
    /** The largest range one RANGE may ask for: one engram digest v1 chunk. */
    public static final long MAX_RANGE = 64L << 20;
    /** The largest MANIFEST a requester reads. */
    public static final int MAX_MANIFEST = 16 << 20;
    /** The most bytes of an ERROR's message. */
    public static final int MAX_MESSAGE = 1024;

    /** ERROR codes. */
    public static final int BAD_REQUEST = 1;
    public static final int NOT_AUTHENTICATED = 2;
    public static final int BUSY = 3;
    public static final int NOT_READY = 4;
    public static final int TIMED_OUT = 5;
    public static final int STOPPING = 6;

    private SeedWire() {
    }

    /** A frame's name, for messages. */
    public static String name(int type) {
        return switch (type) {
            case HELLO -> "HELLO";
            case CHALLENGE -> "CHALLENGE";
            case PROOF -> "PROOF";
            case MANIFEST_REQUEST -> "MANIFEST_REQUEST";
            case MANIFEST -> "MANIFEST";
            case RANGE -> "RANGE";
            case DATA -> "DATA";
            case ERROR -> "ERROR";
            default -> "type " + type;
        };
    }

    /** An ERROR code's name. */
    public static String codeName(int code) {
        return switch (code) {
            case BAD_REQUEST -> "BAD_REQUEST";
            case NOT_AUTHENTICATED -> "NOT_AUTHENTICATED";
            case BUSY -> "BUSY";
            case NOT_READY -> "NOT_READY";
            case TIMED_OUT -> "TIMED_OUT";
            case STOPPING -> "STOPPING";
            default -> "code " + code;
        };
    }

    /** A frame's header and payload in one heap buffer, positioned at 0. */
    public static ByteBuffer frame(int type, int payloadBytes) {
        ByteBuffer b = ByteBuffer.allocate(HEADER + payloadBytes).order(ByteOrder.LITTLE_ENDIAN);
        b.put((byte) type).put((byte) 0).putShort((short) 0).putInt(payloadBytes);
        return b;
    }

    /**
     * DATA's header and head alone (20 bytes), announcing {@code length} bytes of the range after them: the range
     * itself is sent from the region, never through a buffer.
     */
    public static ByteBuffer dataHead(int table, long offset, long length) {
        ByteBuffer b = ByteBuffer.allocate(HEADER + DATA_HEAD_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        b.put((byte) DATA).put((byte) 0).putShort((short) 0).putInt(Math.toIntExact(DATA_HEAD_BYTES + length));
        return b.putInt(table).putLong(offset).flip();
    }

    /** An ERROR frame, its message cut to {@link #MAX_MESSAGE} bytes. */
    public static ByteBuffer error(int code, String message) {
        byte[] m = message.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(m.length, MAX_MESSAGE);
        ByteBuffer b = frame(ERROR, 2 + 4 + n);
        b.putShort((short) code).putInt(n).put(m, 0, n);
        return b.flip();
    }

    /** One table of a MANIFEST: its name, bytes and engram digest v1 as the exporter computed it. */
    public record Table(String name, long bytes, long digest) {
    }

    /** A MANIFEST's payload: the exporter's fingerprint SHA-256 (32 bytes) and its tables. */
    public static ByteBuffer manifest(byte[] fingerprintSha256, List<Table> tables) {
        int n = 32 + 4;
        List<byte[]> names = new ArrayList<>();
        for (Table t : tables) {
            byte[] name = t.name().getBytes(StandardCharsets.UTF_8);
            names.add(name);
            n += 4 + name.length + 8 + 8;
        }
        ByteBuffer b = frame(MANIFEST, n);
        b.put(fingerprintSha256).putInt(tables.size());
        for (int i = 0; i < tables.size(); i++) {
            b.putInt(names.get(i).length).put(names.get(i)).putLong(tables.get(i).bytes()).putLong(tables.get(i).digest());
        }
        return b.flip();
    }

    /**
     * A decoded MANIFEST: {@code tables} those kept, {@code indices} each one's index in the MANIFEST (what a RANGE
     * names).
     */
    public record Manifest(String fingerprintSha256, List<Table> tables, List<Integer> indices) {
    }

    /** Decodes a MANIFEST payload strictly, keeping every table. */
    public static Manifest readManifest(ByteBuffer p) {
        return readManifest(p, null);
    }

    /**
     * Decodes a MANIFEST payload strictly (counts bounded by the bytes left, valid UTF-8, nothing left over), keeping
     * only the tables named in {@code wanted} (all when null): a requester holds no more of a peer's MANIFEST than the
     * tables it loads.
     */
    public static Manifest readManifest(ByteBuffer p, Set<String> wanted) {
        p.order(ByteOrder.LITTLE_ENDIAN);
        if (p.remaining() < 36) {
            throw new IllegalArgumentException("MANIFEST of " + p.remaining() + " bytes, shorter than its head");
        }
        byte[] fp = new byte[32];
        p.get(fp);
        long count = Integer.toUnsignedLong(p.getInt());
        if (count > p.remaining() / 20) {
            throw new IllegalArgumentException("MANIFEST: " + count + " tables cannot fit in " + p.remaining()
                    + " bytes");
        }
        List<Table> out = new ArrayList<>();
        List<Integer> indices = new ArrayList<>();
        for (long i = 0; i < count; i++) {
            if (p.remaining() < 4) {
                throw new IllegalArgumentException("MANIFEST: table " + i + " is cut short");
            }
            long len = Integer.toUnsignedLong(p.getInt());
            if (len > p.remaining() - 16 || len > 65536) {
                throw new IllegalArgumentException("MANIFEST: table " + i + "'s name of " + len + " bytes does not fit");
            }
            byte[] name = new byte[(int) len];
            p.get(name);
            String s;
            try {
                s = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(name)).toString();
            } catch (CharacterCodingException e) {
                throw new IllegalArgumentException("MANIFEST: table " + i + "'s name is not UTF-8", e);
            }
            long bytes = p.getLong();
            long digest = p.getLong();
            if (bytes < 0) {
                throw new IllegalArgumentException("MANIFEST: table '" + Text.oneLine(s) + "' of " + bytes + " bytes");
            }
            if (wanted == null || wanted.contains(s)) {
                out.add(new Table(s, bytes, digest));
                indices.add((int) i);
            }
        }
        if (p.hasRemaining()) {
            throw new IllegalArgumentException("MANIFEST: " + p.remaining() + " bytes left over");
        }
        return new Manifest(HexFormat.of().formatHex(fp), List.copyOf(out), List.copyOf(indices));
    }
}
