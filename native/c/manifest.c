// engram-attach: the MANIFEST's checks (docs/protocol.md, "What a client checks"), a table's place in its region or
// run of regions, and --table's selection.
#include "engram_attach.h"

// The last region that `bytes` from `offset` in `region` reach, the regions laid back to back (mf->ends); when they run
// past the last region, that region, and *short_by says how many bytes no region holds (else 0). offset is at most
// the region's size, and the region sizes' sum fits 64 bits (both checked first). The C client's one owner of the
// arithmetic of runs; its cases are conformance/region-runs.json's "find" (c/test_region_runs.c).
uint32_t run_end(const struct manifest *mf, uint32_t region, uint64_t offset, uint64_t bytes, uint64_t *short_by) {
    uint64_t start = (region ? mf->ends[region - 1] : 0) + offset, total = mf->ends[mf->regions_n - 1];
    *short_by = bytes > total - start ? bytes - (total - start) : 0;
    if (*short_by) return mf->regions_n - 1;
    uint64_t end = start + bytes;
    uint32_t lo = region, hi = mf->regions_n - 1;
    while (lo < hi) {  // the first region whose end is at or past the table's
        uint32_t mid = lo + (hi - lo) / 2;
        if (mf->ends[mid] >= end) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

const struct dtype DTYPES[20] = {
    {"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8}, {"I8", 8}, {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32}, {"F32", 32},
    {"C64", 64}, {"F64", 64}, {"I64", 64}, {"U64", 64}};

static unsigned dtype_bits(struct str d) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strlen(DTYPES[i].name) == d.n && !memcmp(DTYPES[i].name, d.p, d.n)) return DTYPES[i].bits;
    return 0;
}

static int name_order(const void *a, const void *b) {
    const struct str *x = *(const struct str *const *)a, *y = *(const struct str *const *)b;
    int c = memcmp(x->p, y->p, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

// A name names one table: a manifest that lists one twice is refused (sorted, so 65,536 names cost no more than a
// sort).
static void check_names_unique(struct reader *r, const struct manifest *mf) {
    if (mf->tables_n < 2) return;
    const struct str **names = xcalloc(mf->tables_n, sizeof *names);
    for (uint32_t i = 0; i < mf->tables_n; i++) names[i] = &mf->tables[i].name;
    qsort(names, mf->tables_n, sizeof *names, name_order);
    for (uint32_t i = 1; i < mf->tables_n; i++)
        if (!name_order(&names[i - 1], &names[i]))
            rfail(r, "table '%.*s' is listed twice; a name names one table", (int)names[i]->n, names[i]->p);
    free(names);
}

void parse_manifest(struct message *m, struct reader *r, struct manifest *mf) {
    memset(mf, 0, sizeof *mf);
    memcpy(mf->sha256, take(r, 32, "fingerprint_sha256"), 32);
    uint32_t fp = u32(r, "fingerprint length");
    if (fp > MAX_BLOB) rfail(r, "fingerprint is %u bytes long, more than %u", fp, MAX_BLOB);
    const uint8_t *fingerprint = take(r, fp, "fingerprint");
    struct sha256 h;
    uint8_t sha[32];
    sha256_init(&h);
    sha256_update(&h, fingerprint, fp);
    sha256_final(&h, sha);
    if (memcmp(sha, mf->sha256, 32)) rfail(r, "fingerprint_sha256 is not the SHA-256 of the fingerprint it carries");
    mf->regions_n = u32(r, "region_count");
    if (mf->regions_n > MAX_REGIONS) rfail(r, "region_count %u exceeds the limit of %u", mf->regions_n, MAX_REGIONS);
    if (mf->regions_n != m->fds.n)
        fail_msg(m, "MANIFEST lists %u regions but the message carried %zu fds", mf->regions_n, m->fds.n);
    mf->regions = xcalloc(mf->regions_n, sizeof *mf->regions);
    long page = sysconf(_SC_PAGESIZE);
    for (uint32_t i = 0; i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        g->kind = u8(r, "region kind");
        g->size = u64(r, "region size");
        g->numa = i32(r, "region numa_node");
        g->device = i32(r, "region device");
        g->fd = m->fds.v[i];
        if (g->kind > K_VMM_DEVICE) rfail(r, "region %u: kind %u is not 0..3", i, g->kind);
        if (g->size == 0) rfail(r, "region %u: size is 0", i);
        if (g->kind <= K_MEMFD_HUGETLB && g->size % (uint64_t)page)
            rfail(r, "region %u: %s size %llu is not a whole number of %ld-byte pages", i, KIND_NAMES[g->kind],
                  (unsigned long long)g->size, page);
        if (g->numa < -1) rfail(r, "region %u: numa_node %d is below -1", i, g->numa);
        if (g->kind == K_VMM_DEVICE ? g->device < 0 : g->device != -1)
            rfail(r, "region %u: device %d for kind %u (%s): a GPU ordinal only for kind 3, else -1", i, g->device,
                  g->kind, KIND_NAMES[g->kind]);
        if (mf->region_bytes + g->size < mf->region_bytes) rfail(r, "region sizes overflow 64 bits");
        mf->region_bytes += g->size;
        if (g->kind >= K_VMM_HOST) mf->vmm_bytes += g->size, mf->vmm_regions++;
        else mf->memfd_bytes += g->size;
    }
    mf->ends = xcalloc(mf->regions_n + 1, sizeof *mf->ends);
    mf->other = xcalloc(mf->regions_n + 1, sizeof *mf->other);
    for (uint32_t i = 0; i < mf->regions_n; i++) mf->ends[i] = (i ? mf->ends[i - 1] : 0) + mf->regions[i].size;
    for (uint32_t i = mf->regions_n; i-- > 0;) {
        const struct region *a = &mf->regions[i], *b = i + 1 < mf->regions_n ? &mf->regions[i + 1] : NULL;
        mf->other[i] = !b ? mf->regions_n
                     : a->kind != b->kind || a->numa != b->numa || a->device != b->device ? i + 1 : mf->other[i + 1];
    }
    mf->tables_n = u32(r, "table_count");
    if (mf->tables_n > MAX_TABLES) rfail(r, "table_count %u exceeds the limit of %u", mf->tables_n, MAX_TABLES);
    if (mf->tables_n > (r->len - r->pos) / 42)  // a table takes at least 42 bytes
        rfail(r, "%u tables cannot fit in the %zu bytes left", mf->tables_n, r->len - r->pos);
    mf->tables = xcalloc(mf->tables_n, sizeof *mf->tables);
    for (uint32_t i = 0; i < mf->tables_n; i++) {
        struct table *t = &mf->tables[i];
        t->name = str16(r, "table name");
        if (unsafe_text(t->name)) rfail(r, "table %u: its name holds a control character or a line separator", i);
        int nl = (int)t->name.n;
        t->dtype = str16(r, "dtype");
        if (unsafe_text(t->dtype)) rfail(r, "table '%.*s': its dtype holds a control character", nl, t->name.p);
        unsigned bits = dtype_bits(t->dtype);
        if (!bits) rfail(r, "table '%.*s': unknown dtype '%.*s'", nl, t->name.p, (int)t->dtype.n, t->dtype.p);
        uint8_t rank = u8(r, "rank");
        if (rank > MAX_RANK) rfail(r, "table '%.*s': rank %u exceeds %u", nl, t->name.p, rank, MAX_RANK);
        unsigned __int128 numel = 1;
        for (unsigned d = 0; d < rank; d++) {
            int64_t dim = (int64_t)u64(r, "shape");
            if (dim < 0) rfail(r, "table '%.*s': dimension %u is negative (%lld)", nl, t->name.p, d, (long long)dim);
            numel *= (uint64_t)dim;
            if (numel >> 63) rfail(r, "table '%.*s': the element count overflows 2^63", nl, t->name.p);
        }
        t->bytes = u64(r, "bytes");
        t->region = i32(r, "region");
        t->offset = u64(r, "offset");
        t->digest = u64(r, "digest");
        uint8_t kind = u8(r, "kind");
        int32_t numa = i32(r, "numa_node"), device = i32(r, "device");
        if ((numel * bits) % 8) rfail(r, "table '%.*s': %.*s with %llu elements is not a whole number of bytes", nl,
                                      t->name.p, (int)t->dtype.n, t->dtype.p, (unsigned long long)numel);
        if (numel * bits / 8 != t->bytes)
            rfail(r, "table '%.*s': bytes is %llu but %.*s x shape needs %llu", nl, t->name.p,
                  (unsigned long long)t->bytes, (int)t->dtype.n, t->dtype.p, (unsigned long long)(numel * bits / 8));
        if (t->region == -1) {
            if (t->bytes) rfail(r, "table '%.*s': region -1 but %llu bytes", nl, t->name.p, (unsigned long long)t->bytes);
            continue;
        }
        if (t->region < 0 || (uint32_t)t->region >= mf->regions_n)
            rfail(r, "table '%.*s': region %d is not -1 or 0..%u", nl, t->name.p, t->region, mf->regions_n - 1);
        const struct region *g = &mf->regions[t->region];
        if (t->offset > g->size || t->bytes > g->size - t->offset) {  // past its region's end: a run, or refused
            int next = (uint32_t)t->region + 1 < mf->regions_n;
            if (t->offset >= g->size || (kind != K_VMM_HOST && !next))
                rfail(r, "table '%.*s': [%llu, %llu + %llu) is outside region %d of %llu bytes", nl, t->name.p,
                      (unsigned long long)t->offset, (unsigned long long)t->offset, (unsigned long long)t->bytes,
                      t->region, (unsigned long long)g->size);
            if (kind != K_VMM_HOST)
                rfail(r, "table '%.*s': [%llu, %llu + %llu) is outside region %d of %llu bytes: a table of kind %u (%s) "
                         "lies in one region; only a cuda-vmm host table (kind 2) runs on into the regions after it",
                      nl, t->name.p, (unsigned long long)t->offset, (unsigned long long)t->offset,
                      (unsigned long long)t->bytes, t->region, (unsigned long long)g->size, kind,
                      kind <= K_VMM_DEVICE ? KIND_NAMES[kind] : "not a kind");
            // docs/protocol.md, "A table over several regions": the regions after it, as many as its remaining bytes
            // need, exist and have kind 2 and the table's numa_node and device (region `region` is checked below).
            // Found by bisection (run_end), not a walk: a lying peer's million tables over 65536 regions cost no more
            // than their count.
            uint64_t short_by;
            uint32_t last = run_end(mf, (uint32_t)t->region, t->offset, t->bytes, &short_by);
            uint32_t j = mf->other[t->region];
            if (j < mf->regions_n && (short_by || j <= last)) {
                const struct region *h = &mf->regions[j];
                if (h->kind != K_VMM_HOST)
                    rfail(r, "table '%.*s': its run from region %d goes on into region %u, which is kind %u (%s), not 2 "
                             "(cuda-vmm host): a table runs on only into cuda-vmm host regions", nl, t->name.p,
                          t->region, j, h->kind, KIND_NAMES[h->kind]);
                rfail(r, "table '%.*s': kind/numa_node/device %u/%d/%d differ from region %u's %u/%d/%d, which its "
                         "run from region %d goes on into", nl, t->name.p, kind, numa, device, j, h->kind, h->numa,
                      h->device, t->region);
            }
            if (short_by)
                rfail(r, "table '%.*s': [%llu, %llu + %llu) runs on from region %d past the last region, %u: the "
                         "run of regions %d..%u holds %llu of its bytes, %llu short", nl, t->name.p,
                      (unsigned long long)t->offset, (unsigned long long)t->offset, (unsigned long long)t->bytes,
                      t->region, mf->regions_n - 1, t->region, mf->regions_n - 1,
                      (unsigned long long)(t->bytes - short_by), (unsigned long long)short_by);
        }
        if (kind != g->kind || numa != g->numa || device != g->device)
            rfail(r, "table '%.*s': kind/numa_node/device %u/%d/%d differ from its region %d's %u/%d/%d", nl, t->name.p,
                  kind, numa, device, t->region, g->kind, g->numa, g->device);
        mf->table_bytes += t->bytes;
    }
    end_frame(r);
    check_names_unique(r, mf);
    for (uint32_t i = 0; i < mf->regions_n; i++)
        if (mf->regions[i].kind <= K_MEMFD_HUGETLB) check_memfd(m, i, &mf->regions[i]);
}

// The last region of a checked table's place (parse_manifest): its region, or for a kind 2 table over a run of
// regions the last of the run. Not for an empty table (region -1).
static uint32_t run_last(const struct manifest *mf, const struct table *t) {
    uint64_t short_by;
    return run_end(mf, (uint32_t)t->region, t->offset, t->bytes, &short_by);
}

// The CPU address of a table's first byte, or NULL when it is not CPU-readable (a cuda-vmm region without
// --cpu-view, a device region). A table over a run of regions is one range from its first region's view + offset:
// attach_vmm maps the attached cuda-vmm regions back to back in region order, and select_tables attaches every
// region of a selected table's run; that each region of the run follows the one before is checked here all the same.
const uint8_t *table_host(struct manifest *mf, const struct table *t) {
    if (t->region < 0) return (const uint8_t *)"";
    const struct region *g = &mf->regions[t->region];
    if (!g->host) return NULL;
    uint32_t last = run_last(mf, t);
    if (last == (uint32_t)t->region) return g->host + t->offset;
    if (!mf->gaps) {  // once: gaps[j] counts the regions up to j whose view does not follow the one before's
        mf->gaps = xcalloc(mf->regions_n, sizeof *mf->gaps);
        for (uint32_t j = 1; j < mf->regions_n; j++)
            mf->gaps[j] = mf->gaps[j - 1] + (!mf->regions[j].host || !mf->regions[j - 1].host
                                             || mf->regions[j].host != mf->regions[j - 1].host + mf->regions[j - 1].size);
    }
    if (mf->gaps[last] != mf->gaps[t->region])  // checked in O(1) a table, whatever the runs' lengths
        fail("table '%.*s': the regions %d..%u of its run are not mapped back to back", (int)t->name.n, t->name.p,
             t->region, last);
    return g->host + t->offset;
}

// --table: after the whole MANIFEST is checked (parse_manifest: every region and table, named or not), marks what
// is not to be attached (skip) and closes the fd of every region that holds none of the named tables (a kind 2 table
// over a run of regions holds every region of its run), unimported and unmapped; its slot in m->fds becomes -1, so
// that message_free closes each fd exactly once. A name the manifest lacks fails (after closing every fd, as
// fail_msg does). Without --table everything is attached. Fills the att_* totals either way.
void select_tables(const struct options *o, struct message *m, struct manifest *mf) {
    if (o->tables_n) {
        for (uint32_t i = 0; i < mf->regions_n; i++) mf->regions[i].skip = 1;
        for (uint32_t i = 0; i < mf->tables_n; i++) mf->tables[i].skip = 1;
        for (int k = 0; k < o->tables_n; k++) {
            size_t n = strlen(o->tables[k]);
            uint32_t i = 0;
            while (i < mf->tables_n && !(mf->tables[i].name.n == n && !memcmp(mf->tables[i].name.p, o->tables[k], n))) i++;
            if (i == mf->tables_n) {
                char b[512];
                fail_msg(m, "--table '%s': the daemon on %s serves no table of that name (it serves %u); list its tables "
                            "with `engram-host status --socket %s`, or run engram-attach without --table to attach "
                            "them all", shown(b, sizeof b, o->tables[k], n, 80), o->socket, mf->tables_n, o->socket);
            }
            mf->tables[i].skip = 0;
            if (mf->tables[i].region < 0) continue;
            // every region of its place: one, or a kind 2 table's run of regions (mapped back to back, attach_vmm)
            for (uint32_t j = (uint32_t)mf->tables[i].region, last = run_last(mf, &mf->tables[i]); j <= last; j++)
                mf->regions[j].skip = 0;
        }
    }
    for (uint32_t i = 0; i < mf->regions_n; i++) {
        struct region *g = &mf->regions[i];
        if (g->skip) {  // m->fds.v[i] is g->fd (parse_manifest): closed here, and only here
            close(g->fd);
            m->fds.v[i] = g->fd = -1;
            continue;
        }
        mf->att_regions++, mf->att_bytes += g->size;
        if (g->kind >= K_VMM_HOST) mf->att_vmm_regions++, mf->att_vmm_bytes += g->size;
    }
    for (uint32_t i = 0; i < mf->tables_n; i++)
        if (!mf->tables[i].skip) mf->att_tables++, mf->att_table_bytes += mf->tables[i].bytes;
}
