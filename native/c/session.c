// engram-attach: one repetition: connect, the daemon's uid, HELLO and WELCOME, IMPORT until a MANIFEST, attach,
// verify, release, BYE, and its report.
#include "engram_attach.h"

#include <grp.h>
#include <pwd.h>

static const char *const CONTENT_NAMES[] = {"ok", "mismatch", "not checked", "missing"};
static const char *const ENGRAM_NAMES[] = {"", "ok", "mismatch"};

static void copy_str(char *dst, size_t cap, struct str s) {
    size_t n = s.n < cap - 1 ? s.n : cap - 1;
    memcpy(dst, s.p, n);
    dst[n] = 0;
}

// "Transport": the client checks the daemon too. Right after connect, the daemon's uid (SO_PEERCRED) must be
// root's, this client's euid or one given with --daemon-uid; else someone else may be squatting the socket path.
static void check_daemon_uid(struct conn *c, const struct options *o) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(c->s, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) fail_errno("getsockopt", "SO_PEERCRED");
    if (len != sizeof cred) fail("getsockopt(SO_PEERCRED) gave %u bytes, not %zu", (unsigned)len, sizeof cred);
    c->peer_uid = cred.uid, c->peer_pid = cred.pid;
    uint32_t me = geteuid();
    if (cred.uid == 0 || cred.uid == me) return;
    for (int i = 0; i < o->daemon_uids_n; i++)
        if (o->daemon_uids[i] == cred.uid) return;
    char allowed[MAX_DAEMON_UIDS * 24 + 64];
    size_t n = (size_t)snprintf(allowed, sizeof allowed, "0 (root)");
    if (me != 0) n += (size_t)snprintf(allowed + n, sizeof allowed - n, ", %u (this client's euid)", me);
    for (int i = 0; i < o->daemon_uids_n; i++)
        n += (size_t)snprintf(allowed + n, sizeof allowed - n, ", %u (--daemon-uid)", o->daemon_uids[i]);
    fail("refusing the daemon on %s: its uid (SO_PEERCRED, pid %d) is %u, and this client trusts only the uids %s; "
         "if that user's daemon is meant to serve you, add --daemon-uid %u", o->socket, (int)cred.pid,
         (unsigned)cred.uid, allowed, (unsigned)cred.uid);
}

// "mode 0700, owner uid 0 (root), group 0 (root)" of path (a link not followed), into buf; 0 when unreadable.
static int describe_attrs(const char *path, char *buf, size_t n) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    char owner[80] = "", group[80] = "";
    struct passwd *pw = getpwuid(st.st_uid);
    if (pw) snprintf(owner, sizeof owner, " (%.64s)", pw->pw_name);
    struct group *gr = getgrgid(st.st_gid);
    if (gr) snprintf(group, sizeof group, " (%.64s)", gr->gr_name);
    snprintf(buf, n, "mode %04o, owner uid %u%s, group %u%s", (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
             owner, (unsigned)st.st_gid, group);
    return 1;
}

