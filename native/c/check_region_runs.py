#!/usr/bin/env python3
"""The C client's run_end against conformance/region-runs.json's "find" cases (as RegionRunsCasesTest holds the Java
ones): each case is written to native/build/engram-attach-runs (c/test_region_runs.c) as one line, and the last
region and the bytes lacking it prints must be the case's. The "cut" cases are the daemon's: the C client cuts nothing.

Usage: native/c/check_region_runs.py ENGRAM_ATTACH_RUNS     Exit 0 when all agree; else one line a difference.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(ROOT, 'conformance', 'region-runs.json')


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(CASES) as f:
        cases = json.load(f)['find']
    lines = []
    for c in cases:
        groups = ' '.join(f'{size} {count}' for size, count in c['regions'])
        lines.append(f"{len(c['regions'])} {groups} {c['region']} {c['offset']} {c['bytes']}")
    out = subprocess.run([argv[1]], input='\n'.join(lines) + '\n', capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(f'check_region_runs: {argv[1]} exited {out.returncode}: {out.stderr.strip()}')
        return 1
    got = out.stdout.split('\n')
    bad = 0
    for i, c in enumerate(cases):
        want = f"{c['last']} {c['lacking']}"
        have = got[i] if i < len(got) else '(nothing)'
        if have != want:
            print(f"region-runs.json find '{c['name']}': run_end gives last, lacking {have}, the case {want}")
            bad += 1
    if bad == 0:
        print(f'check_region_runs: {len(cases)} cases of region-runs.json agree with run_end')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
