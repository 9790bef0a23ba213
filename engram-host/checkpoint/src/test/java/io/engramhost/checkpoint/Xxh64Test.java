package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.internal.LibCHolder;
import java.nio.charset.StandardCharsets;
import java.util.Random;
import jnr.ffi.Pointer;
import org.junit.jupiter.api.Test;

class Xxh64Test {
    private static final long PRIME32 = 2654435761L;

    /** xxHash's sanity buffer: byteGen = PRIME32_1; buf[i] = byteGen >> 24; byteGen *= byteGen (32-bit). */
    static byte[] sanityBuffer(int size) {
        byte[] b = new byte[size];
        int gen = (int) PRIME32;
        for (int i = 0; i < size; i++) {
            b[i] = (byte) (gen >>> 24);
            gen *= gen;
        }
        return b;
    }

    @Test
    void shouldMatchThePublishedVectors() {
        byte[] sanity = sanityBuffer(101);
        assertEquals(0xEF46DB3751D8E999L, Xxh64.hash(new byte[0], 0, 0, 0));
        assertEquals(0xAC75FDA2929B17EFL, Xxh64.hash(new byte[0], 0, 0, PRIME32));
        assertEquals(0x4FCE394CC88952D8L, Xxh64.hash(sanity, 0, 1, 0));
        assertEquals(0x739840CB819FA723L, Xxh64.hash(sanity, 0, 1, PRIME32));
        assertEquals(0xCFFA8DB881BC3A3DL, Xxh64.hash(sanity, 0, 14, 0));
        assertEquals(0x5B9611585EFCC9CBL, Xxh64.hash(sanity, 0, 14, PRIME32));
        assertEquals(0x0EAB543384F878ADL, Xxh64.hash(sanity, 0, 101, 0));
        assertEquals(0xCAA65939306F1E21L, Xxh64.hash(sanity, 0, 101, PRIME32));
        assertEquals(0xD24EC4F1A98C6E5BL, Xxh64.hash(ascii("a")));
        assertEquals(0x44BC2CF5AD770999L, Xxh64.hash(ascii("abc")));
        assertEquals(0xFBCEA83C8A378BF1L, Xxh64.hash(ascii("Nobody inspects the spammish repetition")));
    }

    @Test
    void shouldStreamToTheSameValueWhateverThePieces() {
        byte[] data = new byte[1000];
        new Random(1).nextBytes(data);
        Random cut = new Random(2);
        for (int len : new int[] {0, 1, 31, 32, 33, 63, 64, 100, 1000}) {
            long oneShot = Xxh64.hash(data, 0, len, 77);
            Xxh64 h = new Xxh64(77);
            for (int p = 0; p < len; ) {
                int n = Math.min(len - p, cut.nextInt(40));
                h.update(data, p, n);
                p += n;
            }
            assertEquals(oneShot, h.digest(), "length " + len);
        }
        Xxh64 sanity = new Xxh64(0);
        byte[] s = sanityBuffer(101);
        for (byte b : s) {
            sanity.update(new byte[] {b}, 0, 1);
        }
        assertEquals(0x0EAB543384F878ADL, sanity.digest());
    }

    @Test
    void shouldHashNativeMemoryLikeTheSameBytesOnHeap() {
        byte[] data = new byte[4099];
        new Random(3).nextBytes(data);
        try (Mapping m = Posix.mmapAnonymous(8192, "xxh64 test")) {
            Pointer mem = Pointer.wrap(LibCHolder.RUNTIME, m.address());
            mem.put(0, data, 0, data.length);
            for (int off : new int[] {0, 1, 7}) {
                int len = data.length - off;
                assertEquals(Xxh64.hash(data, off, len, 5), Xxh64.hashMemory(m.address() + off, len, 5), "offset " + off);
            }
            Xxh64 h = new Xxh64(0).updateMemory(m.address(), 100).update(data, 100, data.length - 100);
            assertEquals(Xxh64.hash(data), h.digest());
        }
    }

    private static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }
}
