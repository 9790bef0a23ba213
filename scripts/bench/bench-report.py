#!/usr/bin/env python3
"""Turns benchmark results into docs/benchmarks.md.

Reads every run under the given directories (default: bench/results/*): a run is NAME.meta.json
(written by BenchMain: machine, JVM, commit, and the comparisons with their targets) beside
NAME.json (JMH's JSON results). For each comparison it pairs our method with its baseline at the
same parameters and reports medians over all measured iterations of all forks, the ratio
(baseline time / our time: our speed as a fraction of the baseline's), the target and whether it
is met. Measurements that are in no comparison are listed as they are. bench/notes.md, if present,
is appended verbatim (hand-written findings; every number in it must name its results file).
Single-shot results measured in batches (JMH's measurementBatchSize) are divided by the batch size.
Comparisons that name a "group" in the metadata (e.g. GpuGatherBench's views against the engines'
own pinned copies) are shown in the targets section as one table per run and group: a row for each
parameter set and our method, a column of ratios for each baseline, the baselines' own medians in
rows of their own.

Usage: scripts/bench/bench-report.py [RESULT_DIR...] [-o docs/benchmarks.md]
Only the Python standard library is used.
"""
import argparse
import glob
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rel(path):
    return os.path.relpath(os.path.abspath(path), ROOT)


def short(name):
    """io.engramhost.bench.GatherBench.unsafeCopy -> GatherBench.unsafeCopy"""
    parts = name.split(".")
    return ".".join(parts[-2:])


def method(name):
    return name.split(".")[-1]


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


class Measurement:
    def __init__(self, entry):
        self.benchmark = entry["benchmark"]
        self.params = dict(entry.get("params") or {})
        metric = entry["primaryMetric"]
        self.unit = metric["scoreUnit"]
        # JMH reports a single shot of a batch as the time of the whole batch: per call is what we compare.
        self.batch = int(entry.get("measurementBatchSize") or 1) if entry["mode"] == "ss" else 1
        self.values = [v / self.batch for fork in metric["rawData"] for v in fork]
        if not self.values:
            raise ValueError(f"{self.benchmark}: no measured iterations")
        self.median = statistics.median(self.values)
        self.p25, self.p75 = quartiles(self.values)
        self.forks = len(metric["rawData"])
        self.mode = entry["mode"]

    def key(self):
        return self.benchmark, tuple(sorted(self.params.items()))

    def time_based(self):
        return "/op" in self.unit

    def seconds(self):
        """The median as seconds per op, for time units; None otherwise."""
        per = {"ns/op": 1e-9, "us/op": 1e-6, "ms/op": 1e-3, "s/op": 1.0}.get(self.unit)
        return None if per is None else self.median * per

    def derived(self):
        """A rate read from the parameters: rows/s for a gather batch, GiB/s for a load, ms/GiB for an attach."""
        s = self.seconds()
        if not s:
            return ""
        p = self.params
        if "gatherRows" in p and "rowBytes" in p:
            rows, nbytes = int(p["gatherRows"]), int(p["gatherRows"]) * int(p["rowBytes"])
            rate = f"{nbytes / s / 1e9:.1f} GB/s"
            return rate + (f", {rows / s / 1e6:.1f} M rows/s" if "gather" in method(self.benchmark) else "")
        if "RestartBench" in self.benchmark or "ColdStartBench" in self.benchmark:
            return ""  # their checkpoint may be $ENGRAM_BENCH_CHECKPOINT, whose size no parameter gives
        if "batch" in p:
            return f"{int(p['batch']) / s / 1e6:.1f} M rows/s"
        if "checkpointMiB" in p:
            return f"{int(p['checkpointMiB']) / 1024 / s:.2f} GiB/s"
        if "tableMiB" in p and self.mode == "ss":
            return f"{fmt(s * 1e3 / (int(p['tableMiB']) / 1024))} ms/GiB"
        return ""

    def cell(self):
        d = self.derived()
        return f"{fmt(self.median)} {self.unit}" + (f" ({d})" if d else "")

    def spread(self):
        return f"{fmt(self.p25)}-{fmt(self.p75)}"


def fmt(x):
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def params_text(params):
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or "-"


