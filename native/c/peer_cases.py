#!/usr/bin/env python3
"""engram-attach against every case of conformance/cases.json (the protocol peer's cases, which the Java and Python
clients run too): for each, conformance/protocol_peer.py serves one connection as the case says, and engram-attach
must exit 0 with the case's tables, regions and protocol in its JSON line (an accepted case), or exit 1 saying what
the case's "c" entry says (a refused one). A case that gives the C client neither an expectation nor a 'skip' with
its reason fails. Run by native/c/test_engram_attach.sh; standard library only (python3 >= 3.9).

Usage: native/c/peer_cases.py ENGRAM_ATTACH     Exit 0 when every case passed or was skipped, saying why.
With TEST_VERBOSE set, one line a case.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER = os.path.join(ROOT, 'conformance', 'protocol_peer.py')
CASES = os.path.join(ROOT, 'conformance', 'cases.json')
PAGE = os.sysconf('SC_PAGE_SIZE')
NOBODY = 65534
AS_NOBODY = ['setpriv', f'--reuid={NOBODY}', f'--regid={NOBODY}', '--clear-groups']


class Failed(Exception):
    pass


def fill(text, socket_path=''):
    """The case's placeholders filled in (cases.json, "placeholders")."""
    text = re.sub(r'\{page\*(\d+)\}', lambda m: str(PAGE * int(m.group(1))), text)
    text = re.sub(r'\{page-(\d+)\}', lambda m: str(PAGE - int(m.group(1))), text)
    return (text.replace('{page}', str(PAGE)).replace('{socket}', re.escape(socket_path))
            .replace('{uid}', str(os.geteuid())).replace('{nobody}', str(NOBODY)))


def python_for_nobody():
    """A python3 >= 3.9 (socket.send_fds) that uid 65534 can run, or None (not root, no setpriv, none found)."""
    if os.geteuid() != 0 or not shutil.which('setpriv'):
        return None
    for c in (shutil.which('python3'), sys.executable, '/usr/bin/python3', '/usr/local/bin/python3'):
        if c and os.access(c, os.X_OK) and subprocess.run(
                AS_NOBODY + [c, '-c', 'import sys, socket; sys.exit(0 if hasattr(socket, "send_fds") else 1)'],
                capture_output=True).returncode == 0:
            return c
    return None


def run_case(case, attach, work, nobody_python):
    """Runs one case: None when it passed, else the reason it was skipped (a string); raises Failed."""
    mine = case.get('c')
    if mine is not None and 'skip' in mine:
        return f"cases.json: {mine['skip']}"
    if case['outcome'] == 'refused' and not (mine and 'says' in mine):
        raise Failed("cases.json gives the C client no expectation and no 'skip' reason")
    requires = case.get('requires')
    python, prefix = sys.executable, []
    if requires == 'another-uid':
        if nobody_python is None:
            return 'needs root, setpriv and a python3 >= 3.9 that uid 65534 can run'
        python, prefix = nobody_python, AS_NOBODY
    elif requires == 'not-uid-4242' and os.geteuid() == 4242:
        return "the peer claims uid 4242, this process's own"
    elif requires not in (None, 'not-uid-4242'):
        raise Failed(f'unknown requirement {requires!r}')
    sock = os.path.join(work, 'peer.sock')
    if os.path.exists(sock):
        os.unlink(sock)
    options = case.get('options', {})
    if mine and 'args' in mine:
        args = [fill(a, sock) if a != '{socket}' else sock for a in mine['args']]
    else:
        args = ['--socket', sock, '--json']
        if 'wait_ms' in options:
            args += ['--wait-ms', str(options['wait_ms'])]
        if options.get('accept_future_write_seal'):
            args.append('--accept-future-write-seal')
        for u in options.get('daemon_uids', ()):
            args += ['--daemon-uid', fill(str(u))]
        for t in options.get('tables', ()):
            args += ['--table', t]
    peer = subprocess.Popen(prefix + [python, PEER, sock, case.get('peer', case['name'])], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 5
        while not os.path.exists(sock):
            if peer.poll() is not None or time.monotonic() > end:
                raise Failed(f'the peer did not listen at {sock}: {peer.communicate()[0] if peer.poll() is not None else ""}')
            time.sleep(0.01)
        t0 = time.monotonic()
        try:
            p = subprocess.run([attach] + args, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            raise Failed('engram-attach ran for more than 120 s') from None
        took = time.monotonic() - t0
        out = p.stdout + p.stderr
        try:
            peer_out = peer.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            peer.kill()
            raise Failed(f'the peer did not exit within 60 s after engram-attach: {peer.communicate()[0]}') from None
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
    if os.environ.get('TEST_VERBOSE'):
        print(f"peer {case['name']}: {p.returncode} in {took:.2f} s: {out[:200]!r}")
    want = 0 if case['outcome'] == 'accepted' else 1
    if p.returncode != want:
        raise Failed(f'engram-attach exited {p.returncode}, expected {want}: {out}')
    if peer.returncode != 0:
        raise Failed(f'the peer failed: {peer_out}')
    if 'within_s' in case and took >= case['within_s']:
        raise Failed(f"engram-attach took {took:.1f} s, not under {case['within_s']} s")
    if 'peer_says' in case and not re.search(case['peer_says'], peer_out):
        raise Failed(f"the peer's output does not match /{case['peer_says']}/: {peer_out}")
    if mine and 'output' in mine and out != mine['output']:
        raise Failed(f"output is {out!r}, not {mine['output']!r}")
    for pattern in (mine or {}).get('says', ()):
        if not re.search(fill(pattern, sock), out, re.M):
            raise Failed(f'output does not match /{pattern}/: {out}')
    if case['outcome'] == 'accepted' and 'accepted' in case:
        line = json.loads(p.stdout.strip().splitlines()[-1])
        a = case['accepted']
        expect = {'tables': a['tables'], 'regions': a['regions'], 'protocol': a['protocol'],
                  'bytes': a['regions'] * PAGE, 'table_bytes': a['regions'] * PAGE, 'attached_regions': a['regions']}
        for k, v in expect.items():
            if line.get(k) != v:
                raise Failed(f'{k} is {line.get(k)}, expected {v}: {p.stdout}')
    return None


def main():
    attach = sys.argv[1]
    with open(CASES) as f:
        cases = json.load(f)['cases']
    work = tempfile.mkdtemp(prefix='engram-attach-cases.')
    os.chmod(work, 0o777)  # a peer of another uid binds its socket here
    nobody_python = python_for_nobody()
    passed, skipped = 0, []
    try:
        for case in cases:
            try:
                why = run_case(case, attach, work, nobody_python)
            except Failed as e:
                print(f"test_engram_attach: FAIL: peer case {case['name']}: {e}", file=sys.stderr)
                return 1
            if why:
                skipped.append(f"{case['name']} ({why})")
            else:
                passed += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f'test_engram_attach: conformance cases: ok ({passed} of {len(cases)} cases of conformance/cases.json'
          + (f'; skipped: {", ".join(skipped)})' if skipped else ')'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
