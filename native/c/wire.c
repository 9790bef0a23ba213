// engram-attach's wire (docs/protocol.md): errors and the library's escape, messages with fds (header, payload,
// 0xFD fillers), frames and their fields, ERROR, PARTs.
#include "engram_attach.h"

const char *const TYPE_NAMES[12] = {"?", "HELLO", "WELCOME", "IMPORT", "MANIFEST", "STATUS", "STATUS_REPLY",
                                         "STOP", "STOP_ACK", "ERROR", "BYE", "PART"};
const char *const KIND_NAMES[4] = {"memfd", "memfd-hugetlb", "cuda-vmm host", "cuda-vmm device"};
const char *const ERROR_NAMES[ERROR_CODES] = {"?", "BAD_REQUEST", "UNSUPPORTED_VERSION", "NOT_READY",
                                          "FINGERPRINT_MISMATCH", "NOT_ALLOWED", "STOPPING", "INTERNAL", "LOAD_FAILED",
                                          "BUSY", "TIMED_OUT"};
const char *const STATE_NAMES[4] = {"loading", "ready", "stopping", "failed"};

// ---------------------------------------------------------------------------------------------- errors

#ifdef ENGRAM_ATTACH_LIB
_Thread_local jmp_buf *lib_escape;  // engram_attach.h says what these are
_Thread_local char lib_error[1024];
#endif

void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
#ifdef ENGRAM_ATTACH_LIB
    vsnprintf(lib_error, sizeof lib_error, fmt, ap);
    va_end(ap);
    if (lib_escape) longjmp(*lib_escape, 1);
    fprintf(stderr, "engram-attach library: failed outside a library call: %s\n", lib_error);
    abort();
#else
    fputs("engram-attach: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
#endif
}

// "call(context) failed: ENAME (description)", as the Java layer names native failures.
void fail_errno(const char *call, const char *context) {
    int e = errno;
    const char *name = strerrorname_np(e);
    fail("%s(%s) failed: %s (%s)", call, context, name ? name : "E?", strerror(e));
}

double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) fail("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

static void fds_push(struct fds *f, int fd) {
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 256;
        f->v = realloc(f->v, f->cap * sizeof(int));
        if (!f->v) fail("out of memory for %zu fds", f->cap);
    }
    f->v[f->n++] = fd;
}

// Closes every fd still held; a slot of -1 was closed already (close_unselected) and is skipped.
static void fds_close(struct fds *f) {
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i] >= 0) close(f->v[i]);
    f->n = 0;
}

// Fails after closing every fd received so far (the protocol's rule for a bad message).
void fail_msg(struct message *m, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fds_close(&m->fds);
    fail("%s", text);
}

// Reads exactly len bytes, collecting the fds of every recvmsg into m->fds.
static void recv_exact(int s, uint8_t *buf, size_t len, struct message *m, const char *what) {
    size_t got = 0;
    while (got < len) {
        union { struct cmsghdr align; char buf[CMSG_SPACE(FDS_PER_SENDMSG * sizeof(int))]; } control;
        struct iovec iov = {buf + got, len - got};
        struct msghdr h;
        memset(&h, 0, sizeof h);
        h.msg_iov = &iov;
        h.msg_iovlen = 1;
        h.msg_control = control.buf;
        h.msg_controllen = sizeof control.buf;
        // SO_RCVTIMEO bounds one recvmsg; the deadline bounds the whole answer, so a daemon that sends a byte
        // just inside each wait cannot hold the client forever.
        double left = m->deadline - now_ms();
        struct pollfd p = {s, POLLIN, 0};
        int ready = left > 0 ? poll(&p, 1, (int)left + 1) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) fail_errno("poll", what);
        if (ready == 0)
            fail_msg(m, "no whole answer from the daemon within %d s while reading %s", REPLY_TIMEOUT_S, what);
        ssize_t r = recvmsg(s, &h, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            fail_msg(m, "no answer from the daemon within %d s while reading %s", REPLY_TIMEOUT_S, what);
        if (r < 0) {
            int e = errno;
            fds_close(&m->fds);
            errno = e;
            fail_errno("recvmsg", what);
        }
        int foreign = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < n; i++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                    fds_push(&m->fds, fd);
                }
            } else {
                foreign = 1;
            }
        }
        if (h.msg_flags & MSG_CTRUNC)
            fail_msg(m, "%s: ancillary data truncated (MSG_CTRUNC): file descriptors were lost", what);
        if (foreign) fail_msg(m, "%s: unexpected ancillary data (not SCM_RIGHTS)", what);
        if (m->fds.n > MAX_FDS) fail_msg(m, "%s: more than %u fds arrived", what, MAX_FDS);
        if (r == 0) fail_msg(m, "the daemon closed the connection while sending %s (%zu of %zu bytes read)", what, got, len);
        got += (size_t)r;
    }
}

