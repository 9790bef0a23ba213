// engram-attach's command line: arguments, the socket path (docs/protocol.md, "Socket path"), main.
#include "engram_attach.h"

// ---------------------------------------------------------------------------------------------- main

static const char USAGE[] =
    "usage: engram-attach [--socket TEMPLATE] [--instance NAME] [--device N] [--daemon-uid UID]... [--cpu-view]\n"
    "                     [--register] [--repeat K] [--json] [--verify] [--verify-content SIDECAR] [--wait-ms MS]\n"
    "                     [--ready-line] [--accept-future-write-seal] [--table NAME]...\n"
    "  --socket TEMPLATE  the daemon's socket: a path, or a template with {instance} and {device} (default: the\n"
    "                 environment variable ENGRAM_HOST_SOCKET, else /run/engram-host/{instance}.sock for root,\n"
    "                 $XDG_RUNTIME_DIR/engram-host/{instance}.sock, else /tmp/engram-host-EUID/{instance}.sock)\n"
    "  --instance NAME  the daemon's instance name for {instance} (default 'default')\n"
    "  --device N     GPU ordinal for the CUDA context, access, IMPORT and {device} (default 0)\n"
    "  --daemon-uid UID  also trust a daemon running as UID (repeatable; root's and this euid's always are)\n"
    "  --cpu-view     also give the CPU read access to cuda-vmm host regions (HOST_NUMA)\n"
    "  --register     cuMemHostRegister the memfd mappings (needs a GPU)\n"
    "  --repeat K     connect, import, attach and release K times (default 1)\n"
    "  --json         one JSON object per repetition\n"
    "  --verify       digest every CPU-readable table through its mapping and compare with the manifest\n"
    "  --verify-content SIDECAR  compute the sha256-tree-v1 digest of every CPU-readable table through its mapping\n"
    "                 (memfd; cuda-vmm host with --cpu-view; device tensors are 'not checked') and compare with the\n"
    "                 digest record of `engram-host inspect --write-digests` (version 2 or 1); with version 2 also\n"
    "                 compare each table's engram-digest-v1 with the manifest's; a mismatch or a table the record\n"
    "                 lacks fails (exit 1)\n"
    "  --wait-ms MS   retry while the daemon is starting (no socket yet, or nobody listening yet), while it\n"
    "                 answers NOT_READY, or on a new connection STOPPING (a restart), up to MS (default 0)\n"
    "  --ready-line   print 'attached REP' as soon as every region is attached (before verify and release)\n"
    "  --table NAME   attach only the regions that hold the named tables (repeatable, at most 64; default: every\n"
    "                 table): the whole MANIFEST is still received and checked, the other regions' fds are closed\n"
    "                 unmapped; --verify, --verify-content, --cpu-view and --register then apply to the named tables\n"
    "                 alone; a name the daemon does not serve fails (exit 1); `engram-host status` lists the names\n"
    "  --accept-future-write-seal  also accept memfds sealed FUTURE_WRITE instead of WRITE (a daemon of an older\n"
    "                 build; FUTURE_WRITE leaves writable a mapping made before it)\n"
    "       engram-attach --bench-peer PATH [--device N]\n"
    "       engram-attach --self-test-sha256   check SHA-256 and sha256-tree-v1 against known vectors\n"
    "  --bench-peer   serve attach requests of the JMH AttachBench on its socket PATH (see bench_peer)\n";

static long int_arg(int argc, char **argv, int *i, long min, long max) {
    if (*i + 1 >= argc) fail("%s needs a value (see --help)", argv[*i]);
    const char *v = argv[++*i];
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *v == 0 || *end || x < min || x > max)
        fail("%s: '%s' is not an integer in %ld..%ld", argv[*i - 1], v, min, max);
    return x;
}

static int blank(const char *s) {  // NULL, empty or only white space (Java's isBlank, for ASCII)
    for (; s && *s; s++)
        if (!strchr(" \t\n\v\f\r", *s)) return 0;
    return 1;
}

