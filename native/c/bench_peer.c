// engram-attach --bench-peer: this client as JMH AttachBench's separate process (its own framing, not the daemon's).
#include "engram_attach.h"

// ---------------------------------------------------------------------------------------------- bench peer

// --bench-peer PATH: this client as a separate process for the JMH AttachBench (jmh/.../CPeer.java), which times
// its PING (cRoundTrip); the benchmark's C baseline of the attach is the library (engram_attach_bench.c).
// Connects to the benchmark's Unix socket at PATH and serves requests there, one at a time, until the
// benchmark closes the connection (then exits 0). Each request is one message of this file's framing
// (u32 payload_length, u32 fd_count, payload, fds by SCM_RIGHTS) with a 24-byte payload:
//   u32 op, u32 kind (0 memfd, 1 memfd-hugetlb, 2 cuda-vmm host), u32 flags (1 CPU view, 2 register),
//   i32 numa node of a cuda-vmm region, u64 size in bytes
// ops: 1 CONTEXT (libcuda, cuInit, primary context; no fd), 2 ATTACH (one fd: the region, attached exactly
// as a protocol import attaches it: the same functions), 3 RELEASE (the last ATTACH's region, and its fd
// closed), 4 PING (nothing: the request/answer cost that every timed ATTACH includes). Each request is
// answered by one message without fds whose payload is a JSON object with the request's own timings.
enum { P_CONTEXT = 1, P_ATTACH, P_RELEASE, P_PING };
#define PEER_REQUEST_BYTES 24

static void peer_reply(int s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void peer_reply(int s, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof text) fail("internal: bench peer reply too long");
    uint8_t header[8];
    uint32_t len = (uint32_t)n, zero = 0;
    memcpy(header, &len, 4), memcpy(header + 4, &zero, 4);
    send_all(s, header, 8, "bench peer reply", 0);
    send_all(s, (const uint8_t *)text, (size_t)n, "bench peer reply", 0);
}

int bench_peer(const char *path, int device) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) fail_errno("socket", "AF_UNIX, SOCK_STREAM");
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, path, strlen(path));
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) fail_errno("connect", path);
    struct message held;       // the ATTACH request whose fd is attached, until RELEASE
    struct manifest mf;
    CUdeviceptr va = 0;
    int attached = 0;
    memset(&held, 0, sizeof held);
    for (;;) {
        uint8_t probe;
        ssize_t k;
        do k = recv(s, &probe, 1, MSG_PEEK); while (k < 0 && errno == EINTR);
        if (k == 0) break;  // the benchmark is done
        if (k < 0) fail_errno("recv", "bench peer request");
        struct message m;
        recv_message(s, &m, "bench peer request", MAX_PAYLOAD_V1);
        if (m.length != PEER_REQUEST_BYTES) fail_msg(&m, "bench peer request of %u bytes; expected %d", m.length, PEER_REQUEST_BYTES);
        uint32_t op = rd32(m.payload), kind = rd32(m.payload + 4), flags = rd32(m.payload + 8);
        int32_t node = (int32_t)rd32(m.payload + 12);
        uint64_t size = rd64(m.payload + 16);
        size_t want_fds = op == P_ATTACH ? 1 : 0;
        if (m.fds.n != want_fds) fail_msg(&m, "bench peer op %u came with %zu fds; expected %zu", op, m.fds.n, want_fds);
        double t0 = now_ms();
        if (op == P_CONTEXT) {
            double ms = cuda_context(device);
            message_free(&m);
            peer_reply(s, "{\"op\":\"context\",\"context_ms\":%.3f}", ms);
        } else if (op == P_PING) {
            message_free(&m);
            peer_reply(s, "{\"op\":\"ping\"}");
        } else if (op == P_ATTACH) {
            if (attached) fail_msg(&m, "bench peer: ATTACH while a region is still attached (RELEASE first)");
            if (kind == K_VMM_HOST || (flags & 2)) cuda_context(device);  // once, and not timed
            struct timings t;
            t0 = now_ms();
            attach_one(device, kind, flags, m.fds.v[0], size, node, &mf, &va, &t);
            double total = now_ms() - t0;
            held = m;
            attached = 1;
            peer_reply(s, "{\"op\":\"attach\",\"attach_ms\":%.3f,\"import_ms\":%.3f,\"reserve_map_ms\":%.3f,"
                          "\"gpu_access_ms\":%.3f,\"cpu_access_ms\":%.3f,\"mmap_ms\":%.3f,\"register_ms\":%.3f}",
                       total, t.import, t.reserve_map, t.gpu_access, t.cpu_access, t.mmap, t.reg);
        } else if (op == P_RELEASE) {
            message_free(&m);
            if (!attached) fail("bench peer: RELEASE with nothing attached");
            release(&mf, va);  // frees mf's arrays
            va = 0;
            message_free(&held);  // closes the region's fd
            attached = 0;
            peer_reply(s, "{\"op\":\"release\",\"release_ms\":%.3f}", now_ms() - t0);
        } else {
            fail_msg(&m, "bench peer: unknown op %u", op);
        }
    }
    if (attached) {
        release(&mf, va);
        message_free(&held);
    }
    close(s);
    return 0;
}