// connect() failed with EACCES or EPERM: one line naming the first directory down to the socket this uid may not
// search (mode, owner, group), else the socket's own mode, and the fix (the daemon's --allow-uid naming this uid, a
// directory that lets it search), as the Java and Python clients say it (docs/security.md, "Other uids").
static void fail_access(const char *socket_path, int e) {
    unsigned uid = (unsigned)geteuid();
    char dir[sizeof ((struct sockaddr_un *)0)->sun_path + 1];
    snprintf(dir, sizeof dir, "%s", socket_path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    char attrs[256], prefix[256];
    snprintf(prefix, sizeof prefix, "cannot connect to %s: %s (%s)", socket_path, strerrorname_np(e), strerror(e));
    // every directory from / down to the socket's own, in order ("." for a relative path's own)
    char cur[sizeof dir];
    size_t len = strlen(dir);
    for (size_t i = dir[0] == '/' ? 0 : len; i <= len; i++) {
        if (i == 0) snprintf(cur, sizeof cur, "/");
        else if (i == len || dir[i] == '/') memcpy(cur, dir, i), cur[i] = 0;
        else continue;
        if (access(cur, X_OK) != 0) {
            if (!describe_attrs(cur, attrs, sizeof attrs)) snprintf(attrs, sizeof attrs, "unreadable");
            fail("%s: uid %u may not search %s (%s): the daemon must admit uid %u (serve --allow-uid %u), and %s must "
                 "let it search (chmod o+x %s, or g+x with uid %u in its group; a socket directory the daemon creates "
                 "with --allow-uid is mode 0711)", prefix, uid, cur, attrs, uid, uid, cur, cur, uid);
        }
    }
    if (access(socket_path, W_OK) != 0) {
        if (describe_attrs(socket_path, attrs, sizeof attrs))
            fail("%s: the socket (%s) lets only its owner connect: the daemon must admit uid %u (serve --allow-uid %u); "
                 "the socket is then mode 0666 and each peer's uid is checked", prefix, attrs, uid, uid);
        fail("%s: the socket lets only its owner connect: the daemon must admit uid %u (serve --allow-uid %u); the "
             "socket is then mode 0666 and each peer's uid is checked", prefix, uid, uid);
    }
    if (!describe_attrs(dir, attrs, sizeof attrs)) snprintf(attrs, sizeof attrs, "unreadable");
    fail("%s: neither the socket's mode nor its directory %s (%s) shuts uid %u out (an ACL or a security module may): "
         "the daemon must admit uid %u (serve --allow-uid %u), and the socket and its directory must let it in", prefix,
         dir, attrs, uid, uid, uid);
}

// connect, the daemon's uid, HELLO (encoded as version 1, versions 1 to 2), WELCOME (encoded in the version it
// chooses). The first frame may be an ERROR that the daemon sent at accept (NOT_ALLOWED, BUSY) or in answer to
// HELLO: encoded as version 1, it fails. With absent_ok, a socket nobody listens on (ENOENT, ECONNREFUSED) returns a
// conn whose s is -1 instead of failing.
static struct conn connect_and_hello(const struct options *o, struct daemon_info *info, int absent_ok) {
    struct conn c = {socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), 0, 0, 0};
    if (c.s < 0) fail_errno("socket", "AF_UNIX, SOCK_STREAM");
    struct timeval tv = {REPLY_TIMEOUT_S, 0};
    if (setsockopt(c.s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) || setsockopt(c.s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv))
        fail_errno("setsockopt", "SO_RCVTIMEO/SO_SNDTIMEO");
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, o->socket, strlen(o->socket));
    if (connect(c.s, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        if ((e == ENOENT || e == ECONNREFUSED) && absent_ok) {
            close(c.s);
            c.s = -1;
            return c;
        }
        if (e == ENOENT || e == ECONNREFUSED)  // what to do, as the Java and Python clients say it
            fail("no daemon listens on %s: connect failed: %s (%s): %s", o->socket, strerrorname_np(e), strerror(e),
                 e == ENOENT ? "start one (engram-host serve), or name the running one's socket with --socket or"
                               " ENGRAM_HOST_SOCKET"
                             : "the socket file is left from a daemon that is gone; the next daemon on this path"
                               " removes it");
        if (e == EACCES || e == EPERM) fail_access(o->socket, e);
        errno = e;
        fail_errno("connect", o->socket);
    }
    check_daemon_uid(&c, o);
    static const char name[] = "engram-attach";
    uint16_t min = VERSION_MIN, max = VERSION_MAX, n = sizeof name - 1;  // HELLO: min, max, pid, str16 client
    int32_t pid = getpid();
    uint8_t body[2 + 2 + 4 + 2 + sizeof name - 1];
    memcpy(body, &min, 2), memcpy(body + 2, &max, 2), memcpy(body + 4, &pid, 4), memcpy(body + 8, &n, 2);
    memcpy(body + 10, name, sizeof name - 1);
    // A daemon that refused us at accept has written its ERROR and closed: the HELLO may find the socket gone
    // (EPIPE, ECONNRESET), and the ERROR is still there to read.
    send_frame(c.s, 1, T_HELLO, body, sizeof body, 1);
    struct message m;
    uint16_t header_version;
    uint16_t type = recv_frame(&c, &m, "WELCOME", &header_version);
    struct reader r = {m.payload, m.length, 8, "WELCOME"};
    if (type == T_ERROR) {
        r.frame = "ERROR";
        if (header_version != 1)
            rfail(&r, "the frame header's version is %u, but a frame sent before a version is chosen is version 1",
                  header_version);
        error_frame(&r, 0, " before WELCOME");
    }
    if (type != T_WELCOME) fail_msg(&m, "expected WELCOME (2), got %s (%u)", type_name(type), type);
    uint16_t version = u16(&r, "version");
    if (version < VERSION_MIN || version > VERSION_MAX)
        rfail(&r, "the daemon chose version %u; this client speaks %d to %d", version, VERSION_MIN, VERSION_MAX);
    if (header_version != version)
        rfail(&r, "the frame header's version is %u, but the WELCOME's version field chose %u: a WELCOME carries the "
                  "version it chooses", header_version, version);
    info->protocol = version;
    info->pid = i32(&r, "pid");
    copy_str(info->version, sizeof info->version, str16(&r, "daemon_version"));
    copy_str(info->backend, sizeof info->backend, str16(&r, "backend"));
    copy_str(info->instance, sizeof info->instance, str16(&r, "instance"));
    info->state = u8(&r, "state");
    info->uid = c.peer_uid;
    uint32_t uid = version >= 2 ? u32(&r, "uid") : c.peer_uid;
    end_frame(&r);
    if (info->state > 3) rfail(&r, "state %u is not 0..3", info->state);
    if (uid != c.peer_uid)
        rfail(&r, "uid is %u, but SO_PEERCRED says the daemon's uid is %u (pid %d): refusing a daemon that misstates "
                  "who it is", uid, c.peer_uid, (int)c.peer_pid);
    message_free(&m);
    c.version = version;
    return c;
}

