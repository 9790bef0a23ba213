// engram-attach: the digest record of `engram-host inspect --write-digests` (--verify-content), read strictly.
#include "engram_attach.h"

// ---------------------------------------------------------------------------------------------- the digest sidecar

// docs/checkpoints.md, "The sidecar" and "The digest record, version 2", read as strictly as the Java
// DigestSidecar.readRecord: one JSON object (no key twice) of exactly the fields of its version,
//   version 1: format "engram-content-digests", version 1, algorithm "sha256-tree-v1", chunk_bytes 16777216 and
//              tables (name -> its sha256-tree-v1, 64 lower-case hex digits);
//   version 2: format, version 2, chunk_bytes and tables (name -> an object of exactly "engram-digest-v1", 16
//              lower-case hex digits, and "sha256-tree-v1", 64),
// every table name non-empty and unique. Anything else fails in one line: the file, the field and the problem in
// the Java reader's words, then what to do (write the record again, naming the checkpoint it lies beside).
#define SIDECAR_MAX (256ull << 20)
#define ENGRAM_KEY "engram-digest-v1"
#define TREE_KEY "sha256-tree-v1"
struct json { const char *path, *fix; const uint8_t *p; size_t len, pos; };

static void jfail(const struct json *j, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void jfail(const struct json *j, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fail("%s: not a digest sidecar: JSON at byte %zu: %s; %s", j->path, j->pos, text, j->fix);
}

// A well-formed record that is not one this build reads: "PATH: PROBLEM; write it again with ...".
static void record_fail(const struct json *j, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void record_fail(const struct json *j, const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fail("%s: %s; %s", j->path, text, j->fix);
}

// The checkpoint a record lies beside (docs/checkpoints.md, "The sidecar"): <directory>/engram-digests.json is the
// directory's, <file>.engram-digests.json the file's; any other name, CHECKPOINT.
static char *record_fix(const char *path) {
    static const char DIR_FILE[] = "engram-digests.json", SUFFIX[] = ".engram-digests.json";
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(path), d = (size_t)(base - path);
    const char *ck = "CHECKPOINT";
    size_t ck_n = strlen(ck);
    if (!strcmp(base, DIR_FILE)) {
        while (d > 1 && path[d - 1] == '/') d--;
        ck = d ? path : ".", ck_n = d ? d : 1;
    } else if (strlen(base) > strlen(SUFFIX) && !strcmp(path + n - strlen(SUFFIX), SUFFIX)) {
        ck = path, ck_n = n - strlen(SUFFIX);
    }
    char *fix = xcalloc(ck_n + 64, 1);
    snprintf(fix, ck_n + 64, "write it again with engram-host inspect --write-digests %.*s", (int)ck_n, ck);
    return fix;
}

static int jpeek(struct json *j) {  // the next byte after white space, or -1 at the end
    while (j->pos < j->len && strchr(" \t\r\n", j->p[j->pos]) && j->p[j->pos]) j->pos++;
    return j->pos < j->len ? j->p[j->pos] : -1;
}

static void jexpect(struct json *j, char c) {
    if (jpeek(j) != c) jfail(j, "expected '%c'", c);
    j->pos++;
}

static unsigned jhex4(struct json *j) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++, j->pos++) {
        int c = j->pos < j->len ? j->p[j->pos] : -1;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) jfail(j, "bad \\u escape");
        v = v << 4 | (unsigned)d;
    }
    return v;
}

