#!/usr/bin/env python3
"""SeedTransportBench's JMH JSON as GiB/s: per variant (method, dest, streams) the median, min and max over its
measured iterations (one whole transfer each: totalMiB / 1024 over the seconds of the operation), and each gRPC
variant's median over Netty's at the same dest and streams.
Usage: scripts/bench/transport-summary.py RESULTS.json"""
import json
import statistics
import sys


def main(path):
    rows = {}
    for r in json.load(open(path)):
        if not r["benchmark"].endswith(("nettyEpollSendfile", "grpc1MiB", "grpc4MiB")):
            continue
        p = r["params"]
        m = r["primaryMetric"]
        assert m["scoreUnit"] == "ms/op", m["scoreUnit"]
        gib = int(p["totalMiB"]) / 1024
        rates = [gib / (ms / 1000) for fork in m["rawData"] for ms in fork]
        key = (p["dest"], int(p["streams"]), r["benchmark"].rsplit(".", 1)[1])
        rows[key] = (rates, p["totalMiB"])
    print("| dest | streams | variant | GiB/s median | min | max | n | vs netty (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for (dest, streams, method) in sorted(rows, key=lambda k: (k[0], k[1], k[2] != "nettyEpollSendfile", k[2])):
        rates, _ = rows[(dest, streams, method)]
        med = statistics.median(rates)
        base = rows.get((dest, streams, "nettyEpollSendfile"))
        ratio = "" if method == "nettyEpollSendfile" or base is None else "%.2f" % (med / statistics.median(base[0]))
        print("| %s | %d | %s | %.2f | %.2f | %.2f | %d | %s |" % (dest, streams, method, med, min(rates), max(rates),
                                                              len(rates), ratio))


if __name__ == "__main__":
    main(sys.argv[1])
