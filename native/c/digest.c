// engram-attach's digests (docs/checkpoints.md): engram digest v1 (XXH64 of XXH64s of 64 MiB chunks), SHA-256
// (FIPS 180-4) and sha256-tree-v1, and --self-test-sha256.
#include "engram_attach.h"

// ---------------------------------------------------------------------------------------------- XXH64, engram digest v1

#define DIGEST_CHUNK (64ull << 20)       // engram digest v1 chunk size
#define P1 11400714785074694791ull
#define P2 14029467366897019727ull
#define P3 1609587929392839161ull
#define P4 9650029242287828579ull
#define P5 2870177450012600261ull
static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t xround(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
static uint64_t xmerge(uint64_t acc, uint64_t v) { return (acc ^ xround(0, v)) * P1 + P4; }

static uint64_t xxh64(const uint8_t *p, size_t len) {
    const uint8_t *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = -P1;
        for (; p + 32 <= end; p += 32) {
            v1 = xround(v1, rd64(p)), v2 = xround(v2, rd64(p + 8));
            v3 = xround(v3, rd64(p + 16)), v4 = xround(v4, rd64(p + 24));
        }
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
        h = xmerge(xmerge(xmerge(xmerge(h, v1), v2), v3), v4);
    } else {
        h = P5;
    }
    h += len;
    for (; p + 8 <= end; p += 8) h = rotl(h ^ xround(0, rd64(p)), 27) * P1 + P4;
    if (p + 4 <= end) h = rotl(h ^ (uint64_t)rd32(p) * P1, 23) * P2 + P3, p += 4;
    for (; p < end; p++) h = rotl(h ^ *p * P5, 11) * P1;
    h ^= h >> 33, h *= P2, h ^= h >> 29, h *= P3, h ^= h >> 32;
    return h;
}

// XXH64 over the little-endian XXH64 of each 64 MiB chunk (docs/checkpoints.md).
uint64_t engram_digest(const uint8_t *p, uint64_t len) {
    uint64_t chunks = (len + DIGEST_CHUNK - 1) / DIGEST_CHUNK;
    uint8_t *hashes = xcalloc(chunks, 8);
    for (uint64_t i = 0; i < chunks; i++) {
        uint64_t n = len - i * DIGEST_CHUNK < DIGEST_CHUNK ? len - i * DIGEST_CHUNK : DIGEST_CHUNK;
        uint64_t h = xxh64(p + i * DIGEST_CHUNK, n);
        for (int b = 0; b < 8; b++) hashes[i * 8 + b] = (uint8_t)(h >> (8 * b));
    }
    uint64_t d = xxh64(hashes, chunks * 8);
    free(hashes);
    return d;
}

// ---------------------------------------------------------------------------------------------- SHA-256, sha256-tree-v1

// SHA-256 (FIPS 180-4), plain C: the content digest's hash, with no library behind it. --self-test-sha256 checks it.
static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static uint32_t ror32(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }

void sha256_init(struct sha256 *s) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, H0, sizeof H0);
    s->bytes = 0, s->n = 0;
}

static void sha256_blocks(uint32_t h[8], const uint8_t *p, size_t blocks) {
    for (; blocks--; p += 64) {
        uint32_t w[64], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = k + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
            uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
    }
}

void sha256_update(struct sha256 *s, const void *data, size_t len) {
    const uint8_t *p = data;
    s->bytes += len;
    if (s->n) {
        size_t take = 64 - s->n < len ? 64 - s->n : len;
        memcpy(s->buf + s->n, p, take);
        s->n += take, p += take, len -= take;
        if (s->n < 64) return;
        sha256_blocks(s->h, s->buf, 1);
        s->n = 0;
    }
    sha256_blocks(s->h, p, len / 64);
    memcpy(s->buf, p + len / 64 * 64, len % 64);
    s->n = len % 64;
}