// A string at pos, decoded to UTF-8 in a new buffer (NUL-terminated; *n its length).
static char *jstring(struct json *j, size_t *n) {
    if (jpeek(j) != '"') jfail(j, "expected a string");
    size_t start = ++j->pos, k = 0, cap = 64;
    char *out = xcalloc(cap, 1);
    for (;;) {
        if (k + 5 > cap && !(out = realloc(out, cap *= 2))) fail("%s: out of memory for a string", j->path);
        if (j->pos >= j->len) { j->pos = start - 1; jfail(j, "unterminated string"); }
        uint8_t c = j->p[j->pos++];
        if (c == '"') break;
        if (c < 0x20) { j->pos--; jfail(j, "control character 0x%02x in a string", c); }
        if (c != '\\') { out[k++] = (char)c; continue; }
        int e = j->pos < j->len ? j->p[j->pos++] : -1;
        const char *esc = strchr("\"\\/bfnrt", e > 0 ? e : 'x');
        if (e > 0 && esc) { out[k++] = "\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrt"]; continue; }
        if (e != 'u') { j->pos--; jfail(j, "bad escape"); }
        unsigned cp = jhex4(j);
        if (cp >= 0xDC00 && cp <= 0xDFFF) jfail(j, "lone surrogate in a \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (j->pos + 2 > j->len || j->p[j->pos] != '\\' || j->p[j->pos + 1] != 'u') jfail(j, "lone surrogate in a \\u escape");
            j->pos += 2;
            unsigned lo = jhex4(j);
            if (lo < 0xDC00 || lo > 0xDFFF) jfail(j, "lone surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp < 0x80) out[k++] = (char)cp;
        else if (cp < 0x800) out[k++] = (char)(0xC0 | cp >> 6), out[k++] = (char)(0x80 | (cp & 0x3F));
        else if (cp < 0x10000)
            out[k++] = (char)(0xE0 | cp >> 12), out[k++] = (char)(0x80 | (cp >> 6 & 0x3F)), out[k++] = (char)(0x80 | (cp & 0x3F));
        else
            out[k++] = (char)(0xF0 | cp >> 18), out[k++] = (char)(0x80 | (cp >> 12 & 0x3F)),
            out[k++] = (char)(0x80 | (cp >> 6 & 0x3F)), out[k++] = (char)(0x80 | (cp & 0x3F));
    }
    if (!utf8_valid((const uint8_t *)out, k)) { j->pos = start - 1; jfail(j, "a string that is not valid UTF-8"); }
    out[k] = 0;
    *n = k;
    return out;
}

// The string at byte `at` (already checked), decoded; pos is left where it was.
static char *jstring_at(struct json *j, size_t at, size_t *n) {
    size_t pos = j->pos;
    j->pos = at;
    char *s = jstring(j, n);
    j->pos = pos;
    return s;
}

// Skips any value, strictly checked.
static void jskip(struct json *j, int depth) {
    int c = jpeek(j);
    size_t n;
    if (depth > 64) jfail(j, "nested more than 64 deep");
    if (c == '"') { free(jstring(j, &n)); return; }
    if (c == '{' || c == '[') {
        j->pos++;
        if (jpeek(j) == c + 2) { j->pos++; return; }
        for (;;) {
            if (c == '{') { free(jstring(j, &n)); jexpect(j, ':'); }
            jskip(j, depth + 1);
            int d = jpeek(j);
            j->pos++;
            if (d == c + 2) return;
            if (d != ',') { j->pos--; jfail(j, "expected ',' or '%c'", c + 2); }
        }
    }
    static const char *const WORDS[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if (j->len - j->pos >= strlen(WORDS[i]) && !memcmp(j->p + j->pos, WORDS[i], strlen(WORDS[i]))) {
            j->pos += strlen(WORDS[i]);
            return;
        }
    size_t s = j->pos;
    if (j->pos < j->len && j->p[j->pos] == '-') j->pos++;
    size_t d0 = j->pos;
    while (j->pos < j->len && j->p[j->pos] >= '0' && j->p[j->pos] <= '9') j->pos++;
    if (j->pos == d0 || (j->p[d0] == '0' && j->pos - d0 > 1)) { j->pos = s; jfail(j, c < 0 ? "unexpected end" : "unexpected character"); }
    if (j->pos < j->len && j->p[j->pos] == '.') {
        size_t f = ++j->pos;
        while (j->pos < j->len && j->p[j->pos] >= '0' && j->p[j->pos] <= '9') j->pos++;
        if (j->pos == f) jfail(j, "a digit must follow '.'");
    }
    if (j->pos < j->len && (j->p[j->pos] == 'e' || j->p[j->pos] == 'E')) {
        j->pos++;
        if (j->pos < j->len && (j->p[j->pos] == '+' || j->p[j->pos] == '-')) j->pos++;
        size_t f = j->pos;
        while (j->pos < j->len && j->p[j->pos] >= '0' && j->p[j->pos] <= '9') j->pos++;
        if (j->pos == f) jfail(j, "a digit must follow the exponent");
    }
}

// s (n bytes of UTF-8) for a message, in out: its first `max` code points (then "..."), control characters as
// \uXXXX so that the message stays one line. out needs 6 * max + 4 bytes.
const char *shown(char *out, size_t cap, const char *s, size_t n, size_t max) {
    size_t k = 0, cps = 0;
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        uint8_t c = (uint8_t)s[i];
        if ((c & 0xC0) != 0x80 && cps++ == max) {
            k += (size_t)snprintf(out + k, cap - k, "...");
            break;
        }
        if (c < 0x20 || c == 0x7F) k += (size_t)snprintf(out + k, cap - k, "\\u%04x", c);
        else out[k++] = (char)c;
    }
    out[k] = 0;
    return out;
}

// A table name as the Java reader quotes it (Limits.quoted): 'name', or when it has more than 80 characters its
// first 64, "...'" and its length in UTF-16 units, as Java counts it.
static const char *quoted(char *out, size_t cap, const char *s, size_t n) {
    size_t cps = 0, units = 0;
    for (size_t i = 0; i < n; i++)
        if (((uint8_t)s[i] & 0xC0) != 0x80) cps++, units += (uint8_t)s[i] >= 0xF0 ? 2 : 1;
    char b[512];
    if (cps <= 80) snprintf(out, cap, "'%s'", shown(b, sizeof b, s, n, 80));
    else snprintf(out, cap, "'%s' (%zu characters)", shown(b, sizeof b, s, n, 64), units);
    return out;
}

// What the value in [at, end) is, in the Java reader's words (SafetensorsHeader.kind): the string "...", the
// number N, true, false, null, a list, an object. A static buffer.
static const char *kind_of(struct json *j, size_t at, size_t end) {
    static char out[320];
    char b[256];
    size_t n;
    switch (j->p[at]) {
    case '{': return "an object";
    case '[': return "a list";
    case 't': return "true";
    case 'f': return "false";
    case 'n': return "null";
    case '"': {
        char *s = jstring_at(j, at, &n);
        snprintf(out, sizeof out, "the string \"%s\"", shown(b, sizeof b, s, n, 40));
        free(s);
        return out;
    }
    default:
        snprintf(out, sizeof out, "the number %s", shown(b, sizeof b, (const char *)j->p + at, end - at, 40));
        return out;
    }
}

static int by_name(const void *a, const void *b) {
    const struct trusted *x = a, *y = b;
    int c = memcmp(x->name, y->name, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static int is_hex(const char *s, size_t n, size_t digits) {
    if (n != digits) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

static int key_is(const char *key, size_t n, const char *name) { return n == strlen(name) && !memcmp(key, name, n); }

// An object's members, once over (the document's syntax is already checked): for each of `names` whether it is
// there and where its value lies; a key twice is refused as the Java JSON reader refuses it. Returns the first key
// not among `names` (in the file's order, NULL if none; *order its place, *unknown_n its length) and fills order[].
static char *members(struct json *j, size_t at, const char *const *names, int count, int *seen, size_t *vat,
                     size_t *vend, size_t *order, size_t *unknown_order, size_t *unknown_n) {
    char *unknown = NULL;
    *unknown_order = SIZE_MAX;
    j->pos = at + 1;
    if (jpeek(j) == '}') return NULL;
    for (size_t k = 0;; k++) {
        jpeek(j);
        size_t key_at = j->pos, n;
        char *key = jstring(j, &n);
        int f = 0;
        while (f < count && !key_is(key, n, names[f])) f++;
        if (f < count && seen[f]) { free(key); free(unknown); j->pos = key_at; jfail(j, "duplicate key \"%s\"", names[f]); }
        jexpect(j, ':');
        jpeek(j);
        size_t v = j->pos;
        jskip(j, 1);
        if (f < count) seen[f] = 1, vat[f] = v, vend[f] = j->pos, order[f] = k;
        else if (!unknown) unknown = key, *unknown_n = n, *unknown_order = k, key = NULL;
        free(key);
        int d = jpeek(j);
        j->pos++;
        if (d == '}') return unknown;
    }
}

// A field of one accepted value: `want` is its JSON text (a string's is compared decoded); `readable` says what
// this build reads.
static void want_field(struct json *j, const char *name, int seen, size_t at, size_t end, const char *want,
                       const char *readable) {
    if (!seen) record_fail(j, "not a digest sidecar: no '%s'", name);
    int ok;
    if (want[0] == '"') {
        size_t n;
        char *s = j->p[at] == '"' ? jstring_at(j, at, &n) : NULL;
        ok = s && n == strlen(want) - 2 && !memcmp(s, want + 1, n);
        free(s);
    } else {
        ok = end - at == strlen(want) && !memcmp(j->p + at, want, end - at);
    }
    if (!ok)  // another version or algorithm: a later build may read it
        fail("%s: '%s' is %s, this build reads only %s; use a build that reads it, or %s", j->path, name,
             kind_of(j, at, end), readable, j->fix);
}

// A version 2 table: an object of exactly its engram digest v1 (16 hex digits) and its sha256-tree-v1 (64).
static void v2_table(struct json *j, size_t at, size_t end, const char *q, struct trusted *t) {
    static const char *const KEYS[2] = {ENGRAM_KEY, TREE_KEY};
    static const size_t DIGITS[2] = {16, 64};
    if (j->p[at] != '{')
        record_fail(j, "table %s: not an object of " ENGRAM_KEY " and " TREE_KEY " but %s", q, kind_of(j, at, end));
    int seen[2] = {0};
    size_t vat[2] = {0}, vend[2] = {0}, order[2], unknown_order, unknown_n = 0, pos = j->pos;
    char *unknown = members(j, at, KEYS, 2, seen, vat, vend, order, &unknown_order, &unknown_n);
    j->pos = pos;
    char b[512];
    if (unknown) {  // freed before failing, here and below, so that a leak checker's build exits 1 as well
        shown(b, sizeof b, unknown, unknown_n, 80);
        free(unknown);
        record_fail(j, "table %s: unexpected field '%s' (expected " ENGRAM_KEY ", " TREE_KEY ")", q, b);
    }
    for (int f = 0; f < 2; f++) {
        if (!seen[f]) record_fail(j, "table %s: no '%s' (expected " ENGRAM_KEY ", " TREE_KEY ")", q, KEYS[f]);
        size_t n = 0;
        char *hex = j->p[vat[f]] == '"' ? jstring_at(j, vat[f], &n) : NULL;
        if (!hex || !is_hex(hex, n, DIGITS[f])) {
            free(hex);
            record_fail(j, "table %s: %s is %s, not %zu lower-case hex digits", q, KEYS[f],
                        kind_of(j, vat[f], vend[f]), DIGITS[f]);
        }
        if (f == 0) t->engram = strtoull(hex, NULL, 16);
        else memcpy(t->hex, hex, 65);
        free(hex);
    }
}

void read_sidecar(const char *path, struct sidecar *sc) {
    memset(sc, 0, sizeof *sc);
    sc->path = path;
    sc->fix = record_fix(path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fail("--verify-content %s: cannot open: %s (%s)%s%s", path, strerrorname_np(errno), strerror(errno),
             errno == ENOENT ? "; write it with " : "", errno == ENOENT ? sc->fix + strlen("write it again with ") : "");
    struct stat st;
    if (fstat(fd, &st) != 0) fail_errno("fstat", path);
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file", path);
    if ((uint64_t)st.st_size > SIDECAR_MAX)
        fail("%s: %lld bytes, over the limit of %llu for a digest sidecar", path, (long long)st.st_size, SIDECAR_MAX);
    uint8_t *buf = xcalloc((size_t)st.st_size + 1, 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail_errno("read", path);
        if (r == 0) fail("%s: shrank while it was read", path);
        got += (size_t)r;
    }
    close(fd);
    // The whole document's syntax first, as the Java reader parses it before it looks at a field.
    struct json j = {path, sc->fix, buf, got, 0};
    jpeek(&j);
    size_t root = j.pos;
    jskip(&j, 0);
    if (jpeek(&j) != -1) jfail(&j, "trailing characters after the value");
    if (buf[root] != '{') record_fail(&j, "not a digest sidecar: not a JSON object but %s", kind_of(&j, root, j.pos));
    enum { F_FORMAT, F_VERSION, F_ALGORITHM, F_CHUNK, F_TABLES, F_N };
    static const char *const FIELDS[F_N] = {"format", "version", "algorithm", "chunk_bytes", "tables"};
    int seen[F_N] = {0};
    size_t at[F_N] = {0}, end[F_N] = {0}, order[F_N] = {0}, unknown_order, unknown_n = 0;
    char *unknown = members(&j, root, FIELDS, F_N, seen, at, end, order, &unknown_order, &unknown_n);
    int v2 = seen[F_VERSION] && end[F_VERSION] - at[F_VERSION] == 1 && buf[at[F_VERSION]] == '2';
    char b[512], q[1024];
    if (v2 && seen[F_ALGORITHM] && order[F_ALGORITHM] < unknown_order)  // a field that version 2 does not have
        shown(b, sizeof b, "algorithm", strlen("algorithm"), 80);
    else if (unknown)
        shown(b, sizeof b, unknown, unknown_n, 80);
    if (unknown || (v2 && seen[F_ALGORITHM])) {
        free(unknown);
        free(buf);
        record_fail(&j, "unexpected field '%s' (expected %s)", b,
                    v2 ? "format, version, chunk_bytes, tables" : "format, version, algorithm, chunk_bytes, tables");
    }
    want_field(&j, "format", seen[F_FORMAT], at[F_FORMAT], end[F_FORMAT], "\"engram-content-digests\"",
               "\"engram-content-digests\"");
    if (!v2) {
        want_field(&j, "version", seen[F_VERSION], at[F_VERSION], end[F_VERSION], "1", "1 and 2");
        want_field(&j, "algorithm", seen[F_ALGORITHM], at[F_ALGORITHM], end[F_ALGORITHM], "\"" TREE_KEY "\"",
                   "\"" TREE_KEY "\"");
    }
    want_field(&j, "chunk_bytes", seen[F_CHUNK], at[F_CHUNK], end[F_CHUNK], "16777216", "16777216");
    if (!seen[F_TABLES]) record_fail(&j, "not a digest sidecar: no 'tables'");
    if (buf[at[F_TABLES]] != '{')
        record_fail(&j, "'tables' is not an object of table name to digest%s but %s", v2 ? "s" : "",
              kind_of(&j, at[F_TABLES], end[F_TABLES]));
    sc->version = v2 ? 2 : 1;
    j.pos = at[F_TABLES] + 1;
    size_t cap = 0;
    if (jpeek(&j) == '}') j.pos++;
    else for (;;) {
        struct trusted t;
        memset(&t, 0, sizeof t);
        t.name = jstring(&j, &t.n);
        if (!t.n) record_fail(&j, "a table has an empty name");
        quoted(q, sizeof q, t.name, t.n);
        jexpect(&j, ':');
        jpeek(&j);
        size_t v = j.pos;
        jskip(&j, 1);
        if (v2) {
            v2_table(&j, v, j.pos, q, &t);
        } else {
            size_t hn = 0;
            char *hex = buf[v] == '"' ? jstring_at(&j, v, &hn) : NULL;
            if (!hex || !is_hex(hex, hn, 64)) {
                free(hex);
                record_fail(&j, "table %s: digest is %s, not 64 lower-case hex digits", q, kind_of(&j, v, j.pos));
            }
            memcpy(t.hex, hex, 65);
            free(hex);
        }
        if (sc->n == cap) {
            cap = cap ? cap * 2 : 64;
            sc->v = realloc(sc->v, cap * sizeof *sc->v);
            if (!sc->v) fail("%s: out of memory for %zu tables", path, cap);
        }
        sc->v[sc->n++] = t;
        int d = jpeek(&j);
        j.pos++;
        if (d == '}') break;
    }
    free(buf);
    if (sc->n) qsort(sc->v, sc->n, sizeof *sc->v, by_name);
    for (size_t i = 1; i < sc->n; i++)
        if (!by_name(&sc->v[i - 1], &sc->v[i]))
            record_fail(&j, "table %s appears twice", quoted(q, sizeof q, sc->v[i].name, sc->v[i].n));
}

const struct trusted *trusted_digest(const struct sidecar *sc, struct str name) {
    struct trusted key = {(char *)name.p, name.n, "", 0};
    return bsearch(&key, sc->v, sc->n, sizeof *sc->v, by_name);
}
