package io.engramhost.checkpoint;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;

/**
 * The canonical binary form of a {@link Fingerprint}, little-endian throughout:
 * <pre>
 *   magic "EGFP" | u16 encoding version (1) | u16 flags (0) | i32 layout version | str backend
 *   u32 count, str pattern ...
 *   u32 count, { str name | u64 size | 32 bytes header SHA-256 } ...
 *   u32 count, { str name | str dtype | u32 rank | u64 dim ... | u64 bytes } ...
 *   str = u32 byte length | UTF-8 bytes
 * </pre>
 * Lists are sorted by name (code point order, which is UTF-8 byte order) with no duplicates; patterns
 * likewise, and never empty. Decoding refuses anything else, and any byte left over.
 */
final class FingerprintCodec {
    static final byte[] MAGIC = {'E', 'G', 'F', 'P'};
    static final int VERSION = 1;
    /** The same rank limit as everywhere else ({@link Limits#MAX_RANK}). */
    static final int MAX_RANK = Limits.MAX_RANK;

    private FingerprintCodec() {
    }

    static byte[] encode(Fingerprint f) {
        Out out = new Out();
        out.raw(MAGIC).u16(VERSION).u16(0).i32(f.layoutVersion()).str(f.backend());
        out.i32(f.patterns().size());
        f.patterns().forEach(out::str);
        out.i32(f.files().size());
        for (Fingerprint.FileEntry e : f.files()) {
            out.str(e.name()).i64(e.size()).raw(HexFormat.of().parseHex(e.headerSha256()));
        }
        out.i32(f.tables().size());
        for (Fingerprint.Table t : f.tables()) {
            long[] shape = t.shape();
            out.str(t.name()).str(t.dtype().name()).i32(shape.length);
            for (long d : shape) {
                out.i64(d);
            }
            out.i64(t.bytes());
        }
        return out.bytes();
    }

    static Fingerprint decode(byte[] bytes) {
        In in = new In(bytes);
        int layout = fixedHead(in);
        String backend = in.str("backend");
        List<String> patterns = new ArrayList<>();
        int n = patternCount(in);
        for (int i = 0; i < n; i++) {
            int at = in.pos;
            String p = in.str("pattern");
            in.ordered(at, "pattern", patterns.isEmpty() ? null : patterns.get(i - 1), p);
            patterns.add(p);
        }
        List<Fingerprint.FileEntry> files = new ArrayList<>();
        n = in.count("files", 4 + 8 + 32);
        for (int i = 0; i < n; i++) {
            int at = in.pos;
            String name = in.str("file name");
            in.ordered(at, "file", files.isEmpty() ? null : files.get(i - 1).name(), name);
            long size = in.nonNegative("file size");
            String sha = HexFormat.of().formatHex(in.raw(32, "header SHA-256"));
            files.add(new Fingerprint.FileEntry(name, size, sha));
        }
        List<Fingerprint.Table> tables = new ArrayList<>();
        n = in.count("tables", 4 + 4 + 4 + 8);
        for (int i = 0; i < n; i++) {
            int at = in.pos;
            String name = in.str("table name");
            in.ordered(at, "table", tables.isEmpty() ? null : tables.get(i - 1).name(), name);
            int dtypeAt = in.pos;
            String dtypeName = in.str("dtype");
            DType dtype;
            try {
                dtype = DType.parse(dtypeName);
            } catch (IllegalArgumentException e) {
                throw in.error(dtypeAt, "table '" + name + "': unknown dtype '" + dtypeName + "'");
            }
            int rankAt = in.pos;
            int rank = in.i32();
            if (rank < 0 || rank > MAX_RANK) {
                throw in.error(rankAt, "table '" + name + "': rank " + Integer.toUnsignedString(rank) + " exceeds "
                        + MAX_RANK);
            }
            long[] shape = new long[rank];
            for (int d = 0; d < rank; d++) {
                shape[d] = in.nonNegative("dimension");
            }
            int bytesAt = in.pos;
            long length = in.nonNegative("table bytes");
            try {
                tables.add(new Fingerprint.Table(name, dtype, shape, length));
            } catch (IllegalArgumentException e) {
                throw in.error(bytesAt, e.getMessage());
            }
        }
        if (in.pos != bytes.length) {
            throw in.error(in.pos, (bytes.length - in.pos) + " bytes left over after the last table");
        }
        return new Fingerprint(layout, backend, patterns, files, tables);
    }

    /** Magic, encoding version and flags, checked; returns the layout version that follows them. */
    private static int fixedHead(In in) {
        byte[] magic = in.raw(4, "magic");
        if (!Arrays.equals(magic, MAGIC)) {
            throw in.error(0, "bad magic " + HexFormat.of().formatHex(magic) + ", expected \"EGFP\"");
        }
        int version = in.u16();
        if (version != VERSION) {
            throw in.error(4, "encoding version " + version + ", this build reads only " + VERSION);
        }
        int flags = in.u16();
        if (flags != 0) {
            throw in.error(6, "flags 0x" + Integer.toHexString(flags) + ", expected 0");
        }
        return in.i32();
    }