// Appends exactly len payload bytes to m->payload (grown as needed), collecting fds into m->fds.
static void recv_payload(int s, struct message *m, size_t *cap, uint32_t len, const char *what) {
    if ((size_t)m->length + len > *cap) {
        size_t want = (size_t)m->length + len, grown = *cap * 2;
        if (grown > (size_t)MAX_LOGICAL + MAX_PAYLOAD_V2) grown = (size_t)MAX_LOGICAL + MAX_PAYLOAD_V2;  // parts' bound
        *cap = grown > want ? grown : want;
        uint8_t *p = realloc(m->payload, *cap);
        if (!p) fail_msg(m, "%s: out of memory for %zu bytes", what, *cap);
        m->payload = p;
    }
    recv_exact(s, m->payload + m->length, len, m, what);
    m->length += len;
}

// After a payload: 0xFD fillers until count fds have arrived (at most ceil((count - 253) / 253) fillers, each
// bringing at least one fd).
static void recv_fillers(int s, struct message *m, uint32_t count, const char *what) {
    uint32_t fillers = count > FDS_PER_SENDMSG ? (count - FDS_PER_SENDMSG + FDS_PER_SENDMSG - 1) / FDS_PER_SENDMSG : 0;
    for (uint32_t i = 0; m->fds.n < count; i++) {
        if (i == fillers)
            fail_msg(m, "%s: fd_count is %u but only %zu fds arrived with the header and %u fillers", what, count,
                     m->fds.n, fillers);
        uint8_t filler;
        size_t before = m->fds.n;
        recv_exact(s, &filler, 1, m, what);
        if (filler != FILLER) fail_msg(m, "%s: filler %u is 0x%02X, not 0xFD", what, i + 1, filler);
        if (m->fds.n == before) fail_msg(m, "%s: filler %u carried no fds (%zu of %u so far)", what, i + 1, m->fds.n, count);
    }
    if (m->fds.n != count) fail_msg(m, "%s: fd_count is %u but %zu fds arrived", what, count, m->fds.n);
}

// One message: header, payload (at most limit bytes, and at least a frame header), then its fds.
void recv_message(int s, struct message *m, const char *what, uint32_t limit) {
    memset(m, 0, sizeof *m);
    m->deadline = now_ms() + REPLY_TIMEOUT_S * 1000.0;
    uint8_t header[8];
    recv_exact(s, header, 8, m, what);
    uint32_t length = rd32(header), count = rd32(header + 4);
    if (length > limit) fail_msg(m, "%s: payload_length %u exceeds the limit of %u", what, length, limit);
    if (count > MAX_FDS) fail_msg(m, "%s: fd_count %u exceeds the limit of %u", what, count, MAX_FDS);
    if (length < 8) fail_msg(m, "%s: payload_length %u is shorter than a frame header (8 bytes)", what, length);
    size_t cap = 0;
    recv_payload(s, m, &cap, length, what);
    recv_fillers(s, m, count, what);
}

