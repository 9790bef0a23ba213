#!/usr/bin/env python3
"""A client process of the two-node checks (scripts/numa/numa-guest-checks.sh), with the Python package of this checkout:
imports the tables from the daemon on SOCKET expecting CHECKPOINT's fingerprint, checks every table's sha256-tree-v1
digest over the mapped bytes against SIDECAR, then asks STATUS. Writes one JSON object (content summary, STATUS) to
OUT and exits 1 on any failure. A Python process starts in seconds in the TCG guest, where a JVM takes tens of them.

usage: numa-client.py SOCKET CHECKPOINT SIDECAR OUT"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import engram_host  # noqa: E402
from engram_host import client  # noqa: E402

sock, ckpt, sidecar, out = sys.argv[1:5]
try:
    with client.connect(sock, expect=client.expect_checkpoint([ckpt]), wait=120.0, timeout=120.0) as tables:
        report = tables.verify_content([sidecar], threads=2)
    status = client.status(sock, timeout=120.0)
except Exception as e:  # one line, as the CLI
    print(f"numa-client: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
json.dump({"content_check": report.summary, "status": status}, open(out, "w"), indent=1)
