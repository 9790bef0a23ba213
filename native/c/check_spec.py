#!/usr/bin/env python3
"""engram-attach's protocol constants against docs/protocol-spec.json, both ways (as ProtocolSpecTest holds the Java
ones and python/tests/test_spec.py the Python package's): what native/build/engram-attach-spec prints (the constants
themselves, compiled from the client's code by c/test_constants.c) must be the spec's message types, region kinds,
states, error codes, dtypes, framing and limits; every limit of the spec that a client holds must be one of them or
be named below with the reason the C client does not hold it; and every numeric #define and enum constant of the
client's sources must be printed or be named below as no constant of the protocol, with the reason.

Usage: native/c/check_spec.py ENGRAM_ATTACH_SPEC SOURCE...     Exit 0 when all agree; else one line a difference.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, 'docs', 'protocol-spec.json')

# Each printed constant and what of the spec it is: a limit (name, factor to the limit's unit) or a framing number.
LIMITS = {
    'MAX_PAYLOAD_V1': [('v1_payload', 1)],
    'MAX_PAYLOAD_V2': [('v2_payload', 1)],
    'MAX_PAYLOAD_PRE': [('pre_version_payload', 1)],
    'MAX_PIECE': [('part_body', 1)],
    'MAX_LOGICAL': [('frame', 1)],
    'MAX_FDS': [('fd_count', 1)],
    'FDS_PER_SENDMSG': [('fds_per_sendmsg', 1)],
    'MAX_STR16': [('str16', 1), ('table_name', 1), ('hello_client', 1)],
    'MAX_TEXT': [('error_message', 1), ('error_detail', 1)],
    'MAX_DETAILS': [('error_details', 1)],
    'MAX_BLOB': [('fingerprint', 1)],
    'MAX_REGIONS': [('region_count', 1)],
    'MAX_TABLES': [('table_count', 1)],
    'MAX_RANK': [('rank', 1)],
    'REPLY_TIMEOUT_S': [('answer_wait', 1000)],
    'RETRY_MS': [('retry_interval', 1)],
    'SOCKET_PATH_MAX': [('socket_path', 1)],
}
FRAMING = {'CONTINUED': 'continued_bit', 'FILLER': 'filler_byte', 'MAGIC': 'magic'}
VERSIONS = ('VERSION_MIN', 'VERSION_MAX')
# Limits of scope wire or client that engram-attach does not hold, and why.
NOT_HELD = {
    'hello_payload': "the daemon's bound on what a client sends",
    'request_payload': "the daemon's bound on what a client sends",
    'empty_request_payload': "the daemon's bound on what a client sends",
    'device': '--device is bounded where it is parsed (0..1023), and IMPORT carries it',
    'handover_layout': 'between two daemons',
    'handover_served': 'between two daemons',
    'handover_connections': 'between two daemons',
    'handover_report': 'between two daemons',
}
# #defines and enum constants of the sources that are no constant of the protocol, by name or prefix, and why.
NOT_PROTOCOL = {
    '_GNU_SOURCE': 'a feature macro',
    'ENGRAM_ATTACH_LIB': 'the build of the bench library', 'ENGRAM_ATTACH_H': "the header's guard",
    'F_GET_SEALS': "Linux's fcntl", 'F_SEAL_': "Linux's seals",
    'CU_': "CUDA's constants", 'P1': 'XXH64', 'P2': 'XXH64', 'P3': 'XXH64', 'P4': 'XXH64', 'P5': 'XXH64',
    'GIB': 'a unit for printing', 'MAX_DAEMON_UIDS': 'a flag of engram-attach (--daemon-uid)',
    'MAX_SELECT': 'a flag of engram-attach (--table)', 'REGISTER_CHUNK': 'a driver limit of cuMemHostRegister',
    'DIGEST_CHUNK': "engram digest v1's chunk (docs/checkpoints.md)", 'TREE_CHUNK': "sha256-tree-v1's chunk (docs/checkpoints.md)",
    'SIDECAR_MAX': 'the digest record (docs/checkpoints.md)', 'ENGRAM_KEY': 'the digest record',
    'TREE_KEY': 'the digest record', 'ERROR_CODES': 'the length of ERROR_NAMES, printed as it',
    'C_': '--verify-content outcomes', 'E_': '--verify-content outcomes', 'P_': "the bench peer's ops (JMH)",
    'PEER_REQUEST_BYTES': "the bench peer's framing (JMH)", 'F_FORMAT': "the digest record's fields",
    'F_VERSION': "the digest record's fields", 'F_ALGORITHM': "the digest record's fields",
    'F_CHUNK': "the digest record's fields", 'F_TABLES': "the digest record's fields", 'F_N': "the digest record's fields",
    'EXPORT': "the bench library's visibility",
}


def source_constants(paths):
    """Every #define with a value and every enum constant of the sources."""
    names = set()
    for p in paths:
        text = open(p).read()
        names |= set(re.findall(r'^\s*#define\s+([A-Za-z_]\w*)\s+\S', text, re.M))
        for body in re.findall(r'\benum\s*\{([^}]*)\}', text):
            names |= {m.group(1) for m in re.finditer(r'([A-Za-z_]\w*)\s*(?:=[^,]*)?(?:,|$)', body.strip())}
    return names