void message_free(struct message *m) {
    fds_close(&m->fds);
    free(m->fds.v);
    free(m->payload);
    memset(m, 0, sizeof *m);
}

// Returns 0, or -1 when the daemon had already closed the connection and closed_ok is set.
int send_all(int s, const uint8_t *p, size_t len, const char *what, int closed_ok) {
    while (len > 0) {
        ssize_t r = send(s, p, len, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && closed_ok && (errno == EPIPE || errno == ECONNRESET)) return -1;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            fail("sending %s: the daemon read nothing for %d s", what, REPLY_TIMEOUT_S);
        if (r < 0) fail_errno("send", what);
        p += r, len -= (size_t)r;
    }
    return 0;
}

// A message with no fds: 8-byte message header, 8-byte frame header (encoded in version), body.
int send_frame(int s, uint16_t version, int type, const uint8_t *body, size_t body_len, int closed_ok) {
    uint8_t buf[64];
    uint32_t payload = (uint32_t)(8 + body_len), magic = MAGIC, zero = 0;
    uint16_t t = (uint16_t)type;
    if (16 + body_len > sizeof buf) fail("internal: frame too large");
    memcpy(buf, &payload, 4), memcpy(buf + 4, &zero, 4);       // x86-64 stores little-endian
    memcpy(buf + 8, &magic, 4), memcpy(buf + 12, &version, 2), memcpy(buf + 14, &t, 2);
    if (body_len) memcpy(buf + 16, body, body_len);
    return send_all(s, buf, 16 + body_len, TYPE_NAMES[type], closed_ok);
}

