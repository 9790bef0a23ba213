// engram-attach: --verify (engram digest v1 through the mapping) and --verify-content (sha256-tree-v1 against the
// digest record).
#include "engram_attach.h"

// Digests every table readable from the CPU and compares with the manifest; returns how many were checked.
uint32_t verify_tables(struct manifest *mf) {
    uint32_t checked = 0;
    for (uint32_t i = 0; i < mf->tables_n; i++) {
        const struct table *t = &mf->tables[i];
        if (t->skip) continue;
        const uint8_t *base = table_host(mf, t);
        if (!base) continue;
        uint64_t d = engram_digest(base, t->bytes);
        if (d != t->digest)
            fail("table '%.*s': the mapped bytes digest to %016llx but the manifest says %016llx", (int)t->name.n,
                 t->name.p, (unsigned long long)d, (unsigned long long)t->digest);
        checked++;
    }
    return checked;
}

// --verify-content: the sha256-tree-v1 digest of every CPU-readable table (memfd mappings; cuda-vmm host regions
// with --cpu-view; an empty table always) compared with the sidecar's; device tensors are "not checked". A table the
// sidecar lacks is "missing", whether readable or not. Single-threaded. With a version 2 record, every table it holds
// (CPU-readable or not) also has its engram digest v1 compared with the manifest's `digest`, which the daemon
// computed from the bytes at load: a difference means the daemon serves other bytes than the record describes.
void verify_content(const struct options *o, struct manifest *mf, struct content_result *cr) {
    memset(cr, 0, sizeof *cr);
    cr->index = xcalloc(mf->tables_n, sizeof *cr->index);
    cr->status = xcalloc(mf->tables_n, 1);
    cr->engram = xcalloc(mf->tables_n, 1);
    cr->hex = xcalloc(mf->tables_n, sizeof *cr->hex);
    cr->names = xcalloc(mf->tables_n, sizeof *cr->names);
    for (uint32_t k = 0; k < mf->tables_n; k++) {
        const struct table *t = &mf->tables[k];
        if (t->skip) continue;  // --table did not name it
        uint32_t i = cr->n++;
        cr->index[i] = k;
        const uint8_t *base = table_host(mf, t);
        const struct trusted *want = trusted_digest(&o->content, t->name);
        char *name = xcalloc(t->name.n + 1, 1);
        cr->names[i] = (struct str){memcpy(name, t->name.p, t->name.n), t->name.n};
        if (base) {
            tree_digest(base, t->bytes, cr->hex[i]);
            cr->bytes += t->bytes;
        }
        cr->status[i] = !want ? C_MISSING : !base ? C_NOT_CHECKED : strcmp(want->hex, cr->hex[i]) ? C_MISMATCH : C_OK;
        cr->counts[cr->status[i]]++;
        if (want && o->content.version == 2) cr->engram[i] = want->engram == t->digest ? E_OK : E_MISMATCH;
        cr->engram_counts[cr->engram[i]]++;
    }
}

// Prints every mismatch and missing digest; returns how many there were.
uint32_t content_problems(const struct options *o, const struct manifest *mf, const struct content_result *cr) {
    for (uint32_t i = 0; i < cr->n; i++) {
        const struct table *t = &mf->tables[cr->index[i]];
        if (cr->status[i] == C_MISMATCH)
            fprintf(stderr, "engram-attach: content check (sha256-tree-v1) failed: table '%.*s': the mapped bytes have "
                            "digest %s but %s says %s\n", (int)t->name.n, t->name.p, cr->hex[i], o->content.path,
                    trusted_digest(&o->content, t->name)->hex);
        else if (cr->status[i] == C_MISSING)
            fprintf(stderr, "engram-attach: content check (sha256-tree-v1) failed: table '%.*s' has no trusted digest in "
                            "%s (the mapped bytes have digest %s)\n", (int)t->name.n, t->name.p, o->content.path,
                    cr->hex[i][0] ? cr->hex[i] : "none: not CPU-readable");
        if (cr->engram[i] == E_MISMATCH)
            fprintf(stderr, "engram-attach: content check (engram-digest-v1) failed: table '%.*s': the manifest says "
                            "engram-digest-v1 %016llx but %s says %016llx: the daemon serves other bytes than the record "
                            "describes; give the record of the checkpoint it serves, or %s\n", (int)t->name.n,
                    t->name.p, (unsigned long long)t->digest, o->content.path,
                    (unsigned long long)trusted_digest(&o->content, t->name)->engram, o->content.fix);
    }
    return cr->counts[C_MISMATCH] + cr->counts[C_MISSING] + cr->engram_counts[E_MISMATCH];
}