// IMPORT (expectation any) until a MANIFEST comes; for --wait-ms (which run_once's first connect waits within too, for a
// daemon still starting), NOT_READY is asked again every 100 ms, and STOPPING
// (a restart under way) on a new connection, a socket nobody listens on meanwhile tried again every 100 ms.
static void import_manifest(struct conn *c, struct daemon_info *d, const struct options *o, struct message *m,
                            struct manifest *mf, double *ms) {
    double deadline = now_ms() + o->wait_ms;
    // flags 0, device (the client's GPU: its device tensors come too), expectation 0 (any)
    uint8_t body[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t dev = (uint32_t)(int32_t)o->device;
    for (int k = 0; k < 4; k++) body[4 + k] = (uint8_t)(dev >> (8 * k));
    for (;;) {
        double t0 = now_ms();
        send_frame(c->s, c->version, T_IMPORT, body, sizeof body, 0);
        struct reader r;
        int retry = open_frame(c, m, &r, T_MANIFEST, now_ms() < deadline);
        if (!retry) {
            parse_manifest(m, &r, mf);
            *ms = now_ms() - t0;
            return;
        }
        message_free(m);
        struct timespec pause = {0, RETRY_MS * 1000 * 1000};
        nanosleep(&pause, NULL);
        if (retry == 6) {  // STOPPING: the daemon closes this connection; its successor answers on a new one
            close(c->s);
            for (*c = connect_and_hello(o, d, now_ms() < deadline); c->s < 0;
                 *c = connect_and_hello(o, d, now_ms() < deadline))
                nanosleep(&pause, NULL);
        }
    }
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void json_strn(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void report(const struct options *o, int rep, const struct daemon_info *d, const struct manifest *mf,
                   const struct timings *t, int verified, const struct content_result *cr) {
    double gbps = cr && t->content > 0 ? cr->bytes / (t->content * 1e6) : 0;
    double attach = t->import + t->reserve_map + t->gpu_access + t->cpu_access + t->mmap + t->reg;
    double gib = mf->att_bytes / GIB;  // what is attached: every region, or those of --table's tables
    char sha[65];
    for (int i = 0; i < 32; i++) sprintf(sha + 2 * i, "%02x", mf->sha256[i]);
    if (o->json) {
        printf("{\"rep\":%d,\"backend\":", rep);
        json_str(d->backend);
        printf(",\"daemon_pid\":%d,\"daemon_uid\":%u,\"protocol\":%u,\"daemon_state\":\"%s\",\"daemon_version\":",
               d->pid, d->uid, d->protocol, STATE_NAMES[d->state]);
        json_str(d->version);
        printf(",\"fingerprint\":\"%s\",\"regions\":%u,\"vmm_regions\":%d,\"tables\":%u,\"bytes\":%llu,"
               "\"table_bytes\":%llu,\"device\":%d,\"cpu_view\":%s,\"register\":%s,\"context_ms\":%.3f,"
               "\"handshake_ms\":%.3f,\"manifest_ms\":%.3f,\"import_ms\":%.3f,\"reserve_map_ms\":%.3f,"
               "\"gpu_access_ms\":%.3f,\"cpu_access_ms\":%.3f,\"mmap_ms\":%.3f,\"register_ms\":%.3f,"
               "\"attach_ms\":%.3f,\"ms_per_gib\":%.3f,\"total_ms\":%.3f,\"release_ms\":%.3f",
               sha, mf->regions_n, mf->vmm_regions, mf->tables_n, (unsigned long long)mf->region_bytes,
               (unsigned long long)mf->table_bytes, o->device, o->cpu_view ? "true" : "false", o->reg ? "true" : "false",
               t->context, t->handshake, t->manifest, t->import, t->reserve_map, t->gpu_access, t->cpu_access, t->mmap,
               t->reg, attach, gib > 0 ? attach / gib : 0, t->handshake + t->manifest + attach, t->release);
        printf(",\"attached_regions\":%u,\"attached_vmm_regions\":%u,\"attached_bytes\":%llu,\"attached_tables\":%u,"
               "\"attached_table_bytes\":%llu", mf->att_regions, mf->att_vmm_regions, (unsigned long long)mf->att_bytes,
               mf->att_tables, (unsigned long long)mf->att_table_bytes);
        if (o->tables_n) {
            printf(",\"selected_tables\":[");
            for (int k = 0; k < o->tables_n; k++) {
                if (k) putchar(',');
                json_str(o->tables[k]);
            }
            putchar(']');
        }
        if (o->verify) printf(",\"verified_tables\":%d,\"verify_ms\":%.3f", verified, t->verify);
        if (cr) {
            printf(",\"content_check\":{\"algorithm\":\"sha256-tree-v1\",\"sidecar\":");
            json_str(o->content.path);
            printf(",\"record_version\":%d,\"ok\":%u,\"mismatch\":%u,\"missing\":%u,\"not_checked\":%u,"
                   "\"engram_ok\":%u,\"engram_mismatch\":%u,\"bytes\":%llu,\"ms\":%.3f,\"gb_per_s\":%.3f,"
                   "\"threads\":1,\"tables\":[", o->content.version, cr->counts[C_OK], cr->counts[C_MISMATCH],
                   cr->counts[C_MISSING], cr->counts[C_NOT_CHECKED], cr->engram_counts[E_OK],
                   cr->engram_counts[E_MISMATCH], (unsigned long long)cr->bytes, t->content, gbps);
            for (uint32_t i = 0; i < cr->n; i++) {
                printf("%s{\"name\":", i ? "," : "");
                json_strn(cr->names[i].p, cr->names[i].n);
                printf(",\"content\":\"%s\"", CONTENT_NAMES[cr->status[i]]);
                if (cr->hex[i][0]) printf(",\"digest\":\"%s\"", cr->hex[i]);
                if (cr->engram[i]) printf(",\"engram_digest\":\"%s\"", ENGRAM_NAMES[cr->engram[i]]);
                printf("}");
            }
            printf("]}");
        }
        printf("}\n");
    } else {
        printf("rep %d: %u tables, %llu bytes in %u regions (%.3f GiB, %d cuda-vmm) from %s daemon %s (pid %d, uid %u, "
               "protocol %u, %s at WELCOME), fingerprint %s\n",
               rep, mf->tables_n, (unsigned long long)mf->table_bytes, mf->regions_n, mf->region_bytes / GIB,
               mf->vmm_regions, d->backend,
               d->version, d->pid, d->uid, d->protocol, STATE_NAMES[d->state], sha);
        if (o->tables_n) {
            printf("  selected       %u of %u tables (", mf->att_tables, mf->tables_n);
            for (int k = 0; k < o->tables_n; k++) printf("%s%s", k ? ", " : "", o->tables[k]);
            printf("), %llu bytes; attached %u of %u regions, %llu bytes (%.3f GiB); the other %u region fds closed "
                   "unmapped\n", (unsigned long long)mf->att_table_bytes, mf->att_regions, mf->regions_n,
                   (unsigned long long)mf->att_bytes, gib, mf->regions_n - mf->att_regions);
        }
        if (t->context > 0) printf("  context        %9.3f ms (dlopen, cuInit, primary context, granularity)\n", t->context);
        printf("  handshake      %9.3f ms (connect, HELLO, WELCOME)\n", t->handshake);
        printf("  manifest       %9.3f ms (IMPORT, MANIFEST and fds, validated)\n", t->manifest);
        if (mf->att_vmm_regions)
            printf("  import %.3f ms, reserve+map %.3f ms, GPU access %.3f ms, CPU access %.3f ms\n", t->import,
                   t->reserve_map, t->gpu_access, t->cpu_access);
        if (mf->att_regions > mf->att_vmm_regions) printf("  mmap %.3f ms, register %.3f ms\n", t->mmap, t->reg);
        printf("  attach         %9.3f ms (%.3f ms/GiB); release %.3f ms\n", attach, gib > 0 ? attach / gib : 0, t->release);
        if (o->verify) printf("  verified       %d of %u table digests (%.3f ms)\n", verified, mf->att_tables, t->verify);
        if (cr) {
            printf("  content        %u of %u tables ok against %s (sha256-tree-v1, %.3f ms, %.2f GB/s on 1 thread); "
                   "%u mismatch, %u missing, %u not checked (not CPU-readable)\n", cr->counts[C_OK], cr->n,
                   o->content.path, t->content, gbps, cr->counts[C_MISMATCH], cr->counts[C_MISSING],
                   cr->counts[C_NOT_CHECKED]);
            if (o->content.version == 2)
                printf("  engram digest  %u of %u tables the record holds agree with the manifest (engram-digest-v1); "
                       "%u differ\n", cr->engram_counts[E_OK], cr->engram_counts[E_OK] + cr->engram_counts[E_MISMATCH],
                       cr->engram_counts[E_MISMATCH]);
            for (uint32_t i = 0; i < cr->n; i++) {
                if (cr->status[i] != C_OK)
                    printf("    %-11s  %.*s\n", CONTENT_NAMES[cr->status[i]], (int)cr->names[i].n, cr->names[i].p);
                if (cr->engram[i] == E_MISMATCH)
                    printf("    %-11s  %.*s (engram-digest-v1)\n", "mismatch", (int)cr->names[i].n, cr->names[i].p);
            }
        }
    }
    fflush(stdout);
}

void run_once(const struct options *o, int rep) {
    struct timings t;
    memset(&t, 0, sizeof t);
    struct daemon_info d;
    double t0 = now_ms();
    // --wait-ms: a daemon still starting (no socket yet, or one nobody listens on yet) is tried again every 100 ms
    struct conn c;
    for (c = connect_and_hello(o, &d, now_ms() < t0 + o->wait_ms); c.s < 0;
         c = connect_and_hello(o, &d, now_ms() < t0 + o->wait_ms)) {
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    t.handshake = now_ms() - t0;
    struct message m;
    struct manifest mf;
    import_manifest(&c, &d, o, &m, &mf, &t.manifest);
    select_tables(o, &m, &mf);  // with --table, the other regions' fds are closed here, never imported or mapped
    uint32_t memfd_regions = mf.att_regions - mf.att_vmm_regions;
    if (mf.att_vmm_regions || (o->reg && memfd_regions)) t.context = cuda_context(o->device);
    CUdeviceptr va = 0;
    if (mf.att_vmm_regions) attach_vmm(o, &mf, &t, &va);
    if (memfd_regions) attach_memfd(o, &mf, &t);
    if (o->ready_line) {  // for whoever times a restart: the tables are usable from here on
        printf("attached %d\n", rep);
        fflush(stdout);
    }
    int verified = 0;
    if (o->verify) {
        double v0 = now_ms();
        verified = (int)verify_tables(&mf);
        t.verify = now_ms() - v0;
    }
    struct content_result cr;
    uint32_t problems = 0;
    if (o->content.path) {
        double c0 = now_ms();
        verify_content(o, &mf, &cr);
        t.content = now_ms() - c0;
        problems = content_problems(o, &mf, &cr);  // before release: the names live in the MANIFEST
    }
    double r0 = now_ms();
    release(&mf, va);
    message_free(&m);  // closes the fds
    t.release = now_ms() - r0;
    send_frame(c.s, c.version, T_BYE, NULL, 0, 1);  // a daemon that stopped meanwhile has ended the lease already
    close(c.s);
    report(o, rep, &d, &mf, &t, verified, o->content.path ? &cr : NULL);
    if (o->content.path) {
        for (uint32_t i = 0; i < cr.n; i++) free((void *)cr.names[i].p);
        free(cr.index);
        free(cr.names);
        free(cr.status);
        free(cr.engram);
        free(cr.hex);
    }
    if (problems) exit(1);
}
