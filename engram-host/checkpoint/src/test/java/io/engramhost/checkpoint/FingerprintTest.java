package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class FingerprintTest {
    private static final String SHA_A = "a".repeat(64);
    private static final String SHA_B = "b".repeat(64);

    @TempDir
    Path dir;

    private static Fingerprint small() {
        return new Fingerprint(1, "memfd", List.of("t*"), List.of(new Fingerprint.FileEntry("m.safetensors", 100, SHA_A)),
                List.of(new Fingerprint.Table("t", DType.F4, new long[] {2, 2}, 2)));
    }

    @Test
    void shouldOrderNamesByCodePointsLikeTheirUtf8Bytes() {
        java.util.Random rnd = new java.util.Random(17);
        String[] alphabet = {"a", "z", "\u00e9", "\ud7ff", "\ue000", "\uffff", "\ud800\udc00", "\udbff\udfff",
                "\ud83d\ude00", "\uff21"};
        for (int i = 0; i < 20_000; i++) {
            StringBuilder a = new StringBuilder();
            StringBuilder b = new StringBuilder();
            String common = alphabet[rnd.nextInt(alphabet.length)];
            a.append(common);
            b.append(common);
            for (int k = rnd.nextInt(3); k >= 0; k--) {
                a.append(alphabet[rnd.nextInt(alphabet.length)]);
                b.append(alphabet[rnd.nextInt(alphabet.length)]);
            }
            String x = a.toString();
            String y = b.toString();
            int bytes = java.util.Arrays.compareUnsigned(x.getBytes(java.nio.charset.StandardCharsets.UTF_8),
                    y.getBytes(java.nio.charset.StandardCharsets.UTF_8));
            assertEquals(Integer.signum(bytes), Integer.signum(FingerprintCodec.compareNames(x, y)), x + " vs " + y);
        }
    }

    @Test
    void shouldDescribeTheSelectedTablesAndTheirFilesOnly() throws IOException {
        Path index = CheckpointGenerator.writeSharded(dir, new CheckpointGenerator.Spec(List.of(1, 14), 8, 64, 3));
        Checkpoint c = Checkpoint.open(index);
        Fingerprint f = Fingerprint.of(c, List.of("engram.layers.14.*"), "cuda-vmm", 2);
        assertEquals(2, f.layoutVersion());
        assertEquals("cuda-vmm", f.backend());
        assertEquals(List.of("engram.layers.14.*"), f.patterns());
        SafetensorsFile shard = c.files().get(1);
        assertEquals(List.of(new Fingerprint.FileEntry("model-00002-of-00002.safetensors", Files.size(shard.path()),
                shard.headerSha256Hex())), f.files());
        assertEquals(List.of(new Fingerprint.Table("engram.layers.14.embedding.scale", DType.F8_E8M0, new long[] {8, 2}, 16),
                new Fingerprint.Table("engram.layers.14.embedding.weight", DType.F8_E4M3, new long[] {8, 64}, 512)),
                f.tables());
    }

    @Test
    void shouldNotDependOnWhereTheCheckpointLies() throws IOException {
        CheckpointGenerator.Spec spec = new CheckpointGenerator.Spec(List.of(1), 8, 64, 3);
        Path a = CheckpointGenerator.writeSingle(dir.resolve("a"), spec);
        Path b = CheckpointGenerator.writeSingle(dir.resolve("b/c"), spec);
        Fingerprint fa = Fingerprint.of(Checkpoint.open(a), List.of(), "", 1);
        Fingerprint fb = Fingerprint.of(Checkpoint.open(b), List.of("*"), "", 1);
        assertEquals(fa, fb);
        assertArrayEquals(fa.canonicalBytes(), fb.canonicalBytes());
        assertEquals(fa.sha256Hex(), fb.sha256Hex());
        assertTrue(fa.sha256Hex().matches("[0-9a-f]{64}"));
    }

    @Test
    void shouldRoundTripItsCanonicalBytes() throws Exception {
        Fingerprint f = Fingerprint.of(Checkpoint.open(CheckpointGenerator.writeSharded(dir,
                new CheckpointGenerator.Spec(List.of(1, 14), 4, 32, 9))), List.of("*.weight", "*.scale"), "memfd", 7);
        byte[] bytes = f.canonicalBytes();
        Fingerprint back = Fingerprint.decode(bytes);
        assertEquals(f, back);
        assertArrayEquals(bytes, back.canonicalBytes());
        assertEquals(HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes)), f.sha256Hex());
    }

    @Test
    void shouldEncodeExactlyAsDocumented() {
        byte[] name = "m.safetensors".getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(4 + 2 + 2 + 4 + (4 + 5) + 4 + (4 + 2) + 4 + (4 + name.length + 8 + 32)
                + 4 + (4 + 1 + 4 + 2 + 4 + 8 + 8 + 8)).order(ByteOrder.LITTLE_ENDIAN);
        b.put("EGFP".getBytes(StandardCharsets.US_ASCII)).putShort((short) 1).putShort((short) 0).putInt(1);
        b.putInt(5).put("memfd".getBytes(StandardCharsets.US_ASCII));
        b.putInt(1).putInt(2).put("t*".getBytes(StandardCharsets.US_ASCII));
        b.putInt(1).putInt(name.length).put(name).putLong(100).put(HexFormat.of().parseHex(SHA_A));
        b.putInt(1).putInt(1).put((byte) 't').putInt(2).put("F4".getBytes(StandardCharsets.US_ASCII)).putInt(2)
                .putLong(2).putLong(2).putLong(2);
        assertArrayEquals(b.array(), small().canonicalBytes());
    }

    /** Computed by the code before fingerprints could carry content identity: these values must never change. */
    static final String SMALL_SHA256 = "4e020b11617e03bac53b83d18499dc6d4da60fd77a614d2c32b83182fd954219";
    static final String ENGRAM_SHA256 = "f661020b90c41b4d950d122498bd5a1290b3509b012d690a69f8140829e65464";
    /** {@link #engram()} encoded by that code (version 1). */
    static final String ENGRAM_V1 = "4547465001000000010000000000000001000000170000006c61796572732e2a2e656e6772616d2e"
            + "656d6265642e2a02000000200000006d6f64656c2d30303030312d6f662d30303030322e7361666574656e736f727340e2010000"
            + "0000000123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef200000006d6f64656c2d30303030322d6f"
            + "662d30303030322e7361666574656e736f7273f1fb090000000000fedcba9876543210fedcba9876543210fedcba9876543210fe"
            + "dcba9876543210020000001b0000006c61796572732e312e656e6772616d2e656d6265642e7363616c650700000046385f45384d"
            + "3002000000e8030000000000000800000000000000401f0000000000001c0000006c61796572732e312e656e6772616d2e656d62"
            + "65642e7765696768740700000046385f45344d3302000000e803000000000000000100000000000000e8030000000000";

    /** Two files and two tables of the published layout, no content identity. */
    static Fingerprint engram() {
        return new Fingerprint(1, "", List.of("layers.*.engram.embed.*"), List.of(
                new Fingerprint.FileEntry("model-00001-of-00002.safetensors", 123456, "0123456789abcdef".repeat(4)),
                new Fingerprint.FileEntry("model-00002-of-00002.safetensors", 654321, "fedcba9876543210".repeat(4))),
                List.of(new Fingerprint.Table("layers.1.engram.embed.scale", DType.F8_E8M0, new long[] {1000, 8}, 8000),
                        new Fingerprint.Table("layers.1.engram.embed.weight", DType.F8_E4M3, new long[] {1000, 256},
                                256000)));
    }

    @Test
    void shouldKeepTheSha256ThatEarlierBuildsGaveAFingerprint() {
        assertEquals(SMALL_SHA256, small().sha256Hex());
        assertEquals(ENGRAM_SHA256, engram().sha256Hex());
        assertEquals(ENGRAM_V1, HexFormat.of().formatHex(engram().canonicalBytes()));
        assertEquals(engram(), Fingerprint.decode(HexFormat.of().parseHex(ENGRAM_V1)));
    }

    @Test
    void shouldPutItselfInCanonicalForm() {
        Fingerprint f = new Fingerprint(1, "", List.of("b", "a", "b"), List.of(
                new Fingerprint.FileEntry("z", 1, SHA_A), new Fingerprint.FileEntry("\u00e9", 2, SHA_B),
                new Fingerprint.FileEntry("\ud83d\ude00", 3, SHA_A), new Fingerprint.FileEntry("\uffff", 4, SHA_A)),
                List.of());
        assertEquals(List.of("a", "b"), f.patterns());
        assertEquals(List.of("z", "\u00e9", "\uffff", "\ud83d\ude00"), f.files().stream().map(Fingerprint.FileEntry::name)
                .toList(), "code point order puts U+1F600 after U+FFFF");
        assertEquals(List.of("*"), new Fingerprint(1, "", List.of(), List.of(), List.of()).patterns());
        assertEquals("two tables named 't'", assertThrows(IllegalArgumentException.class, () -> new Fingerprint(1, "",
                List.of(), List.of(), List.of(new Fingerprint.Table("t", DType.U8, new long[] {1}, 1),
                        new Fingerprint.Table("t", DType.U8, new long[] {1}, 1)))).getMessage());
        assertEquals("table 't': BF16 [3] is 6 bytes, not 5", assertThrows(IllegalArgumentException.class,
                () -> new Fingerprint.Table("t", DType.BF16, new long[] {3}, 5)).getMessage());
        assertThrows(IllegalArgumentException.class, () -> new Fingerprint.FileEntry("f", 1, "ABC"));
        assertEquals(f, Fingerprint.decode(f.canonicalBytes()));
    }

    @Test
    void shouldRefuseEveryTruncation() {
        byte[] bytes = small().canonicalBytes();
        for (int n = 0; n < bytes.length; n++) {
            byte[] cut = Arrays.copyOf(bytes, n);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Fingerprint.decode(cut),
                    "prefix of " + n + " bytes");
            assertTrue(e.getMessage().startsWith("fingerprint at byte "), e.getMessage());
        }
    }

    @Test
    void shouldRefuseMalformedBytesNamingWhere() {
        byte[] good = small().canonicalBytes();
        assertDecodeError(patch(good, 0, (byte) 'X'), "fingerprint at byte 0: bad magic 58474650, expected \"EGFP\"");
        assertDecodeError(patch(good, 4, (byte) 3), "fingerprint at byte 4: encoding version 3, this build reads only 1"
                + " and 2");
        assertDecodeError(patch(good, 6, (byte) 1), "fingerprint at byte 6: flags 0x1, expected 0");
        byte[] longer = Arrays.copyOf(good, good.length + 3);
        assertDecodeError(longer, "fingerprint at byte " + good.length + ": 3 bytes left over after the last table");
        assertDecodeError(patch(good, 12, (byte) 0xff, (byte) 0xff, (byte) 0xff, (byte) 0x7f),
                "fingerprint at byte 12: backend of 2147483647 bytes runs past the end (" + (good.length - 16) + " left)");
        assertDecodeError(patch(good, 21, (byte) 0xff, (byte) 0xff, (byte) 0xff, (byte) 0xff),
                "fingerprint at byte 21: 4294967295 patterns cannot fit in the " + (good.length - 25) + " bytes left");
        assertDecodeError(patch(good, 21, (byte) 0), "fingerprint at byte 21: no selection pattern (the canonical form"
                + " has at least '*')");
        assertDecodeError(patch(good, 29, (byte) 0xc3), "fingerprint at byte 25: pattern is not valid UTF-8");
        int sizeAt = 31 + 4 + 4 + "m.safetensors".length();
        assertDecodeError(patch(good, sizeAt + 7, (byte) 0x80), "fingerprint at byte " + sizeAt
                + ": file size 9223372036854775908 exceeds 2^63 - 1");
        int tableAt = sizeAt + 8 + 32 + 4;
        assertDecodeError(patch(good, tableAt + 4 + 1 + 4 + 1, (byte) '9'),
                "fingerprint at byte " + (tableAt + 5) + ": table 't': unknown dtype 'F9'");
        assertDecodeError(patch(good, tableAt + 4 + 1 + 4 + 2, (byte) 17),
                "fingerprint at byte " + (tableAt + 11) + ": table 't': rank 17 exceeds 16");
        assertDecodeError(patch(good, good.length - 8, (byte) 3),
                "fingerprint at byte " + (good.length - 8) + ": table 't': F4 [2, 2] is 2 bytes, not 3");
    }

    @Test
    void shouldRefuseNonCanonicalOrder() {
        Fingerprint two = new Fingerprint(1, "", List.of("*"), List.of(), List.of(
                new Fingerprint.Table("a", DType.U8, new long[] {1}, 1), new Fingerprint.Table("b", DType.U8, new long[] {1}, 1)));
        byte[] bytes = two.canonicalBytes();
        // magic..layout 12, backend "" 4, patterns 4 + (4 + 1), files 4, tables 4; a table: 5 + 6 + 4 + 8 + 8
        int first = 12 + 4 + 4 + 5 + 4 + 4;
        int second = first + 31;
        assertEquals('a', bytes[first + 4]);
        assertEquals('b', bytes[second + 4]);
        assertDecodeError(patch(patch(bytes, first + 4, (byte) 'b'), second + 4, (byte) 'a'),
                "fingerprint at byte " + second + ": table 'a' is out of order (after 'b')");
        assertDecodeError(patch(bytes, second + 4, (byte) 'a'), "fingerprint at byte " + second + ": table 'a' is repeated");
    }

    @Test
    void shouldListEveryDifference() {
        Fingerprint expected = new Fingerprint(1, "cuda-vmm", List.of("*"), List.of(
                new Fingerprint.FileEntry("a", 10, SHA_A), new Fingerprint.FileEntry("b", 20, SHA_A),
                new Fingerprint.FileEntry("c", 30, SHA_A)), List.of(
                new Fingerprint.Table("t1", DType.F8_E4M3, new long[] {4, 256}, 1024),
                new Fingerprint.Table("t2", DType.F8_E8M0, new long[] {4, 8}, 32),
                new Fingerprint.Table("t3", DType.BF16, new long[] {2}, 4),
                new Fingerprint.Table("t4", DType.U8, new long[] {1}, 1)));
        Fingerprint actual = new Fingerprint(2, "memfd", List.of("*"), List.of(
                new Fingerprint.FileEntry("a", 11, SHA_B), new Fingerprint.FileEntry("c", 30, SHA_A),
                new Fingerprint.FileEntry("d", 1, SHA_A)), List.of(
                new Fingerprint.Table("t1", DType.I8, new long[] {4, 256}, 1024),
                new Fingerprint.Table("t2", DType.F8_E8M0, new long[] {8, 4}, 32),
                new Fingerprint.Table("t3", DType.BF16, new long[] {3}, 6),
                new Fingerprint.Table("t5", DType.U8, new long[] {1}, 1)));
        assertEquals(List.of(
                "layout version: expected 1, actual 2",
                "backend: expected 'cuda-vmm', actual 'memfd'",
                "file 'a': size expected 10, actual 11",
                "file 'a': header SHA-256 expected " + SHA_A + ", actual " + SHA_B,
                "file 'b': missing",
                "file 'd': not expected",
                "table 't1': dtype expected F8_E4M3, actual I8",
                "table 't2': shape expected [4, 8], actual [8, 4]",
                "table 't3': shape expected [2], actual [3]",
                "table 't3': bytes expected 4, actual 6",
                "table 't4': missing",
                "table 't5': not expected"), expected.differences(actual));
        assertEquals(List.of(), expected.differences(expected));
    }

    @Test
    void shouldIgnoreTheBackendWhenTheExpectationNamesNone() {
        Fingerprint any = new Fingerprint(1, "", List.of("*"), List.of(), List.of());
        Fingerprint memfd = new Fingerprint(1, "memfd", List.of("x*"), List.of(), List.of());
        assertEquals(List.of(), any.differences(memfd));
        assertEquals(List.of("backend: expected 'memfd', actual ''"), memfd.differences(any));
        assertNotEquals(any.sha256Hex(), memfd.sha256Hex());
    }

    @Test
    void shouldCompareAnEncodedExpectationWholeAsAStructuredComparisonWould() {
        List<Fingerprint.FileEntry> files = List.of(new Fingerprint.FileEntry("a", 10, SHA_A));
        List<Fingerprint.Table> tables = List.of(new Fingerprint.Table("t1", DType.F8_E4M3, new long[] {4, 256}, 1024),
                new Fingerprint.Table("t2", DType.BF16, new long[] {2}, 4));
        Fingerprint served = new Fingerprint(1, "memfd", List.of("t*"), files, tables);
        byte[] actual = served.canonicalBytes();
        // the same files and tables: any backend, the served one, other patterns: all match, as differences() says
        for (Fingerprint e : List.of(new Fingerprint(1, "", List.of("*"), files, tables),
                new Fingerprint(1, "memfd", List.of("a", "b", "t?"), files, tables), served)) {
            assertEquals(List.of(), e.differences(served));
            assertEquals(List.of(), Fingerprint.differencesFromEncoded(e.canonicalBytes(), actual));
        }
        // each kind of difference: one line for the head's, one for the lists
        assertEquals(List.of("layout version: expected 2, actual 1", "backend: expected 'cuda-vmm', actual 'memfd'"),
                Fingerprint.differencesFromEncoded(new Fingerprint(2, "cuda-vmm", List.of("*"), files, tables)
                        .canonicalBytes(), actual));
        for (Fingerprint e : List.of(new Fingerprint(1, "", List.of("*"), List.of(), tables),
                new Fingerprint(1, "", List.of("*"), files, tables.subList(0, 1)),
                new Fingerprint(1, "", List.of("*"), files, List.of(tables.get(0),
                        new Fingerprint.Table("t2", DType.BF16, new long[] {3}, 6))))) {
            assertTrue(!e.differences(served).isEmpty());
            List<String> d = Fingerprint.differencesFromEncoded(e.canonicalBytes(), actual);
            assertEquals(1, d.size(), d.toString());
            assertTrue(d.get(0).startsWith("files or tables differ from the daemon's"), d.get(0));
        }
        // trailing bytes are a difference, not a match
        byte[] longer = Arrays.copyOf(actual, actual.length + 1);
        assertEquals(1, Fingerprint.differencesFromEncoded(longer, actual).size());
        // a malformed head is refused as decode() refuses it, naming the byte; the lists are not read
        assertEquals("fingerprint at byte 0: bad magic 58474650, expected \"EGFP\"", assertThrows(IllegalArgumentException.class,
                        () -> Fingerprint.differencesFromEncoded(patch(actual, 0, (byte) 'X'), actual)).getMessage());
        byte[] hugePattern = patch(actual, 25, // the first pattern's length: after the head (12), "memfd" (4 + 5), the count (4)
                (byte) 0xff, (byte) 0xff, (byte) 0xff, (byte) 0x7f);
        assertTrue(assertThrows(IllegalArgumentException.class,
                () -> Fingerprint.differencesFromEncoded(hugePattern, actual)).getMessage().contains("runs past the end"));
    }

    static final String TREE_A = "3f".repeat(32);
    static final String TREE_B = "0c".repeat(32);
    static final String CONTENT_A = "c1".repeat(32);
    static final String CONTENT_B = "c2".repeat(32);

    /** {@link #engram()} with content identity: the first file a snapshot file, the weight with both digests. */
    static Fingerprint engramWithIdentity() {
        Fingerprint f = engram();
        return new Fingerprint(1, "", f.patterns(), List.of(withContent(f.files().get(0), CONTENT_A), f.files().get(1)),
                List.of(f.tables().get(0).withDigests(null), f.tables().get(1).withDigests(
                        new TableDigests("0123456789abcdef", TREE_A))));
    }

    static Fingerprint.FileEntry withContent(Fingerprint.FileEntry e, String content) {
        return new Fingerprint.FileEntry(e.name(), e.size(), e.headerSha256(), content);
    }

    @Test
    void shouldEncodeContentIdentityAsVersion2ExactlyAsDocumented() {
        Fingerprint f = new Fingerprint(1, "", List.of("*"), List.of(new Fingerprint.FileEntry("f", 7, SHA_A, SHA_B),
                new Fingerprint.FileEntry("g", 8, SHA_B)), List.of(
                new Fingerprint.Table("t", DType.U8, new long[] {1}, 1, "00000000000000ff", TREE_A),
                new Fingerprint.Table("u", DType.U8, new long[] {}, 1, null, TREE_B),
                new Fingerprint.Table("v", DType.U8, new long[] {2}, 2)));
        ByteBuffer b = ByteBuffer.allocate(4 + 2 + 2 + 4 + 4 + 4 + 5 + 4 + (5 + 8 + 32 + 1 + 32) + (5 + 8 + 32 + 1)
                + 4 + (5 + 6 + 4 + 8 + 8 + 1 + 8 + 32) + (5 + 6 + 4 + 8 + 1 + 32) + (5 + 6 + 4 + 8 + 8 + 1))
                .order(ByteOrder.LITTLE_ENDIAN);
        b.put("EGFP".getBytes(StandardCharsets.US_ASCII)).putShort((short) 2).putShort((short) 0).putInt(1).putInt(0);
        b.putInt(1).putInt(1).put((byte) '*');
        b.putInt(2);
        b.putInt(1).put((byte) 'f').putLong(7).put(HexFormat.of().parseHex(SHA_A)).put((byte) 1)
                .put(HexFormat.of().parseHex(SHA_B));
        b.putInt(1).put((byte) 'g').putLong(8).put(HexFormat.of().parseHex(SHA_B)).put((byte) 0);
        b.putInt(3);
        b.putInt(1).put((byte) 't').putInt(2).put("U8".getBytes(StandardCharsets.US_ASCII)).putInt(1).putLong(1)
                .putLong(1).put((byte) 3).putLong(0xff).put(HexFormat.of().parseHex(TREE_A));
        b.putInt(1).put((byte) 'u').putInt(2).put("U8".getBytes(StandardCharsets.US_ASCII)).putInt(0).putLong(1)
                .put((byte) 2).put(HexFormat.of().parseHex(TREE_B));
        b.putInt(1).put((byte) 'v').putInt(2).put("U8".getBytes(StandardCharsets.US_ASCII)).putInt(1).putLong(2)
                .putLong(2).put((byte) 0);
        assertEquals(0, b.remaining());
        assertArrayEquals(b.array(), f.canonicalBytes());
        assertTrue(f.hasIdentity());
        assertEquals(f, Fingerprint.decode(f.canonicalBytes()));
        Fingerprint engram = engramWithIdentity();
        assertEquals(engram, Fingerprint.decode(engram.canonicalBytes()));
        assertNotEquals(ENGRAM_SHA256, engram.sha256Hex(), "an identity changes the SHA-256");
        assertEquals(ENGRAM_SHA256, new Fingerprint(1, "", engram.patterns(), engram.files().stream()
                .map(e -> withContent(e, null)).toList(), engram.tables().stream().map(t -> t.withDigests(null))
                .toList()).sha256Hex(), "without it, the SHA-256 of earlier builds");
    }

    @Test
    void shouldRefuseMalformedVersion2Encodings() {
        Fingerprint f = new Fingerprint(1, "", List.of("*"), List.of(new Fingerprint.FileEntry("f", 7, SHA_A, SHA_B)),
                List.of(new Fingerprint.Table("t", DType.U8, new long[] {1}, 1, "00000000000000ff", TREE_A)));
        byte[] good = f.canonicalBytes();
        int contentAt = 12 + 4 + 4 + 5 + 4 + 5 + 8 + 32;
        assertDecodeError(patch(good, contentAt, (byte) 2), "fingerprint at byte " + contentAt + ": file 'f': content"
                + " flag 2, expected 0 or 1");
        int identityAt = contentAt + 1 + 32 + 4 + 5 + 6 + 4 + 8 + 8;
        assertDecodeError(patch(good, identityAt, (byte) 7), "fingerprint at byte " + identityAt + ": table 't':"
                + " identity flags 0x7, expected bits 0 and 1 only");
        for (int n = 0; n < good.length; n++) {
            byte[] cut = Arrays.copyOf(good, n);
            assertTrue(assertThrows(IllegalArgumentException.class, () -> Fingerprint.decode(cut), "prefix of " + n)
                    .getMessage().startsWith("fingerprint at byte "));
        }
        // version 2 must carry an identity: the same lists with none are version 1's alone
        byte[] bare = new Fingerprint(1, "", List.of("*"), List.of(new Fingerprint.FileEntry("f", 7, SHA_A)),
                List.of(new Fingerprint.Table("t", DType.U8, new long[] {1}, 1))).canonicalBytes();
        ByteBuffer v2 = ByteBuffer.allocate(bare.length + 2).order(ByteOrder.LITTLE_ENDIAN);
        int filesEnd = contentAt;
        v2.put(bare, 0, filesEnd).put((byte) 0).put(bare, filesEnd, bare.length - filesEnd).put((byte) 0);
        byte[] noIdentity = patch(v2.array(), 4, (byte) 2);
        assertDecodeError(noIdentity, "fingerprint at byte 4: encoding version 2 but no file or table carries content"
                + " identity: its canonical encoding is version 1");
    }

    @Test
    void shouldDecodeAndCompareAVersion1EncodingOfEarlierBuildsWithAFingerprintThatHasIdentity() {
        Fingerprint old = Fingerprint.decode(HexFormat.of().parseHex(ENGRAM_V1));
        Fingerprint now = engramWithIdentity();
        assertEquals(List.of(), old.differences(now), "the headers agree; identity is compared only where both have it");
        assertEquals(List.of(), now.differences(old));
        assertFalse(old.sharesIdentityWith(now));
        assertFalse(now.sharesIdentityWith(old));
        assertTrue(now.sharesIdentityWith(now));
        assertEquals(List.of(), Fingerprint.differencesFromEncoded(HexFormat.of().parseHex(ENGRAM_V1),
                now.canonicalBytes()));
        assertEquals(List.of(), Fingerprint.differencesFromEncoded(now.canonicalBytes(),
                HexFormat.of().parseHex(ENGRAM_V1)));
    }

    @Test
    void shouldCompareContentWhereBothSidesHaveIt() {
        Fingerprint expected = engramWithIdentity();
        Fingerprint.Table weight = expected.tables().get(1);
        // other content under the same headers: each kind that both have differs
        Fingerprint other = new Fingerprint(1, "memfd", expected.patterns(), List.of(withContent(expected.files().get(0),
                CONTENT_B), withContent(expected.files().get(1), CONTENT_A)), List.of(expected.tables().get(0)
                .withDigests(new TableDigests("1111111111111111", TREE_B)), weight.withDigests(
                new TableDigests("fedcba9876543210", TREE_B))));
        assertEquals(List.of(
                "file 'model-00001-of-00002.safetensors': content differs: SHA-256 expected " + CONTENT_A + ", actual "
                        + CONTENT_B,
                "table 'layers.1.engram.embed.weight': content differs: engram-digest-v1 expected 0123456789abcdef,"
                        + " actual fedcba9876543210",
                "table 'layers.1.engram.embed.weight': content differs: sha256-tree-v1 expected " + TREE_A + ", actual "
                        + TREE_B), expected.differences(other));
        assertTrue(expected.sharesIdentityWith(other));
        List<String> encoded = Fingerprint.differencesFromEncoded(expected.canonicalBytes(), other.canonicalBytes());
        assertEquals(1, encoded.size(), encoded.toString());
        assertTrue(encoded.get(0).startsWith("files or tables differ from the daemon's"), encoded.get(0));
        // one kind each: nothing in common, nothing to compare
        Fingerprint treeOnly = new Fingerprint(1, "", expected.patterns(), List.of(withContent(expected.files().get(0),
                null), expected.files().get(1)), List.of(expected.tables().get(0), new Fingerprint.Table(weight.name(),
                weight.dtype(), weight.shape(), weight.bytes(), null, TREE_A)));
        Fingerprint engramOnly = new Fingerprint(1, "", expected.patterns(), treeOnly.files(), List.of(
                expected.tables().get(0), new Fingerprint.Table(weight.name(), weight.dtype(), weight.shape(),
                        weight.bytes(), "9999999999999999", null)));
        assertEquals(List.of(), treeOnly.differences(engramOnly));
        assertFalse(treeOnly.sharesIdentityWith(engramOnly));
        assertEquals(List.of(), Fingerprint.differencesFromEncoded(treeOnly.canonicalBytes(),
                engramOnly.canonicalBytes()));
        assertTrue(treeOnly.sharesIdentityWith(expected), "the tree digest of the weight, on both");
        assertEquals(List.of(), treeOnly.differences(expected));
    }

    @Test
    void shouldSummariseADifferentSelectionInOneLine() {
        Fingerprint served = engram(); // 2 tables by [layers.*.engram.embed.*]
        List<Fingerprint.Table> more = new ArrayList<>(served.tables());
        more.add(new Fingerprint.Table("embed.weight", DType.BF16, new long[] {4, 4}, 32));
        more.add(new Fingerprint.Table("norm.weight", DType.BF16, new long[] {4}, 8));
        Fingerprint all = new Fingerprint(1, "", List.of("*"), served.files(), more);
        assertEquals(List.of("selection: the daemon serves 2 tables by [layers.*.engram.embed.*]; this expectation"
                + " selects 4 tables by [*]"), all.differences(served));
        Fingerprint exact = new Fingerprint(1, "", List.of("layers.1.engram.embed.scale", "layers.1.engram.embed.weight",
                "norm.weight"), served.files(), List.of(more.get(0), more.get(1), more.get(3)));
        assertEquals(List.of("selection: the daemon serves 4 tables by [*]; this expectation selects 3 tables by"
                + " [layers.1.engram.embed.scale, ... (3 patterns)]"), exact.differences(all));
        // tables in common are still compared one by one
        Fingerprint other = new Fingerprint(1, "", List.of("*"), served.files(), List.of(new Fingerprint.Table(
                "layers.1.engram.embed.scale", DType.U8, new long[] {1000, 8}, 8000)));
        assertEquals(List.of("selection: the daemon serves 1 table by [*]; this expectation selects 2 tables by"
                + " [layers.*.engram.embed.*]", "table 'layers.1.engram.embed.scale': dtype expected F8_E8M0, actual U8"),
                served.differences(other));
        // the same patterns: a line per table; the same tables: patterns alone are no difference
        Fingerprint fewer = new Fingerprint(1, "", List.of("*"), served.files(), more.subList(0, 3));
        assertEquals(List.of("table 'norm.weight': not expected"), fewer.differences(all));
        assertEquals(List.of(), new Fingerprint(1, "", List.of("x", "y"), served.files(), more).differences(all));
    }

    private static void assertDecodeError(byte[] bytes, String message) {
        assertEquals(message, assertThrows(IllegalArgumentException.class, () -> Fingerprint.decode(bytes)).getMessage());
    }

    private static byte[] patch(byte[] bytes, int at, byte... values) {
        byte[] copy = bytes.clone();
        System.arraycopy(values, 0, copy, at, values.length);
        return copy;
    }
}