class Run:
    def __init__(self, meta_path):
        self.meta_path = meta_path
        with open(meta_path) as f:
            self.meta = json.load(f)
        self.results_path = os.path.join(os.path.dirname(meta_path), self.meta["results"])
        if not os.path.exists(self.results_path):
            raise FileNotFoundError(f"{rel(meta_path)} names {self.meta['results']}, which is missing")
        with open(self.results_path) as f:
            self.measurements = [Measurement(e) for e in json.load(f)]
        self.by_key = {m.key(): m for m in self.measurements}

    def rows(self):
        """(comparison, ours, baseline) for every measured pair, and the measurements in no pair."""
        paired, used = [], set()
        for c in self.meta.get("comparisons", []):
            for m in self.measurements:
                if m.benchmark != c["ours"]:
                    continue
                base = self.by_key.get((c["baseline"], m.key()[1]))
                if base is None:
                    continue
                paired.append((c, m, base))
                used.update({m.key(), base.key()})
        alone = [m for m in self.measurements if m.key() not in used]
        return paired, alone


# Parameters a grouped table sorts its rows by first (the table, then the row); the others follow by name.
SORT_FIRST = ("tableMiB", "rowBytes")


def param_names(names):
    return sorted(names, key=lambda k: (SORT_FIRST.index(k) if k in SORT_FIRST else len(SORT_FIRST), k))


def param_order(params):
    """Sorts parameter sets by SORT_FIRST, then by name; values numbers as numbers (2048 before 16384)."""
    def value(v):
        try:
            return (0, float(v), "")
        except ValueError:
            return (1, 0.0, v)
    return tuple(value(params[k]) for k in param_names(params))


def group_tables(run, paired):
    """Markdown tables, one per comparison group of this run: rows (params, ours), columns the baselines."""
    groups = {}
    for c, ours, base in paired:
        if c.get("group"):
            groups.setdefault(c["group"], []).append((c, ours, base))
    out = []
    for group, rows in groups.items():
        baselines = list(dict.fromkeys(method(c["baseline"]) for c, _, _ in rows))
        by_params = {}
        for c, ours, base in rows:
            entry = by_params.setdefault(ours.key()[1], {"params": ours.params, "bases": {}, "ours": {}})
            entry["bases"][method(base.benchmark)] = base
            entry["ours"].setdefault(method(ours.benchmark), (ours, {}))[1][method(base.benchmark)] = judge(c, ours, base)
        judged = [j for e in by_params.values() for _, js in e["ours"].values() for j in js.values()]
        met = sum(1 for _, _, m in judged if m is True)
        missed = sum(1 for _, _, m in judged if m is False)
        # The parameters that differ between rows name each row; those that do not are said once above.
        names = param_names({k for e in by_params.values() for k in e["params"]})
        varying = [k for k in names if len({e["params"].get(k) for e in by_params.values()}) > 1]
        fixed = {k: v for k, v in next(iter(by_params.values()))["params"].items() if k not in varying}
        out += [f"### {group}", "", f"Results `{rel(run.results_path)}`: {met} met, {missed} missed"
                + (f"; every row at {params_text(fixed)}" if fixed else "") + ".", "",
                f"| {', '.join(varying) or 'params'} | method | median | "
                + " | ".join(f"ratio to {b}" for b in baselines) + " |",
                "|---|---|---|" + "---|" * len(baselines)]
        for _, e in sorted(by_params.items(), key=lambda kv: param_order(kv[1]["params"])):
            p = ", ".join(f"{k}={e['params'][k]}" for k in varying if k in e["params"]) or "-"
            for b in baselines:
                if b in e["bases"]:
                    out.append(f"| {p} | {b} (baseline) | {e['bases'][b].cell()} | " + " | ".join(
                        "1" if x == b else "" for x in baselines) + " |")
            for name, (ours, js) in e["ours"].items():
                cells = []
                for b in baselines:
                    if b not in js:
                        cells.append("")
                        continue
                    ratio, _, m = js[b]
                    cells.append(f"{ratio:.3f}" + (f" {met_text(m)}" if m is not None else ""))
                out.append(f"| {p} | {name} | {ours.cell()} | " + " | ".join(cells) + " |")
        targets = sorted({judge(c, o, b)[1] for c, o, b in rows} - {"-"})
        out += ["", f"Target: {'; '.join(targets) or 'none'}.", ""]
    return out