void sha256_final(struct sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->bytes * 8;
    uint8_t pad[72] = {0x80};
    size_t padlen = (s->n < 56 ? 56 : 120) - s->n;
    for (int i = 0; i < 8; i++) pad[padlen + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(s, pad, padlen + 8);
    for (int i = 0; i < 32; i++) out[i] = (uint8_t)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

static void hex32(const uint8_t d[32], char out[65]) {
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

// docs/checkpoints.md, "Content digest: sha256-tree-v1": leaf_i = SHA-256 of the i-th 16 MiB chunk, root = SHA-256
// of "engram-sha256-tree-v1" (21 bytes), u64le(total bytes), u64le(16777216) and the leaves in order. In hex.
#define TREE_CHUNK (16ull << 20)
void tree_digest(const uint8_t *p, uint64_t len, char out[65]) {
    struct sha256 root, leaf;
    uint8_t sizes[16], d[32];
    for (int i = 0; i < 8; i++) sizes[i] = (uint8_t)(len >> (8 * i)), sizes[8 + i] = (uint8_t)(TREE_CHUNK >> (8 * i));
    sha256_init(&root);
    sha256_update(&root, "engram-sha256-tree-v1", 21);
    sha256_update(&root, sizes, 16);
    for (uint64_t off = 0; off < len; off += TREE_CHUNK) {
        sha256_init(&leaf);
        sha256_update(&leaf, p + off, len - off < TREE_CHUNK ? len - off : TREE_CHUNK);
        sha256_final(&leaf, d);
        sha256_update(&root, d, 32);
    }
    sha256_final(&root, d);
    hex32(d, out);
}

// --self-test-sha256: FIPS 180-4's vectors and docs/checkpoints.md's tree vectors; prints the rate; 0 when all pass.
int self_test_sha256(void) {
    static const char *const PLAIN[][2] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"}};
    int failed = 0;
    char got[65];
    uint8_t d[32];
    struct sha256 s;
    for (size_t i = 0; i < sizeof PLAIN / sizeof PLAIN[0]; i++) {
        sha256_init(&s);
        sha256_update(&s, PLAIN[i][0], strlen(PLAIN[i][0]));
        sha256_final(&s, d);
        hex32(d, got);
        int ok = !strcmp(got, PLAIN[i][1]);
        failed += !ok;
        printf("sha256(\"%s\") = %s %s\n", PLAIN[i][0], got, ok ? "ok" : "MISMATCH");
    }
    uint64_t n = 40ull << 20;
    uint8_t *buf = xcalloc(n, 1);
    memset(buf, 'a', 1000000);
    sha256_init(&s);
    for (int i = 0; i < 1000; i++) sha256_update(&s, buf + i * 997 % 1000, 1000);  // in odd pieces: update's paths
    sha256_final(&s, d);
    hex32(d, got);
    int ok = !strcmp(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    failed += !ok;
    printf("sha256(1000000 x 'a', in pieces) = %s %s\n", got, ok ? "ok" : "MISMATCH");
    sha256_init(&s);
    sha256_update(&s, buf, 1000000);
    sha256_final(&s, d);
    hex32(d, got);
    ok = !strcmp(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    failed += !ok;
    printf("sha256(1000000 x 'a', one update) = %s %s\n", got, ok ? "ok" : "MISMATCH");
    for (uint64_t i = 0; i < n; i++) buf[i] = (uint8_t)((i * 131 + (i >> 16)) & 0xff);
    static const struct { const char *what; const uint8_t *p; uint64_t n; const char *hex; } TREE[] = {
        {"no bytes", (const uint8_t *)"", 0, "0c4278d99b29da1ade86fade7817d53950883f0f46c9863a0865f5fe56f47c13"},
        {"abc", (const uint8_t *)"abc", 3, "85c49fe9df25db81b88aee2da59492bbc1e83fe63cd65dbf42e05f6678fce185"},
        {"16 MiB pattern", NULL, 16ull << 20, "b2389fdc476ff72d0f3186cc3ebbbe376e5e1b122c9f13f8809ba5e106eee342"},
        {"40 MiB pattern", NULL, 40ull << 20, "feed4b9bb7e2dc88ae4b5d108ed1cf94881677e9f7a26ec32e976e102d300c95"}};
    double ms = 0;
    for (size_t i = 0; i < sizeof TREE / sizeof TREE[0]; i++) {
        double t0 = now_ms();
        tree_digest(TREE[i].p ? TREE[i].p : buf, TREE[i].n, got);
        if (!TREE[i].p) ms += now_ms() - t0;
        ok = !strcmp(got, TREE[i].hex);
        failed += !ok;
        printf("sha256-tree-v1(%s) = %s %s\n", TREE[i].what, got, ok ? "ok" : "MISMATCH");
    }
    free(buf);
    printf("self-test: %s; tree digest rate %.2f GB/s on 1 thread (56 MiB)\n", failed ? "FAILED" : "ok",
           (56ull << 20) / (ms > 0 ? ms : 1e-3) / 1e6);
    return failed ? 1 : 0;
}
