// Test only, never shipped: prints engram-attach's protocol constants as one JSON object, for native/c/check_spec.py
// to compare with docs/protocol-spec.json (test_engram_attach.sh builds it as `make -C native engram-attach-spec`).
// It is linked with the client's units but main.c, and adds nothing to them.
#include "engram_attach.h"

static void names(const char *key, const char *const *v, size_t n, size_t first) {
    printf(",\"%s\":{", key);
    for (size_t i = first; i < n; i++) printf("%s\"%zu\":\"%s\"", i > first ? "," : "", i, v[i]);
    printf("}");
}

int main(void) {
    printf("{\"MAX_PAYLOAD_V1\":%u,\"MAX_PAYLOAD_V2\":%u,\"MAX_PAYLOAD_PRE\":%u,\"MAX_PIECE\":%u,\"MAX_LOGICAL\":%u,"
           "\"CONTINUED\":%u,\"MAX_FDS\":%u,\"FDS_PER_SENDMSG\":%u,\"FILLER\":%u,\"MAGIC\":%u,\"VERSION_MIN\":%d,"
           "\"VERSION_MAX\":%d,\"MAX_STR16\":%u,\"MAX_TEXT\":%u,\"MAX_DETAILS\":%u,\"MAX_BLOB\":%u,\"MAX_REGIONS\":%u,"
           "\"MAX_TABLES\":%u,\"MAX_RANK\":%u,\"REPLY_TIMEOUT_S\":%d,\"RETRY_MS\":%d,\"SOCKET_PATH_MAX\":%zu",
           MAX_PAYLOAD_V1, MAX_PAYLOAD_V2, MAX_PAYLOAD_PRE, MAX_PIECE, MAX_LOGICAL, CONTINUED, MAX_FDS, FDS_PER_SENDMSG,
           FILLER, MAGIC, VERSION_MIN, VERSION_MAX, MAX_STR16, MAX_TEXT, MAX_DETAILS, MAX_BLOB, MAX_REGIONS, MAX_TABLES,
           MAX_RANK, REPLY_TIMEOUT_S, RETRY_MS, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
    printf(",\"T\":{\"HELLO\":%d,\"WELCOME\":%d,\"IMPORT\":%d,\"MANIFEST\":%d,\"STATUS\":%d,\"STATUS_REPLY\":%d,"
           "\"STOP\":%d,\"STOP_ACK\":%d,\"ERROR\":%d,\"BYE\":%d,\"PART\":%d}", T_HELLO, T_WELCOME, T_IMPORT, T_MANIFEST,
           T_STATUS, T_STATUS_REPLY, T_STOP, T_STOP_ACK, T_ERROR, T_BYE, T_PART);
    printf(",\"K\":{\"MEMFD\":%d,\"MEMFD_HUGETLB\":%d,\"VMM_HOST\":%d,\"VMM_DEVICE\":%d}", K_MEMFD, K_MEMFD_HUGETLB,
           K_VMM_HOST, K_VMM_DEVICE);
    names("TYPE_NAMES", TYPE_NAMES, sizeof TYPE_NAMES / sizeof TYPE_NAMES[0], 1);
    names("KIND_NAMES", KIND_NAMES, sizeof KIND_NAMES / sizeof KIND_NAMES[0], 0);
    names("ERROR_NAMES", ERROR_NAMES, ERROR_CODES, 1);
    names("STATE_NAMES", STATE_NAMES, sizeof STATE_NAMES / sizeof STATE_NAMES[0], 0);
    printf(",\"DTYPES\":{");
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        printf("%s\"%s\":%u", i ? "," : "", DTYPES[i].name, DTYPES[i].bits);
    printf("}}\n");
    return 0;
}
