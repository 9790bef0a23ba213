"""Runs every test of the package (``python/tests``, the GPU ones skip without a GPU) and writes the counts as
JSON to the path given, for bin/test's summary line. Exit status 0 when every test passed or skipped."""

import json
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    started = time.monotonic()
    suite = unittest.defaultTestLoader.discover(start_dir=HERE, top_level_dir=os.path.dirname(HERE))
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(suite)
    for test, reason in result.skipped:
        print(f"skipped: {test.id()}: {reason}")
    counts = {"tests": result.testsRun, "failures": len(result.failures) + len(result.unexpectedSuccesses),
              "errors": len(result.errors), "skipped": len(result.skipped),
              "seconds": round(time.monotonic() - started, 1)}
    print(f"python tests: {json.dumps(counts)}")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(counts, f)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
