// Test only, never shipped: the client's run_end (manifest.c) over cases read from stdin, one a line, as
// c/check_region_runs.py writes them from ../conformance/region-runs.json's "find":
//   GROUPS SIZE COUNT ... REGION OFFSET BYTES
// and for each prints "LAST LACKING" (LAST -1 when the table runs past the last region). Linked with the client's
// units but main.c (make -C native engram-attach-runs), and adds nothing to them.
#include "engram_attach.h"

int main(void) {
    unsigned long long groups;
    while (scanf("%llu", &groups) == 1) {
        struct manifest mf = {0};
        unsigned long long size[64], count[64], region, offset, bytes;
        if (groups == 0 || groups > 64) return fprintf(stderr, "test_region_runs: %llu groups\n", groups), 2;
        for (unsigned long long g = 0; g < groups; g++) {
            if (scanf("%llu %llu", &size[g], &count[g]) != 2) return fprintf(stderr, "test_region_runs: a group\n"), 2;
            mf.regions_n += (uint32_t)count[g];
        }
        if (scanf("%llu %llu %llu", &region, &offset, &bytes) != 3) return fprintf(stderr, "test_region_runs: a case\n"), 2;
        mf.ends = calloc(mf.regions_n, sizeof *mf.ends);
        if (!mf.ends) return fprintf(stderr, "test_region_runs: calloc\n"), 2;
        uint32_t i = 0;  // the ends as parse_manifest lays them out
        for (unsigned long long g = 0; g < groups; g++)
            for (unsigned long long k = 0; k < count[g]; k++, i++) mf.ends[i] = (i ? mf.ends[i - 1] : 0) + size[g];
        uint64_t short_by;
        uint32_t last = run_end(&mf, (uint32_t)region, offset, bytes, &short_by);
        printf("%lld %llu\n", short_by ? -1LL : (long long)last, (unsigned long long)short_by);
        free(mf.ends);
    }
    return 0;
}