    private static int patternCount(In in) {
        int n = in.count("patterns", 4);
        if (n == 0) {
            throw in.error(in.pos - 4, "no selection pattern (the canonical form has at least '*')");
        }
        return n;
    }

    /** The head of an encoded fingerprint: its layout version, its backend, and where its file list starts. */
    record Head(int layoutVersion, String backend, int filesAt) {
    }

    /**
     * Reads the head of an encoded fingerprint and steps over its patterns (each only by its length: no string is
     * made of them), checking the framing as {@link #decode} does; what follows is not read.
     */
    static Head head(byte[] bytes) {
        In in = new In(bytes);
        int layout = fixedHead(in);
        String backend = in.str("backend");
        int n = patternCount(in);
        for (int i = 0; i < n; i++) {
            in.skipStr("pattern");
        }
        return new Head(layout, backend, in.pos);
    }

    /**
     * Code point order: the order of the UTF-8 bytes. Without allocating (sorting thousands of 4 KiB names
     * must not cost gigabytes of garbage): UTF-16 order is code point order except where both differing
     * chars are at or above U+D800, where surrogates (supplementary code points) must sort after U+E000..U+FFFF.
     */
    static int compareNames(String a, String b) {
        int n = Math.min(a.length(), b.length());
        for (int i = 0; i < n; i++) {
            char x = a.charAt(i);
            char y = b.charAt(i);
            if (x != y) {
                if (x >= 0xD800 && y >= 0xD800) {
                    return codePointRank(x) - codePointRank(y);
                }
                return x - y;
            }
        }
        return a.length() - b.length();
    }

    /** For a char at or above U+D800: surrogates moved above U+E000..U+FFFF, keeping each range's order. */
    private static int codePointRank(char c) {
        return c >= 0xE000 ? c - 0x800 : c + 0x2000;
    }

    private static final class Out {
        private final ByteArrayOutputStream buf = new ByteArrayOutputStream();
        private final ByteBuffer scratch = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);

        Out raw(byte[] b) {
            buf.write(b, 0, b.length);
            return this;
        }

        Out u16(int v) {
            scratch.clear();
            buf.write(scratch.putShort((short) v).array(), 0, 2);
            return this;
        }

        Out i32(int v) {
            scratch.clear();
            buf.write(scratch.putInt(v).array(), 0, 4);
            return this;
        }

        Out i64(long v) {
            scratch.clear();
            buf.write(scratch.putLong(v).array(), 0, 8);
            return this;
        }

        Out str(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            return i32(b.length).raw(b);
        }

        byte[] bytes() {
            return buf.toByteArray();
        }
    }

    private static final class In {
        private final ByteBuffer buf;
        int pos;

        In(byte[] bytes) {
            this.buf = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        }

        IllegalArgumentException error(int at, String problem) {
            return new IllegalArgumentException("fingerprint at byte " + at + ": " + problem);
        }

        private void need(int n, String what) {
            if (buf.capacity() - pos < n) {
                throw error(pos, what + " needs " + n + " bytes but only " + (buf.capacity() - pos) + " are left");
            }
        }

        byte[] raw(int n, String what) {
            need(n, what);
            byte[] b = Arrays.copyOfRange(buf.array(), pos, pos + n);
            pos += n;
            return b;
        }

        int u16() {
            need(2, "u16");
            int v = buf.getShort(pos) & 0xffff;
            pos += 2;
            return v;
        }

        int i32() {
            need(4, "u32");
            int v = buf.getInt(pos);
            pos += 4;
            return v;
        }

        long nonNegative(String what) {
            need(8, what);
            long v = buf.getLong(pos);
            if (v < 0) {
                throw error(pos, what + " " + Long.toUnsignedString(v) + " exceeds 2^63 - 1");
            }
            pos += 8;
            return v;
        }

        /** A count whose entries take at least {@code minEntry} bytes each: bounded by what is left. */
        int count(String what, int minEntry) {
            int at = pos;
            long n = Integer.toUnsignedLong(i32());
            if (n * minEntry > buf.capacity() - pos) {
                throw error(at, n + " " + what + " cannot fit in the " + (buf.capacity() - pos) + " bytes left");
            }
            return (int) n;
        }

        String str(String what) {
            int at = pos;
            long n = Integer.toUnsignedLong(i32());
            if (n > buf.capacity() - pos) {
                throw error(at, what + " of " + n + " bytes runs past the end (" + (buf.capacity() - pos) + " left)");
            }
            try {
                String s = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(ByteBuffer.wrap(buf.array(), pos, (int) n)).toString();
                pos += (int) n;
                return s;
            } catch (CharacterCodingException e) {
                throw error(at, what + " is not valid UTF-8");
            }
        }

        void skipStr(String what) {
            int at = pos;
            long n = Integer.toUnsignedLong(i32());
            if (n > buf.capacity() - pos) {
                throw error(at, what + " of " + n + " bytes runs past the end (" + (buf.capacity() - pos) + " left)");
            }
            pos += (int) n;
        }

        void ordered(int at, String what, String previous, String name) {
            if (previous != null && compareNames(previous, name) >= 0) {
                throw error(at, what + " '" + name + "' " + (previous.equals(name) ? "is repeated" : "is out of order"
                        + " (after '" + previous + "')"));
            }
        }
    }
}