def main():
    binary, sources = sys.argv[1], sys.argv[2:]
    spec = json.load(open(SPEC))
    got = json.loads(subprocess.run([binary], check=True, capture_output=True, text=True).stdout)
    problems = []

    def same(what, want, have):
        if want != have:
            problems.append(f'{what}: the spec says {want!r}, engram-attach has {have!r}')

    limits = {l['name']: l for l in spec['limits']}
    for c, targets in LIMITS.items():
        for name, factor in targets:
            same(f'{c} ({name})', limits[name]['value'], got[c] * factor)
    for c, name in FRAMING.items():
        same(c, spec['framing'][name], got[c])
    same('VERSION_MIN..VERSION_MAX', spec['framing']['versions'], list(range(got['VERSION_MIN'], got['VERSION_MAX'] + 1)))
    held = {n for targets in LIMITS.values() for n, _ in targets}
    for name, l in limits.items():
        if l['scope'] in ('wire', 'client') and name not in held and name not in NOT_HELD:
            problems.append(f"limit {name}: engram-attach holds no constant of it, and check_spec.py says not why")
    spoken = {t['name']: t['code'] for t in spec['message_types'] if t['peers'] == 'client'}
    same('T_*', spoken, got['T'])
    same('TYPE_NAMES', {str(c): n for n, c in spoken.items()}, got['TYPE_NAMES'])
    same('K_*', [k['code'] for k in spec['region_kinds']], [got['K'][k] for k in ('MEMFD', 'MEMFD_HUGETLB', 'VMM_HOST', 'VMM_DEVICE')])
    same('KIND_NAMES', {str(k['code']): k['name'] for k in spec['region_kinds']}, got['KIND_NAMES'])
    same('ERROR_NAMES', {str(e['code']): e['name'] for e in spec['error_codes']}, got['ERROR_NAMES'])
    same('STATE_NAMES', {str(s['code']): s['name'] for s in spec['daemon_states']}, got['STATE_NAMES'])
    same('DTYPES', {d['name']: d['bits'] for d in spec['dtypes']}, got['DTYPES'])
    printed = set(got) | {'T_' + t for t in got['T']} | {'K_' + k for k in got['K']} | {'RETRY_MS'}
    for name in sorted(source_constants(sources)):
        if name not in printed and not any(name == k or (k.endswith('_') and name.startswith(k)) for k in NOT_PROTOCOL):
            problems.append(f'{name}: a constant of the sources that check_spec.py neither compares nor names as no '
                            'constant of the protocol')
    for p in problems:
        print(f'check_spec: {p}', file=sys.stderr)
    if problems:
        return 1
    print(f'check_spec: engram-attach\'s constants are docs/protocol-spec.json\'s ({len(LIMITS)} limits, '
          f'{len(spoken)} message types, {len(got["K"])} region kinds, {len(got["ERROR_NAMES"])} error codes, '
          f'{len(got["DTYPES"])} dtypes)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
