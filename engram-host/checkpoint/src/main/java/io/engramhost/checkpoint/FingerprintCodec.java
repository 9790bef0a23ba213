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
 *   magic "EGFP" | u16 encoding version (1 or 2) | u16 flags (0) | i32 layout version | str backend
 *   u32 count, str pattern ...
 *   u32 count, { str name | u64 size | 32 bytes header SHA-256 | v2: u8 content (0/1) [| 32 bytes SHA-256] } ...
 *   u32 count, { str name | str dtype | u32 rank | u64 dim ... | u64 bytes
 *                | v2: u8 identity (bit 0, bit 1) [| u64 engram digest v1] [| 32 bytes sha256-tree-v1] } ...
 *   str = u32 byte length | UTF-8 bytes
 * </pre>
 * A fingerprint without content identity is version 1 (as every earlier build encodes it), one with any is
 * version 2, and a version 2 encoding must carry some. Lists are sorted by name (code point order, which is UTF-8
 * byte order) with no duplicates; patterns likewise, and never empty. Decoding refuses anything else, and any
 * byte left over.
 */
final class FingerprintCodec {
    static final byte[] MAGIC = {'E', 'G', 'F', 'P'};
    /** The encoding without content identity. */
    static final int VERSION_1 = 1;
    /** The encoding with content identity. */
    static final int VERSION_2 = 2;
    /** The same rank limit as everywhere else ({@link Limits#MAX_RANK}). */
    static final int MAX_RANK = Limits.MAX_RANK;
    /** A table's identity byte: an engram digest v1 follows. */
    static final int ENGRAM_BIT = 1;
    /** A table's identity byte: a sha256-tree-v1 follows. */
    static final int TREE_BIT = 2;

    private FingerprintCodec() {
    }

    static byte[] encode(Fingerprint f) {
        boolean v2 = f.hasIdentity();
        Out out = new Out();
        out.raw(MAGIC).u16(v2 ? VERSION_2 : VERSION_1).u16(0).i32(f.layoutVersion()).str(f.backend());
        out.i32(f.patterns().size());
        f.patterns().forEach(out::str);
        out.i32(f.files().size());
        for (Fingerprint.FileEntry e : f.files()) {
            out.str(e.name()).i64(e.size()).raw(HexFormat.of().parseHex(e.headerSha256()));
            if (v2) {
                out.u8(e.hasContent() ? 1 : 0);
                if (e.hasContent()) {
                    out.raw(HexFormat.of().parseHex(e.contentSha256()));
                }
            }
        }
        out.i32(f.tables().size());
        for (Fingerprint.Table t : f.tables()) {
            long[] shape = t.shape();
            out.str(t.name()).str(t.dtype().name()).i32(shape.length);
            for (long d : shape) {
                out.i64(d);
            }
            out.i64(t.bytes());
            if (v2) {
                out.u8((t.engramDigest() != null ? ENGRAM_BIT : 0) | (t.treeDigest() != null ? TREE_BIT : 0));
                if (t.engramDigest() != null) {
                    out.i64(Long.parseUnsignedLong(t.engramDigest(), 16));
                }
                if (t.treeDigest() != null) {
                    out.raw(HexFormat.of().parseHex(t.treeDigest()));
                }
            }
        }
        return out.bytes();
    }