def judge(c, ours, base):
    """(ratio, target text, met) for one pair; met is None where the target does not apply."""
    if ours.unit != base.unit:
        raise ValueError(f"{ours.benchmark} ({ours.unit}) and {base.benchmark} ({base.unit}) differ in unit")
    ratio = base.median / ours.median if ours.time_based() else ours.median / base.median
    t = c["target"]
    within = t.get("at_params_in", {})
    # A parameter the results lack (a run from before it existed) does not exclude the row.
    if any(k in ours.params and ours.params[k] not in v for k, v in within.items()):
        return ratio, "-", None
    if "max_ms_per_gib" in t:
        s, mib = ours.seconds(), ours.params.get("tableMiB")
        if s is None or mib is None:
            return ratio, "-", None
        per = s * 1e3 / (int(mib) / 1024)
        return ratio, f"<= {fmt(t['max_ms_per_gib'])} ms/GiB", per <= t["max_ms_per_gib"]
    if "min_ratio" in t and "max_ratio" in t:
        return (ratio, f"{t['min_ratio']:.3f}-{t['max_ratio']:.3f} of baseline",
                t["min_ratio"] <= ratio <= t["max_ratio"])
    if "min_ratio" in t:
        return ratio, f">= {t['min_ratio']:.2f} of baseline", ratio >= t["min_ratio"]
    if "max_score" in t:
        at = t.get("at_params", {})
        if any(ours.params.get(k) != v for k, v in at.items()):
            return ratio, "-", None
        if t["unit"] != ours.unit:
            return ratio, f"< {fmt(t['max_score'])} {t['unit']} (unit differs: not judged)", None
        return ratio, f"< {fmt(t['max_score'])} {t['unit']}", ours.median < t["max_score"]
    return ratio, "-", None


def ratio_text(ratio):
    return f"{ratio:.3f} ({1 / ratio:,.0f}x slower)" if 0 < ratio < 0.5 else f"{ratio:.3f}"


def met_text(met):
    return {True: "**met**", False: "**missed**", None: ""}[met]


def machine_lines(run):
    m = run.meta
    mem = m.get("memory_bytes")
    gib = f"{mem / 2**30:.1f} GiB" if mem else "?"
    return [
        f"- Metadata `{rel(run.meta_path)}`, suite `{m.get('suite')}`,"
        f" status `{m.get('status')}`, {m.get('started')} to {m.get('finished', '?')}",
        f"- Machine: {m.get('cpu_model') or '?'}, {m.get('cores')} cores, {gib}; `{m.get('machine')}`",
        f"- Java {m.get('java_version')} ({m.get('java_vm')}); engram-host {m.get('project_version')},"
        f" commit `{m.get('git_commit') or 'unknown'}`",
        f"- Arguments: `{' '.join(m.get('args') or []) or '(none)'}`; each cell is the median of every"
        f" measured iteration of every fork (p25-p75 beside it)",
    ]


