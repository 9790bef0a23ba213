"""Runs every test of the package (``python/tests``, the GPU ones skip without a GPU) and writes the counts as
JSON to the path given, for bin/test's summary line. Exit status 0 when every test passed or skipped.

The test modules run in ``ENGRAM_PY_TEST_JOBS`` worker processes at once (default 2; 1 runs them one after another,
each in a child process just the same): most of a module's time is spent waiting on the daemon processes it starts
and on their deadlines, so two modules side by side use a 2-core machine's second core. Each module runs whole in
one process (its setUpModule, classes and tests in order, as unittest runs them; those of BY_CLASS one process per
test class), and prints its output only when it ends, so the log stays one module at a time. The units known to take
longest start first."""

import importlib
import json
import os
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
# Modules by what they took on CI's 2 cores, longest first, so that the longest do not start last; a module not
# named here starts after these (any order is correct, this one only finishes sooner).
LONGEST_FIRST = ["tests.test_seed_peer.MinuteLimitsTest", "tests.test_seed_peer.HostileExporterTest",
                 "tests.test_seed_peer.SeedPeerTest", "tests.test_peer", "tests.test_daemon", "tests.test_reference",
                 "tests.test_model", "tests.test_digests", "tests.test_checkpoint", "tests.test_wire",
                 "tests.test_engines"]
# Modules whose test classes run each in a process of its own (each with the module's setUpModule): test_seed_peer's
# classes wait on the exporter's documented deadlines (60 s, 10 s) for most of their three minutes.
BY_CLASS = {"tests.test_seed_peer"}


def units() -> list:
    """Every test module under tests/ (of BY_CLASS, its test classes), in the order they start."""
    found = []
    for d, _dirs, files in os.walk(HERE):
        for f in sorted(files):
            if f.startswith("test") and f.endswith(".py"):
                name = os.path.relpath(os.path.join(d, f[:-3]), TOP).replace(os.sep, ".")
                if name in BY_CLASS:
                    module = importlib.import_module(name)   # importing runs no fixture
                    found += [f"{name}.{c.__name__}" for c in vars(module).values()
                              if isinstance(c, type) and issubclass(c, unittest.TestCase) and c.__module__ == name]
                else:
                    found.append(name)
    rank = {m: i for i, m in enumerate(LONGEST_FIRST)}
    return sorted(found, key=lambda m: (rank.get(m, len(rank)), m))


def run_unit(name: str, counts_path: str) -> int:
    """The child's side: one module (or one test class), its counts to counts_path. The package and the tests import from python/, as
    unittest's discovery with python/ as its top level directory does."""
    sys.path.insert(0, TOP)
    suite = unittest.defaultTestLoader.loadTestsFromName(name)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(suite)
    for test, reason in result.skipped:
        print(f"skipped: {test.id()}: {reason}")
    with open(counts_path, "w") as f:
        json.dump({"tests": result.testsRun, "failures": len(result.failures) + len(result.unexpectedSuccesses),
                   "errors": len(result.errors), "skipped": len(result.skipped)}, f)
    return 0 if result.wasSuccessful() else 1


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--module":
        return run_unit(sys.argv[2], sys.argv[3])
    jobs = int(os.environ.get("ENGRAM_PY_TEST_JOBS", "2"))
    if jobs < 1:
        print(f"run_all: ENGRAM_PY_TEST_JOBS={jobs}: give 1 or more worker processes", file=sys.stderr)
        return 2
    started = time.monotonic()
    sys.path.insert(0, TOP)
    queue = units()
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    lock = threading.Lock()
    failed = []
    tmp = os.environ.get("TMPDIR", "/tmp")

    def worker(n: int) -> None:
        while True:
            with lock:
                if not queue:
                    return
                name = queue.pop(0)
            counts_path = os.path.join(tmp, f"run_all.{os.getpid()}.{n}.json")
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--module", name, counts_path], cwd=TOP,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            took = time.monotonic() - t0
            try:
                with open(counts_path) as f:
                    c = json.load(f)
                os.unlink(counts_path)
            except (OSError, ValueError):
                c = {"tests": 1, "failures": 0, "errors": 1, "skipped": 0}  # it died before it counted
            with lock:
                print(f"== {name}: {c['tests']} tests, {c['failures']} failed, {c['errors']} errors,"
                      f" {c['skipped']} skipped in {took:.1f} s (exit {p.returncode})")
                print(p.stdout, end="" if p.stdout.endswith("\n") or not p.stdout else "\n", flush=True)
                for k in total:
                    total[k] += c[k]
                if p.returncode != 0:
                    failed.append(name)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = dict(total, seconds=round(time.monotonic() - started, 1))
    if failed:
        print(f"python tests: failed in {', '.join(failed)}")
    print(f"python tests: {json.dumps(counts)} ({jobs} worker processes)")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(counts, f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