    static Fingerprint decode(byte[] bytes) {
        In in = new In(bytes);
        int version = fixedHead(in);
        boolean v2 = version == VERSION_2;
        int layout = in.i32();
        String backend = in.str("backend");
        List<String> patterns = new ArrayList<>();
        int n = patternCount(in);
        for (int i = 0; i < n; i++) {
            int at = in.pos;
            String p = in.str("pattern");
            in.ordered(at, "pattern", patterns.isEmpty() ? null : patterns.get(i - 1), p);
            patterns.add(p);
        }
        boolean identity = false;
        List<Fingerprint.FileEntry> files = new ArrayList<>();
        n = in.count("files", 4 + 8 + 32 + (v2 ? 1 : 0));
        for (int i = 0; i < n; i++) {
            int at = in.pos;
            String name = in.str("file name");
            in.ordered(at, "file", files.isEmpty() ? null : files.get(i - 1).name(), name);
            long size = in.nonNegative("file size");
            String sha = HexFormat.of().formatHex(in.raw(32, "header SHA-256"));
            String content = null;
            if (v2) {
                int flagAt = in.pos;
                int flag = in.u8("content flag");
                if (flag > 1) {
                    throw in.error(flagAt, "file '" + name + "': content flag " + flag + ", expected 0 or 1");
                }
                if (flag == 1) {
                    content = HexFormat.of().formatHex(in.raw(32, "content SHA-256"));
                    identity = true;
                }
            }
            files.add(new Fingerprint.FileEntry(name, size, sha, content));
        }
        List<Fingerprint.Table> tables = new ArrayList<>();
        n = in.count("tables", 4 + 4 + 4 + 8 + (v2 ? 1 : 0));
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
            String engram = null;
            String tree = null;
            if (v2) {
                int flagsAt = in.pos;
                int flags = in.u8("identity flags");
                if ((flags & ~(ENGRAM_BIT | TREE_BIT)) != 0) {
                    throw in.error(flagsAt, "table '" + name + "': identity flags 0x" + Integer.toHexString(flags)
                            + ", expected bits 0 and 1 only");
                }
                if ((flags & ENGRAM_BIT) != 0) {
                    engram = ContentDigest.hex(in.u64("engram digest v1"));
                }
                if ((flags & TREE_BIT) != 0) {
                    tree = HexFormat.of().formatHex(in.raw(32, TreeDigest.ALGORITHM));
                }
                identity |= flags != 0;
            }
            try {
                tables.add(new Fingerprint.Table(name, dtype, shape, length, engram, tree));
            } catch (IllegalArgumentException e) {
                throw in.error(bytesAt, e.getMessage());
            }
        }
        if (in.pos != bytes.length) {
            throw in.error(in.pos, (bytes.length - in.pos) + " bytes left over after the last table");
        }
        if (v2 && !identity) {
            throw in.error(4, "encoding version 2 but no file or table carries content identity: its canonical"
                    + " encoding is version 1");
        }
        return new Fingerprint(layout, backend, patterns, files, tables);
    }

    /** Magic, encoding version and flags, checked; returns the encoding version. */
    private static int fixedHead(In in) {
        byte[] magic = in.raw(4, "magic");
        if (!Arrays.equals(magic, MAGIC)) {
            throw in.error(0, "bad magic " + HexFormat.of().formatHex(magic) + ", expected \"EGFP\"");
        }
        int version = in.u16();
        if (version != VERSION_1 && version != VERSION_2) {
            throw in.error(4, "encoding version " + version + ", this build reads only 1 and 2");
        }
        int flags = in.u16();
        if (flags != 0) {
            throw in.error(6, "flags 0x" + Integer.toHexString(flags) + ", expected 0");
        }
        return version;
    }

    private static int patternCount(In in) {
        int n = in.count("patterns", 4);
        if (n == 0) {
            throw in.error(in.pos - 4, "no selection pattern (the canonical form has at least '*')");
        }
        return n;
    }

    /** The head of an encoded fingerprint: its encoding version, layout version, backend, where its files start. */
    record Head(int version, int layoutVersion, String backend, int filesAt) {
    }

    /**
     * Reads the head of an encoded fingerprint and steps over its patterns (each only by its length: no string is
     * made of them), checking the framing as {@link #decode} does; what follows is not read.
     */
    static Head head(byte[] bytes) {
        In in = new In(bytes);
        int version = fixedHead(in);
        int layout = in.i32();
        String backend = in.str("backend");
        int n = patternCount(in);
        for (int i = 0; i < n; i++) {
            in.skipStr("pattern");
        }
        return new Head(version, layout, backend, in.pos);
    }

    /**
     * Whether the files and tables of two encodings (after their heads, {@link #head}) are equal as
     * {@link Fingerprint#differences} judges them, without making objects of them: entry by entry, names, sizes,
     * header SHA-256, dtypes, shapes and byte counts exactly, each content SHA-256 and digest where both have it.
     * An expectation whose lists are malformed is not equal.
     */
    static boolean sameEntries(byte[] expectation, Head expected, byte[] actual, Head mine) {
        In e = new In(expectation);
        In a = new In(actual);
        e.pos = expected.filesAt();
        a.pos = mine.filesAt();
        boolean ev2 = expected.version() == VERSION_2;
        boolean av2 = mine.version() == VERSION_2;
        try {
            long files = e.u32();
            if (files != a.u32()) {
                return false;
            }
            for (long i = 0; i < files; i++) {
                int es = e.pos;
                int as = a.pos;
                e.skipStr("file name");
                e.skip(8 + 32, "file");
                a.skipStr("file name");
                a.skip(8 + 32, "file");
                if (!e.sameSpan(es, a, as)) {
                    return false;
                }
                int ec = ev2 ? e.u8("content flag") : 0;
                int ac = av2 ? a.u8("content flag") : 0;
                if (ec > 1 || !sameOptional(e, ec == 1, a, ac == 1, 32)) {
                    return false;
                }
            }
            long tables = e.u32();
            if (tables != a.u32()) {
                return false;
            }
            for (long i = 0; i < tables; i++) {
                int es = e.pos;
                int as = a.pos;
                e.skipTableHead();
                a.skipTableHead();
                if (!e.sameSpan(es, a, as)) {
                    return false;
                }
                int ef = ev2 ? e.u8("identity flags") : 0;
                int af = av2 ? a.u8("identity flags") : 0;
                if ((ef & ~(ENGRAM_BIT | TREE_BIT)) != 0 || !sameOptional(e, (ef & ENGRAM_BIT) != 0, a, (af & ENGRAM_BIT) != 0, 8)
                        || !sameOptional(e, (ef & TREE_BIT) != 0, a, (af & TREE_BIT) != 0, 32)) {
                    return false;
                }
            }
            return e.pos == expectation.length && a.pos == actual.length;
        } catch (IllegalArgumentException malformed) {
            return false;
        }
    }

    /** Steps over an optional value of {@code n} bytes on each side; unequal only when both have it and it differs. */
    private static boolean sameOptional(In e, boolean inE, In a, boolean inA, int n) {
        int es = e.pos;
        int as = a.pos;
        if (inE) {
            e.skip(n, "identity");
        }
        if (inA) {
            a.skip(n, "identity");
        }
        return !(inE && inA) || e.sameSpan(es, a, as);
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

        Out u8(int v) {
            buf.write(v);
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

        void skip(int n, String what) {
            need(n, what);
            pos += n;
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

        int u8(String what) {
            need(1, what);
            return buf.get(pos++) & 0xff;
        }

        long u32() {
            return Integer.toUnsignedLong(i32());
        }

        long u64(String what) {
            need(8, what);
            long v = buf.getLong(pos);
            pos += 8;
            return v;
        }

        /** Whether the bytes from {@code from} to here equal those of {@code other} from {@code otherFrom} to its position. */
        boolean sameSpan(int from, In other, int otherFrom) {
            return Arrays.equals(buf.array(), from, pos, other.buf.array(), otherFrom, other.pos);
        }

        /** Steps over a table's name, dtype, rank, dims and byte count, checking only that they are there. */
        void skipTableHead() {
            skipStr("table name");
            skipStr("dtype");
            long rank = u32();
            if (rank > MAX_RANK) {
                throw error(pos - 4, "rank " + rank + " exceeds " + MAX_RANK);
            }
            skip((int) rank * 8 + 8, "dims");
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