// docs/protocol.md, "Socket path": the template from --socket, else $ENGRAM_HOST_SOCKET, else this euid's default,
// with {instance} and {device} filled in ({device_uuid} would need the driver's UUID of the GPU: refused). The
// result must be absolute and at most 107 bytes. Returns a static buffer. Resolved as the Java SocketPaths does
// (blank sources skipped, an XDG_RUNTIME_DIR with a brace counts as unset, an empty instance is 'default'), except
// that {device} is --device's value, 0 by default, as for everything else here.
static const char *resolve_socket(const char *flag, const char *instance, int device) {
    static char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char prefix[4096] = "", out[8192];
    const char *template, *from;
    for (const char *c = instance; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("._-", *c)))
            fail("--instance '%s' may hold only letters, digits, '.', '_' and '-'", instance);
    if (!*instance) instance = "default";
    const char *env = getenv("ENGRAM_HOST_SOCKET");
    if (!blank(flag)) {
        template = flag, from = "--socket";
    } else if (!blank(env)) {
        template = env, from = "ENGRAM_HOST_SOCKET";
    } else {  // the default: its directory part is literal
        uid_t euid = geteuid();
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        if (euid == 0) {
            snprintf(prefix, sizeof prefix, "/run/engram-host/");
        } else if (xdg && xdg[0] == '/' && !strpbrk(xdg, "{}")) {  // a brace could not be in a template: unset
            size_t n = strlen(xdg);
            while (n > 1 && xdg[n - 1] == '/') n--;
            if (n >= sizeof prefix - 32) fail("XDG_RUNTIME_DIR is %zu bytes long, too long for a socket path", n);
            snprintf(prefix, sizeof prefix, "%.*s%sengram-host/", (int)n, xdg, n > 1 ? "/" : "");
        } else {
            snprintf(prefix, sizeof prefix, "/tmp/engram-host-%u/", (unsigned)euid);
        }
        template = "{instance}.sock", from = "the default socket template";
    }
    size_t n = (size_t)snprintf(out, sizeof out, "%s", prefix);
    for (const char *c = template; *c && n < sizeof out - 1;) {
        const char *brace = *c == '{' ? strchr(c, '}') : NULL;
        if (!brace) {  // a '{' with no '}' after it is literal, like any other byte
            out[n++] = *c++;
            continue;
        }
        size_t len = (size_t)(brace - c - 1);
        const char *name = c + 1;
        if (len == 8 && !strncmp(name, "instance", 8)) {
            n += (size_t)snprintf(out + n, sizeof out - n, "%s", instance);
        } else if (len == 6 && !strncmp(name, "device", 6)) {
            n += (size_t)snprintf(out + n, sizeof out - n, "%d", device);
        } else if (len == 11 && !strncmp(name, "device_uuid", 11)) {
            fail("socket template '%s' (from %s) uses {device_uuid}, the GPU's UUID, which engram-attach does not "
                 "look up; pass the resolved path with --socket", template, from);
        } else {
            fail("socket template '%s' (from %s): unknown placeholder {%.*s}; known: {instance}, {device}, {device_uuid}",
                 template, from, (int)len, name);
        }
        c = brace + 1;
    }
    if (n >= sizeof out - 1) fail("socket template '%s' (from %s) resolves to more than %zu bytes", template, from, sizeof out);
    out[n] = 0;
    if (out[0] != '/') fail("socket path '%s' (from %s) must be absolute", out, from);
    if (n > sizeof path - 1)
        fail("socket path '%s' (from %s) is %zu bytes long, more than %zu, the limit of a Unix socket address", out, from,
             n, sizeof path - 1);
    memcpy(path, out, n + 1);
    return path;
}

int main(int argc, char **argv) {
    struct options o = {.repeat = 1};
    const char *peer = NULL, *socket_flag = NULL, *instance = "default", *content = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--bench-peer")) {
            if (i + 1 >= argc) fail("--bench-peer needs a value (see --help)");
            peer = argv[++i];
        } else if (!strcmp(a, "--socket")) {
            if (i + 1 >= argc) fail("--socket needs a value (see --help)");
            socket_flag = argv[++i];
        } else if (!strcmp(a, "--instance")) {
            if (i + 1 >= argc) fail("--instance needs a value (see --help)");
            instance = argv[++i];
        } else if (!strcmp(a, "--daemon-uid")) {
            if (o.daemon_uids_n == MAX_DAEMON_UIDS) fail("--daemon-uid: at most %d of them", MAX_DAEMON_UIDS);
            o.daemon_uids[o.daemon_uids_n++] = (uint32_t)int_arg(argc, argv, &i, 0, 4294967294L);
        } else if (!strcmp(a, "--device")) o.device = (int)int_arg(argc, argv, &i, 0, 1023);
        else if (!strcmp(a, "--repeat")) o.repeat = (int)int_arg(argc, argv, &i, 1, 1000000);
        else if (!strcmp(a, "--wait-ms")) o.wait_ms = (int)int_arg(argc, argv, &i, 0, 86400000);
        else if (!strcmp(a, "--cpu-view")) o.cpu_view = 1;
        else if (!strcmp(a, "--register")) o.reg = 1;
        else if (!strcmp(a, "--accept-future-write-seal")) accept_future_write_seal = 1;
        else if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--verify")) o.verify = 1;
        else if (!strcmp(a, "--verify-content")) {
            if (i + 1 >= argc) fail("--verify-content needs a value (see --help)");
            content = argv[++i];
        } else if (!strcmp(a, "--self-test-sha256")) return self_test_sha256();
        else if (!strcmp(a, "--ready-line")) o.ready_line = 1;
        else if (!strcmp(a, "--table")) {
            if (i + 1 >= argc) fail("--table needs a value (see --help)");
            const char *name = argv[++i];
            char b[512];
            if (!*name) fail("--table needs a table's name, not an empty string (`engram-host status` lists them)");
            if (o.tables_n == MAX_SELECT)
                fail("--table: at most %d tables may be named; name fewer, or leave out --table to attach every table",
                     MAX_SELECT);
            for (int k = 0; k < o.tables_n; k++)
                if (!strcmp(o.tables[k], name))
                    fail("--table '%s' is given twice; name each table once", shown(b, sizeof b, name, strlen(name), 80));
            o.tables[o.tables_n++] = name;
        }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else fail("unknown argument '%s' (see --help)", a);
    }
    if (peer) {
        if (socket_flag) fail("--bench-peer and --socket exclude each other");
        if (strlen(peer) >= sizeof(((struct sockaddr_un *)0)->sun_path)) fail("--bench-peer: '%s' is too long", peer);
        if (content) fail("--bench-peer and --verify-content exclude each other");
        if (o.tables_n) fail("--bench-peer and --table exclude each other");
        return bench_peer(peer, o.device);
    }
    if (content) read_sidecar(content, &o.content);  // before connecting: a bad sidecar fails at once
    o.socket = resolve_socket(socket_flag, instance, o.device);
    for (int rep = 1; rep <= o.repeat; rep++) run_once(&o, rep);
    for (size_t i = 0; i < o.content.n; i++) free(o.content.v[i].name);
    free(o.content.v);
    free(o.content.fix);
    return 0;
}