def render(runs, notes):
    out = ["# Benchmarks", "",
           "Generated by `scripts/bench/bench-report.py` from the results files named below; do not edit by hand.",
           "Hand-written findings come from `bench/notes.md` (appended at the end).", "",
           "Ratio = baseline time / our time (1.00: as fast as the baseline; 0.90: 10% slower). Medians are over"
           " every measured iteration of every fork; single shots timed in batches are divided by the batch size.", "",
           "## How to run", "",
           "- CI smoke pass (CPU only, about a minute, numbers not judged): `scripts/bench/bench-smoke.sh`",
           "- Full CPU suite: `scripts/bench/bench-run.sh` (writes `bench/results/<date>-<host>/cpu.json` and"
           " `cpu.meta.json`, then regenerates this page)",
           "- GPU suite (AttachBench with its C baseline, GpuGatherBench, RestartBench) on a CUDA machine with"
           " Java and Maven: `make -C native engram-attach engram-attach-bench-lib && scripts/bench/bench-run.sh --suite"
           " gpu`; on one without"
           " Java: `scripts/gpu/bench-gpu-bundle.sh` here, then `OUT=dir bash bench-gpu-pass.sh smoke attach attach32"
           " gather restart` there (parts that fit 10-minute commands), and copy the results to"
           " `bench/results/<date>-<machine>/`",
           "- GPU gather against the engines' own pinned copies (cuMemHostAlloc, cuMemHostRegister), at 2, 16 and"
           " 40 GiB with 64, 264 and 1024-byte rows: `bench-gpu-pass.sh pinned` (about 5 min) and"
           " `bench-gpu-pass.sh pinned40` (about 6-7 min), one command each; `pinned2g` repeats the 2 GiB points"
           " with 3 forks (their forks spread by about 4%)",
           "- Cold start (issue 14) on the GPU machine, from the repository root with the bench bundle:"
           " `bash scripts/gpu/gpu-coldstart-bench.sh OUT` (page cache: the read phase per backend, `pread` and memcpy"
           " baselines, process start to ready) and `ROWS=8134407 CACHE=cold bash scripts/gpu/gpu-coldstart-bench.sh"
           " OUT` (a cold disk against `dd` and O_DIRECT reads)",
           "- Full scale on the two-GPU machine (issue 15), from the release tarball:"
           " `PART=env|serve|engines|anon bash scripts/gpu/gpu-scale-run.sh OUT` (100 GiB by default, one part per"
           " command)",
           "- Any JMH option passes through, e.g. `scripts/bench/bench-run.sh -f 1 -p tables=64 Handshake`",
           "- This page: `python3 scripts/bench/bench-report.py -o docs/benchmarks.md`", ""]
    if not runs:
        out += ["No results yet.", ""]
    summary = []
    grouped = []
    sections = []
    for run in runs:
        paired, alone = run.rows()
        grouped += group_tables(run, paired)
        sec = [f"## Run `{rel(run.results_path)}`", ""] + machine_lines(run) + [""]
        by_class = {}
        for c, ours, base in paired:
            by_class.setdefault(c["benchmark"], []).append((c, ours, base))
        for cls, rows in by_class.items():
            sec += [f"### {cls.split('.')[-1]}", "",
                    "| ours | params | ours median | p25-p75 | baseline | baseline median | ratio | target | met |",
                    "|---|---|---|---|---|---|---|---|---|"]
            # a pair under several comparisons: a row for each target that applies, or one row if none does
            judged = [(c, ours, base) + judge(c, ours, base) for c, ours, base in rows]
            applies = {(o.key(), b.key()) for _, o, b, _, _, m in judged if m is not None}
            shown = set()
            for c, ours, base, ratio, target, met in judged:
                pair = (ours.key(), base.key())
                if met is None and (pair in applies or pair in shown):
                    continue
                shown.add(pair)
                sec.append(f"| {method(ours.benchmark)} | {params_text(ours.params)} | {ours.cell()} | {ours.spread()}"
                           f" | {method(base.benchmark)} | {base.cell()} | {ratio_text(ratio)} | {target} | {met_text(met)} |")
                if met is not None and not c.get("group"):
                    summary.append(f"| {short(ours.benchmark)} vs {method(base.benchmark)} | {params_text(ours.params)}"
                                   f" | {ours.cell()} | {base.cell()} | {ratio_text(ratio)} | {target} | {met_text(met)}"
                                   f" | `{rel(run.results_path)}` |")
            sec.append("")
        if alone:
            sec += ["### Measurements without a baseline pairing", "",
                    "| benchmark | params | median | p25-p75 | iterations |", "|---|---|---|---|---|"]
            for m in alone:
                sec.append(f"| {short(m.benchmark)} | {params_text(m.params)} | {m.cell()} | {m.spread()}"
                           f" | {len(m.values)} in {m.forks} fork(s) |")
            sec.append("")
        sections += sec
    if summary or grouped:
        out += ["## Targets", ""]
    if summary:
        out += ["| comparison | params | ours median | baseline median | ratio | target | met | results |",
                "|---|---|---|---|---|---|---|---|"] + summary + [""]
    out += grouped
    out += sections
    if notes:
        out += ["## Findings", "", notes.rstrip(), ""]
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description="Writes docs/benchmarks.md from benchmark results.")
    ap.add_argument("dirs", nargs="*", help="result directories (default: bench/results/*)")
    ap.add_argument("-o", "--output", help="write here instead of stdout")
    ap.add_argument("--notes", default=os.path.join(ROOT, "bench", "notes.md"), help="findings to append")
    a = ap.parse_args(argv)
    dirs = a.dirs or sorted(glob.glob(os.path.join(ROOT, "bench", "results", "*")))
    metas = sorted(p for d in dirs for p in glob.glob(os.path.join(d, "*.meta.json")))
    try:
        runs = [Run(p) for p in metas]
    except (OSError, ValueError, KeyError) as e:
        print(f"bench-report: {e}", file=sys.stderr)
        return 1
    notes = open(a.notes).read() if a.notes and os.path.exists(a.notes) else ""
    text = render(runs, notes)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