void rfail(const struct reader *r, const char *fmt, ...) {
    char text[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fail("%s at byte %zu: %s", r->frame, r->pos, text);
}

int utf8_valid(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 9;
        if (k == 9 || n - i - 1 < k) return 0;
        uint32_t cp = k == 0 ? c : k == 1 ? c & 0x1F : k == 2 ? c & 0x0F : c & 0x07;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        static const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

static struct str str_n(struct reader *r, uint32_t n, const char *field) {
    struct str s = {(const char *)take(r, n, field), n};
    if (!utf8_valid((const uint8_t *)s.p, n)) rfail(r, "%s is not valid UTF-8", field);
    return s;
}
struct str str16(struct reader *r, const char *field) {
    uint16_t n = u16(r, field);
    if (n > MAX_STR16) rfail(r, "%s is %u bytes long, more than %u", field, n, MAX_STR16);
    return str_n(r, n, field);
}
// An ERROR's message or detail: a str32 of at most 4096 bytes.
static struct str text32(struct reader *r, const char *field) {
    uint32_t n = u32(r, field);
    if (n > MAX_TEXT) rfail(r, "%s is %u bytes long, more than %u", field, n, MAX_TEXT);
    return str_n(r, n, field);
}

void end_frame(const struct reader *r) {
    if (r->pos != r->len) rfail(r, "%zu trailing bytes after the frame", r->len - r->pos);
}

// The bytes of the character at s.p[i] when it is a control character (C0, DEL, C1) or U+2028 / U+2029, else 0.
// s is valid UTF-8.
static uint32_t unsafe_at(struct str s, uint32_t i) {
    const unsigned char *p = (const unsigned char *)s.p;
    if (p[i] < 0x20 || p[i] == 0x7f) return 1;
    if (p[i] == 0xc2 && i + 1 < s.n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f) return 2;
    if (p[i] == 0xe2 && i + 2 < s.n && p[i + 1] == 0x80 && (p[i + 2] == 0xa8 || p[i + 2] == 0xa9)) return 3;
    return 0;
}

// Whether s holds a character unsafe_at finds.
int unsafe_text(struct str s) {
    for (uint32_t i = 0; i < s.n; i++)
        if (unsafe_at(s, i)) return 1;
    return 0;
}

// A daemon's words on one line: each character unsafe_at finds becomes '?', so no daemon starts a line of its own
// or reaches the terminal.
static void print_sanitized(FILE *out, struct str s) {
    for (uint32_t i = 0; i < s.n; i++) {
        uint32_t k = unsafe_at(s, i);
        fputc(k ? '?' : s.p[i], out);
        if (k) i += k - 1;
    }
}

// Fails with the daemon's ERROR, saying `when` it came ("" or e.g. " before WELCOME"); returns its code only for
// NOT_READY (3) and STOPPING (6) when the caller may retry. Codes this client does not know are shown with their
// message, like the others.
int error_frame(struct reader *r, int retry_allowed, const char *when) {
    uint16_t code = u16(r, "code");
    uint8_t retryable = u8(r, "retryable");
    struct str message = text32(r, "message");
    uint32_t details = u32(r, "detail_count");
    if (details > MAX_DETAILS) rfail(r, "detail_count %u exceeds the limit of %u", details, MAX_DETAILS);
    size_t details_at = r->pos;
    for (uint32_t i = 0; i < details; i++) text32(r, "detail");
    uint32_t fp = u32(r, "daemon_fingerprint length");
    if (fp > MAX_BLOB) rfail(r, "daemon_fingerprint is %u bytes long, more than %u", fp, MAX_BLOB);
    take(r, fp, "daemon_fingerprint");
    end_frame(r);
    if (retryable > 1) rfail(r, "retryable is %u, not 0 or 1", retryable);
    if ((code == 3 || code == 6) && retry_allowed) return code;
    if (code > 0 && code < ERROR_CODES)
        fprintf(stderr, "engram-attach: the daemon answered%s: ERROR %s (%u%s): ", when, ERROR_NAMES[code], code,
                retryable ? ", retryable" : "");
    else
        fprintf(stderr, "engram-attach: the daemon answered%s: ERROR %u (a code unknown to this client%s): ", when, code,
                retryable ? ", retryable" : "");
    print_sanitized(stderr, message);
    fputc('\n', stderr);
    r->pos = details_at;
    for (uint32_t i = 0; i < details; i++) {
        fputs("  ", stderr);
        print_sanitized(stderr, text32(r, "detail"));
        fputc('\n', stderr);
    }
    exit(1);
}

const char *type_name(uint16_t type) { return type <= T_PART ? TYPE_NAMES[type] : "an unknown type"; }

// Version 2, "Parts": appends the bodies of the PARTs that follow a continued frame to m (whose payload holds the
// frame header and the first piece) until the PART without the continued bit. The total is bounded at 1 GiB.
static void recv_parts(const struct conn *c, struct message *m, uint16_t version, const char *what) {
    size_t cap = m->length;
    char label[64];
    for (uint32_t part = 1;; part++) {
        snprintf(label, sizeof label, "%s, PART %u", what, part);
        uint8_t header[8];
        size_t fds_before = m->fds.n;
        recv_exact(c->s, header, 8, m, label);
        uint32_t length = rd32(header), count = rd32(header + 4);
        if (length > MAX_PAYLOAD_V2) fail_msg(m, "%s: payload_length %u exceeds the limit of %u", label, length, MAX_PAYLOAD_V2);
        if (length <= 8)
            fail_msg(m, "%s: payload_length %u leaves no body after the frame header (a PART carries 1 to %u bytes)",
                     label, length, MAX_PIECE);
        if (count != 0)
            fail_msg(m, "%s: fd_count is %u, but a frame's fds all ride on its first message and PARTs carry none",
                     label, count);
        if ((uint64_t)m->length + (length - 8) > MAX_LOGICAL)
            fail_msg(m, "%s: the frame grows past %u bytes (1 GiB), the most a daemon sends in parts", label, MAX_LOGICAL);
        uint32_t start = m->length;
        recv_payload(c->s, m, &cap, length, label);
        if (m->fds.n != fds_before)
            fail_msg(m, "%s: %zu fds arrived with it, but a frame's fds all ride on its first message", label,
                     m->fds.n - fds_before);
        const uint8_t *h = m->payload + start;
        uint32_t magic = rd32(h);
        uint16_t v = rd16(h + 4), type = rd16(h + 6);
        if (magic != MAGIC) fail_msg(m, "%s: bad magic 0x%08X (expected 0x%08X, \"EGRM\")", label, magic, MAGIC);
        if (v != version)
            fail_msg(m, "%s: the frame header's version is %u, but version %u was chosen", label, v, version);
        if ((type & ~CONTINUED) != T_PART)
            fail_msg(m, "%s: type 0x%04X (%s) where a PART (11) was due: the frame before it was continued", label, type,
                     type_name(type & ~CONTINUED));
        memmove(m->payload + start, h + 8, length - 8);
        m->length = start + length - 8;
        if (!(type & CONTINUED)) return;
    }
}

// One frame from the daemon: a message and its frame header checked (magic; version: the chosen one, or before
// WELCOME 1 or 2, stored in *version for the caller to judge), then in version 2 the PARTs of a continued frame
// appended. m->payload is then the 8-byte frame header (type without the continued bit) and the whole body.
// Returns the type.
uint16_t recv_frame(const struct conn *c, struct message *m, const char *what, uint16_t *version_out) {
    recv_message(c->s, m, what, c->version == 2 ? MAX_PAYLOAD_V2 : c->version == 1 ? MAX_PAYLOAD_V1 : MAX_PAYLOAD_PRE);
    uint32_t magic = rd32(m->payload);
    uint16_t version = rd16(m->payload + 4), type = rd16(m->payload + 6);
    if (magic != MAGIC) fail_msg(m, "%s at byte 0: bad magic 0x%08X (expected 0x%08X, \"EGRM\")", what, magic, MAGIC);
    if (c->version && version != c->version)
        fail_msg(m, "%s at byte 4: the frame header's version is %u, but version %u was chosen at WELCOME and every "
                    "later frame must carry it", what, version, c->version);
    if (!c->version && (version < VERSION_MIN || version > VERSION_MAX))
        fail_msg(m, "%s at byte 4: the frame header's version is %u; this client speaks %d to %d", what, version,
                 VERSION_MIN, VERSION_MAX);
    if (version >= 2 && (type & CONTINUED) && (type & ~CONTINUED) != T_PART) {
        type &= (uint16_t)~CONTINUED;
        if (m->length - 8 > MAX_PIECE) fail_msg(m, "%s: the first piece of a continued frame is over %u bytes", what, MAX_PIECE);
        memcpy(m->payload + 6, &type, 2);
        recv_parts(c, m, version, type_name(type));
    }
    if ((type & ~CONTINUED) == T_PART) {
        if (version >= 2) fail_msg(m, "%s: a PART (type 0x%04X) arrived without a continued frame before it", what, type);
        fail_msg(m, "%s: a PART (11) in a version-1 frame; PARTs exist only in version 2", what);
    }
    if (type != T_MANIFEST && m->fds.n > 0)
        fail_msg(m, "a frame of type %u (%s) carried %zu fds; only MANIFEST may", type, type_name(type), m->fds.n);
    if (version_out) *version_out = version;
    return type;
}

// Reads the next frame into m and r (r at its body), expecting `expected`: returns 0 once it came. An ERROR fails,
// or returns its code for a NOT_READY (3) or STOPPING (6) when retry_allowed; any other type fails.
int open_frame(const struct conn *c, struct message *m, struct reader *r, int expected, int retry_allowed) {
    uint16_t type = recv_frame(c, m, TYPE_NAMES[expected], NULL);
    r->p = m->payload, r->len = m->length, r->pos = 8, r->frame = TYPE_NAMES[expected];
    if (type == T_ERROR) {
        r->frame = "ERROR";
        return error_frame(r, retry_allowed, "");
    }
    if (type != expected)
        fail_msg(m, "expected %s (%d), got %s (%u)", TYPE_NAMES[expected], expected, type_name(type), type);
    return 0;
}
