#!/usr/bin/env python3
"""Benchmark results: records them, and writes the summary page, its plots and the full report.

A run is what one BenchMain call writes: NAME.json (JMH's results) and NAME.meta.json (machine, JVM, commit, and the
comparisons with their targets). Recorded, a run is one summary file, bench/results/<commit>/NAME.json:
{"label": the machine, "meta": NAME.meta.json, "results": NAME.json}, keyed by the commit it measured (its first 7
hex digits, "-dirty" when the tree had changes).

For each comparison the report pairs our method with its baseline at the same parameters and gives medians over all
measured iterations of all forks, the ratio (baseline time / our time: our speed as a fraction of the baseline's),
the target and whether it is met. Single-shot results measured in batches (JMH's measurementBatchSize) are divided
by the batch size. Comparisons that name a "group" (e.g. GpuGatherBench's views against the engines' own pinned
copies) are shown as one table per run and group.

Writes, from every summary under bench/results:
  docs/benchmarks.md        the summary: the latest result per metric and backend (SUMMARY below), its target and
                            its source file, and the plots
  docs/benchmarks/*.png     the plots (matplotlib; without it they are skipped, saying so, and the page still written)
  bench/report.md           every recorded run: each comparison and each measurement

Usage:
  scripts/bench/bench-report.py                   regenerate the three from bench/results
  scripts/bench/bench-report.py PATH...           print the full report of the runs in PATH (directories or files:
                                                  NAME.meta.json beside NAME.json, or summaries); writes nothing
  scripts/bench/bench-report.py --record [--label MACHINE] PATH...
                                                  record those runs as summaries, then regenerate the three
Only the Python standard library is needed, and matplotlib for the plots (Debian: apt-get install
python3-matplotlib, then run it with /usr/bin/python3).
"""
import argparse
import glob
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
SUMMARY_PAGE = os.path.join(ROOT, "docs", "benchmarks.md")
PLOTS = os.path.join(ROOT, "docs", "benchmarks")
REPORT = os.path.join(ROOT, "bench", "report.md")


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
    """One run: its metadata and measurements, from a summary file or from NAME.meta.json beside NAME.json."""

    def __init__(self, source, label, meta, results):
        self.source = source  # the file that holds it (the summary, or the metadata file)
        self.label = label
        self.meta = meta
        self.measurements = [Measurement(e) for e in results]
        self.by_key = {m.key(): m for m in self.measurements}
        self.started = meta.get("started") or ""

    @staticmethod
    def from_pair(meta_path, label=None):
        with open(meta_path) as f:
            meta = json.load(f)
        results_path = os.path.join(os.path.dirname(meta_path), meta["results"])
        if not os.path.exists(results_path):
            raise FileNotFoundError(f"{rel(meta_path)} names {meta['results']}, which is missing")
        with open(results_path) as f:
            results = json.load(f)
        return Run(meta_path, label or default_label(meta), meta, results)

    @staticmethod
    def from_summary(path):
        with open(path) as f:
            s = json.load(f)
        return Run(path, s.get("label") or default_label(s["meta"]), s["meta"], s["results"])

    def commit_key(self):
        c = self.meta.get("git_commit") or "unknown"
        return c if c == "unknown" else c[:7] + ("-dirty" if c.endswith("-dirty") else "")

    def name(self):
        return os.path.basename(self.source)[:-len(".meta.json" if self.source.endswith(".meta.json") else ".json")]

    def date(self):
        return self.started[:10] or "?"

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

    def find(self, method_name, params):
        """The measurement of METHOD (Class.method) whose parameters include PARAMS, or None."""
        for m in self.measurements:
            if m.benchmark.endswith("." + method_name) and all(m.params.get(k) == v for k, v in params.items()):
                return m
        return None


def default_label(meta):
    return f"{meta.get('cores', '?')}-core {meta.get('hostname') or 'machine'}"


def load_runs(paths):
    """Every run under PATHS (directories, searched recursively, or files), oldest first."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "**", "*.json"), recursive=True))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    runs = []
    for f in dict.fromkeys(files):
        if f.endswith(".meta.json"):
            runs.append(Run.from_pair(f))
        elif not os.path.exists(f[:-len(".json")] + ".meta.json"):  # else JMH's results, read with their metadata
            with open(f) as fh:
                data = json.load(fh)
            if isinstance(data, dict) and "meta" in data and "results" in data:
                runs.append(Run.from_summary(f))
    return sorted(runs, key=lambda r: (r.started, r.source))


def record(meta_paths, label):
    """Writes each run as bench/results/<commit>/NAME.json; an existing summary is never replaced."""
    written = []
    for meta_path in meta_paths:
        run = Run.from_pair(meta_path, label)
        dest = os.path.join(RESULTS, run.commit_key(), run.name() + ".json")
        if os.path.exists(dest):
            raise FileExistsError(f"{rel(dest)} exists: name the run differently (BenchMain --name)")
        with open(os.path.join(os.path.dirname(meta_path), run.meta["results"])) as f:
            results = json.load(f)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "w") as f:
            f.write(json.dumps({"label": run.label, "meta": run.meta, "results": results}, indent=1) + "\n")
        written.append(dest)
        print(f"bench-report: recorded {rel(dest)}")
    return written


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
        out += [f"### {group}", "", f"Results `{rel(run.source)}`: {met} met, {missed} missed"
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
    if 0 < ratio < 0.5:
        return f"{ratio:.3f} ({1 / ratio:,.0f}x slower)"
    return f"{ratio:,.0f}" if ratio >= 1000 else f"{ratio:.3g}" if ratio >= 2 else f"{ratio:.3f}"


def met_text(met):
    return {True: "**met**", False: "**missed**", None: ""}[met]


def machine_lines(run):
    m = run.meta
    mem = m.get("memory_bytes")
    gib = f"{mem / 2**30:.1f} GiB" if mem else "?"
    return [
        f"- Recorded in `{rel(run.source)}`, suite `{m.get('suite')}`,"
        f" status `{m.get('status')}`, {m.get('started')} to {m.get('finished', '?')}",
        f"- Machine: {m.get('cpu_model') or '?'}, {m.get('cores')} cores, {gib}; `{m.get('machine')}`",
        f"- Java {m.get('java_version')} ({m.get('java_vm')}); engram-host {m.get('project_version')},"
        f" commit `{m.get('git_commit') or 'unknown'}`",
        f"- Arguments: `{' '.join(m.get('args') or []) or '(none)'}`; each cell is the median of every"
        f" measured iteration of every fork (p25-p75 beside it)",
    ]


RATIO = ("Ratio = the baseline's time / ours (1.00: as fast as the baseline; 0.90: 10% slower; 7.0: seven times"
         " faster). Medians are over every measured iteration of every fork; single shots timed in batches are"
         " divided by the batch size.")


def render_report(runs):
    out = ["# Benchmark report: every recorded run", "",
           "Generated by `scripts/bench/bench-report.py` from the summaries under `bench/results/` (one file per"
           " run, keyed by the commit it measured); do not edit by hand. The summary for users is"
           " [docs/benchmarks.md](../docs/benchmarks.md); what the numbers mean and why a target was missed:"
           " [notes.md](notes.md).", "", RATIO, ""]
    if not runs:
        out += ["No results yet.", ""]
    summary = []
    grouped = []
    sections = []
    for run in runs:
        paired, alone = run.rows()
        grouped += group_tables(run, paired)
        sec = [f"## Run `{rel(run.source)}` ({run.label}, {run.date()})", ""] + machine_lines(run) + [""]
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
                                   f" | `{rel(run.source)}` |")
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
    return "\n".join(out) + "\n"


# --- the summary: the latest result per metric and backend -------------------------------------------------------

class Metric:
    """One row of the summary: OURS (Class.method) at PARAMS on MACHINE, against the first of BASELINES (Class.method,
    or (Class.method, parameters that differ from ours)) measured in the same run. The latest run that has them is
    shown. TARGET (the metadata's form) judges a metric for which the run's metadata holds no comparison."""

    def __init__(self, what, backend, ours, baselines=(), params=None, machine="H200", target=None):
        self.what, self.backend, self.ours, self.machine, self.target = what, backend, ours, machine, target
        self.baselines = [b if isinstance(b, tuple) else (b, {}) for b in baselines]
        self.params = params or {}

    def baseline_in(self, run, ours):
        for name, over in self.baselines:
            for m in run.measurements:
                if (m.benchmark.endswith("." + name) and all(m.params.get(k) == v for k, v in over.items())
                        and all(ours.params.get(k) == v for k, v in m.params.items() if k not in over)):
                    return m
        return None

    def latest(self, runs):
        """(run, ours, baseline or None) of the newest run that has them, or None."""
        for run in reversed(runs):
            if run.label != self.machine:
                continue
            ours = run.find(self.ours, self.params)
            if ours is None:
                continue
            base = self.baseline_in(run, ours) if self.baselines else None
            if self.baselines and base is None:
                continue
            return run, ours, base
        return None


A, R, D, G = "AttachBench.", "RestartBench.", "DaemonRestartBench.", "GpuGatherBench."
CS, CL = "ColdStartBench.", "ColdLoadBench."
ATTACH_C = {"vmmGpu": ("cLibVmmGpu", "cVmmGpu"), "memfdHugetlbRegister": ("cLibMemfdHugetlbRegister",
            "cMemfdHugetlbRegister"), "memfdRegister": ("cLibMemfdRegister", "cMemfdRegister"),
            "vmmGpuCpu": ("cLibVmmGpuCpu", "cVmmGpuCpu")}
BACKENDS = (("cuda-vmm", "vmmGpu", "gatherVmm"), ("memfd-hugetlb", "memfdHugetlbRegister", "gatherMemfdHugetlb"),
            ("memfd", "memfdRegister", "gatherMemfd"))
TAKEOVER = {"text": "< 100 ms", "max_score": 100.0, "unit": "ms/op"}
FD_STORE = {"text": "< 1,000 ms", "max_score": 1000.0, "unit": "ms/op"}
BUSY = {"text": "< 50 ms", "max_score": 50.0, "unit": "ms/op"}


def attach_metric(what, backend, java, mib):
    return Metric(what, backend, A + java, [A + c for c in ATTACH_C[java]], {"tableMiB": str(mib)})


def restart_metrics(what, ours, backend, mib, view="gpu", machine="H200"):
    return Metric(what, backend, R + ours, [R + "cClient"], {"backend": backend, "tableMiB": str(mib), "view": view},
                  machine)


def daemon_metrics(backend, mib, machine="H200", with_jvm=True):
    size = f"{mib // 1024} GiB"
    p = {"backend": backend, "checkpointMiB": str(mib)}
    out = [Metric(f"takeover (`serve --takeover`) once the successor's JVM is up, {size}", backend, D + "takeover",
                  [D + "reload"], p, machine, TAKEOVER)]
    if with_jvm:
        out.append(Metric(f"takeover, the successor's JVM start included, {size}", backend, D + "takeoverWithJvm",
                          [D + "reload"], p, machine))
    out.append(Metric(f"restart from systemd's fd store, JVM start included, {size}", backend, D + "fdStoreRestart",
                      [D + "reload"], p, machine, FD_STORE))
    return out


SUMMARY = [
    ("Attach: an engine's import, its tables made visible to the GPU",
     "The Java client's attach against the C client's attach code making the same driver calls: in the benchmark's"
     " own process where measured (`cLib...`), before that in a separate process (`c...`, whose time includes a"
     " 0.22 ms socket round trip). One table per backend; single shots.",
     "attach.png", "Attach time per GiB against the table's size, per backend, with the C baseline",
     [attach_metric("GPU view, 16 GiB", "cuda-vmm", "vmmGpu", 16384),
      attach_metric("GPU view, 64 GiB", "cuda-vmm", "vmmGpu", 65536),
      attach_metric("GPU view, 100 GiB", "cuda-vmm", "vmmGpu", 102400),
      attach_metric("GPU view, 16 GiB", "memfd-hugetlb", "memfdHugetlbRegister", 16384),
      attach_metric("GPU view, 64 GiB", "memfd-hugetlb", "memfdHugetlbRegister", 65536),
      attach_metric("GPU view, 16 GiB", "memfd", "memfdRegister", 16384),
      Metric("GPU view, 16 GiB, against memfd's (4 KiB pages)", "cuda-vmm", A + "vmmGpu", [A + "memfdRegister"],
             {"tableMiB": "16384"}),
      attach_metric("GPU and CPU views, 16 GiB", "cuda-vmm", "vmmGpuCpu", 16384)]),
    ("Restart: an engine's, and the daemon's own",
     "An engine restarting: a fresh process, from its start to every table usable on the GPU, against the C client"
     " (`engram-attach`) in the same run. The daemon restarting: `serve --takeover`, or a restart from systemd's fd"
     " store, against a full reload of the checkpoint (the baseline column).",
     "restart.png", "Restart times: engines against the C client, and the daemon's takeover and fd-store restart"
     " against a full reload",
     [restart_metrics("Java engine (`import --gpu`), 40 GiB", "javaClient", "cuda-vmm", 40960),
      restart_metrics("Java engine without the AppCDS archive, 40 GiB", "javaClientWithoutAppCds", "cuda-vmm", 40960),
      restart_metrics("Java engine, 16 GiB", "javaClient", "memfd-hugetlb", 16384),
      restart_metrics("Java engine, 16 GiB", "javaClient", "memfd", 16384),
      restart_metrics("Python engine after `import torch`, 16 GiB", "pythonAfterTorch", "cuda-vmm", 16384),
      restart_metrics("Python engine after `import torch`, 40 GiB", "pythonAfterTorch", "cuda-vmm", 40960),
      restart_metrics("Python engine after `import torch`, 16 GiB", "pythonAfterTorch", "memfd-hugetlb", 16384),
      restart_metrics("Python engine after `import torch`, 40 GiB", "pythonAfterTorch", "memfd-hugetlb", 40960),
      restart_metrics("Java engine, CPU view, 64 MiB", "javaClient", "memfd", 64, "cpu", "2-core VM")]
     + daemon_metrics("cuda-vmm", 40960) + daemon_metrics("memfd", 16384)
     + daemon_metrics("memfd", 4096, "2-core VM", with_jvm=False)
     + [Metric("`bin/engram-host status` of the release tarball, to its first line, with the AppCDS archive", "-",
               "CliStartBench.statusWithAppCds", ["CliStartBench.statusWithoutAppCds"])]),
    ("GPU lookups: random rows gathered through the GPU view",
     "1,048,576 random 264-byte rows (an Engram row) per op, one warp per row, against the same gather from an"
     " engine's own pinned copy (`cuMemHostAlloc`), and cuda-vmm against memfd.",
     "gather.png", "Random rows gathered per second against the table's size, every view and both pinned baselines",
     [Metric(f"264-byte rows, {mib // 1024} GiB table", b, G + g, [G + "gatherPinnedAlloc"],
             {"tableMiB": str(mib), "rowBytes": "264", "gatherRows": "1048576"})
      for mib in (40960, 16384) for b, _, g in BACKENDS]
     + [Metric("264-byte rows, 16 GiB table, against memfd's", "cuda-vmm", G + "gatherVmm", [G + "gatherMemfd"],
               {"tableMiB": "16384", "rowBytes": "264", "gatherRows": "1048576"})]),
    ("Load: the checkpoint into the tables",
     "The daemon's read phase (16 threads, the digest included) into fresh regions of each backend, against `pread`"
     " of the same bytes into faulted-in anonymous memory (page cache) or `dd iflag=direct` (cold disk). These"
     " results do not record the checkpoint's size (32 GiB from the page cache, 8 GiB from a cold disk); the"
     " GiB/s targets are judged in [bench/notes.md](../bench/notes.md), section 10.", None, None,
     [Metric("read phase, from the page cache", b, CS + "readIntoRegions", [CS + "preadIntoAnonymous"],
             {"backend": b, "cache": "warm"}) for b, _, _ in BACKENDS]
     + [Metric("read phase, from a cold disk", b, CS + "readIntoRegions", [CS + "ddDirect"],
               {"backend": b, "cache": "cold"}) for b, _, _ in BACKENDS]
     + [Metric(f"the loader into sealed 4 KiB memfds, 256 MiB from the page cache, {t} thread{'s' * (t > 1)}",
               "memfd", CL + "loaderIntoMemfd", [CL + "preadIntoAnonymous"], {"threads": str(t), "cache": "warm"})
        for t in (1, 4)]),
    ("Handshake, a busy daemon, CPU reads",
     "The daemon in the benchmark's process, serving sealed memfds; the client is the real one.", None, None,
     [Metric("handshake with 64 tables: connect, checks, manifest, fds", "memfd", "HandshakeBench.clientConnect",
             ["HandshakeBench.socketpairFds"], {"tables": "64"}),
      Metric("handshake with 64 tables", "memfd", "HandshakeBench.clientConnect", ["HandshakeBench.socketpairFds"],
             {"tables": "64"}, "2-core VM"),
      Metric("an engine's import with 1,000 slowloris connections open", "memfd", "BusyDaemonBench.importTables",
             [("BusyDaemonBench.importTables", {"load": "none"})], {"load": "slowloris"}, target=BUSY),
      Metric("CPU gather of 1,024 random 264-byte rows (`TableView.readRows`), 4 MiB table", "memfd",
             "GatherBench.tableViewReadRows", ["GatherBench.unsafeCopy"], {"rowBytes": "264", "tableMiB": "4"},
             "2-core VM"),
      Metric("the same, 256 MiB table", "memfd", "GatherBench.tableViewReadRows", ["GatherBench.unsafeCopy"],
             {"rowBytes": "264", "tableMiB": "256"}, "2-core VM")]),
]


def unit_text(unit):
    return {"ms/op": "ms", "us/op": "us", "ns/op": "ns", "s/op": "s"}.get(unit, unit)


def result_text(m):
    d = m.derived()
    return f"{fmt(m.median)} {unit_text(m.unit)}" + (f" ({d})" if d else "")


def current_targets(runs):
    """{(ours, baseline): comparisons} from the newest run whose metadata compares them: today's targets, which
    judge every summary row, an older result too."""
    out = {}
    for run in runs:  # oldest first: newer metadata replaces older
        pairs = {}
        for c in run.meta.get("comparisons", []):
            pairs.setdefault((c["ours"], c["baseline"]), []).append(c)
        out.update(pairs)
    return out


def verdicts(metric, targets, ours, base):
    """(ratio or None, "target: met; ..." text) for a summary row."""
    out = []
    ratio = None
    if base is not None:
        ratio = judge({"target": {}}, ours, base)[0]
        judged = [judge(c, ours, base) for c in targets.get((ours.benchmark, base.benchmark), [])]
        out = [(t, m) for _, t, m in judged if m is not None]
    if not out and metric.target:
        t = metric.target
        out = [(t["text"], ours.unit == t["unit"] and ours.median < t["max_score"])]
    return ratio, "; ".join(f"{t}: {met_text(m)}" for t, m in out) or "-"


def summary_rows(runs):
    """Per section: (metric, run, ours, base, ratio, target text) for every metric with a result."""
    targets = current_targets(runs)
    out = []
    for title, text, png, caption, metrics in SUMMARY:
        rows = []
        for metric in metrics:
            found = metric.latest(runs)
            if found is None:
                print(f"bench-report: no result for {metric.ours} at {metric.params} ({metric.machine})",
                      file=sys.stderr)
                continue
            rows.append((metric,) + found + verdicts(metric, targets, found[1], found[2]))
        out.append((title, text, png, caption, rows))
    return out


def source_link(run):
    path = rel(run.source)
    return f"[`{os.path.relpath(path, 'bench/results')}`](../{path}), {run.date()}"


def render_summary(sections):
    out = ["# Benchmarks", "",
           "What engram-host costs, each number measured against a baseline in the same run: the latest result for"
           " each metric and backend, with its target and the file it comes from. Generated by"
           " `scripts/bench/bench-report.py` from the summaries in `bench/results/` (one per run, keyed by the"
           " commit it measured); do not edit by hand.", "",
           RATIO + " H200: a 16-core VM with one NVIDIA H200 on PCIe Gen5 and one NUMA node. 2-core VM: the"
           " development machine, shared with other builds.", "",
           "Every run and every comparison: [bench/report.md](../bench/report.md). What the numbers mean and why a"
           " target was missed, as far as it was found: [bench/notes.md](../bench/notes.md). How each GPU run"
           " went: [bench/gpu-runs.md](../bench/gpu-runs.md).", ""]
    for title, text, png, caption, rows in sections:
        out += [f"## {title}", "", text, ""]
        if png:
            out += [f"![{caption}](benchmarks/{png})", ""]
        out += ["| what | backend | machine | result | baseline | ratio | target | source |",
                "|---|---|---|---|---|---|---|---|"]
        for metric, run, ours, base, ratio, target in rows:
            b = f"`{method(base.benchmark)}` {result_text(base)}" if base is not None else "-"
            r = ratio_text(ratio) if ratio is not None else "-"
            out.append(f"| {metric.what} | {metric.backend} | {run.label} | `{method(ours.benchmark)}` "
                       f"{result_text(ours)} | {b} | {r} | {target} | {source_link(run)} |")
        out.append("")
    out += HOW_TO_RUN
    return "\n".join(out) + "\n"


HOW_TO_RUN = [
    "## How to run", "",
    "- The smoke pass `bin/test` runs (CPU only, about a minute, numbers not judged): `scripts/bench/bench-smoke.sh`",
    "- The full CPU suite: `scripts/bench/bench-run.sh`. Its results go to `bench/tmp/results/<date>-<host>/`"
    " (not tracked) and their report is printed; `scripts/bench/bench-run.sh --record` also records them as"
    " `bench/results/<commit>/<name>.json` and regenerates this page. Any JMH option passes through, e.g."
    " `scripts/bench/bench-run.sh -f 1 -p tables=64 Handshake`.",
    "- The GPU suite (`AttachBench` with its C baseline, `GpuGatherBench`, `RestartBench`) on a CUDA machine with"
    " Java and Maven: `make -C native engram-attach engram-attach-bench-lib && scripts/bench/bench-run.sh --suite"
    " gpu`. On one without Java: `scripts/gpu/bench-gpu-bundle.sh` here, then there `OUT=dir bash bench-gpu-pass.sh"
    " smoke attach attach32 gather restart` (parts that fit 10-minute commands; `pinned`, `pinned40` and"
    " `pinned2g` gather against the engines' pinned copies at 2, 16 and 40 GiB), and back here"
    " `scripts/bench/bench-report.py --record --label H200 dir`.",
    "- The load from the page cache and from a cold disk, on the GPU machine with the bench bundle:"
    " `bash scripts/gpu/gpu-coldstart-bench.sh OUT` and `ROWS=8134407 CACHE=cold bash"
    " scripts/gpu/gpu-coldstart-bench.sh OUT`.",
    "- Full scale on a two-GPU machine, from the release tarball: `PART=env|serve|engines|anon bash"
    " scripts/gpu/gpu-scale-run.sh OUT` (100 GiB by default, one part per command).",
    "- This page, its plots and bench/report.md: `/usr/bin/python3 scripts/bench/bench-report.py` (the plots need"
    " matplotlib: `apt-get install python3-matplotlib`).", ""]


# --- the plots ---------------------------------------------------------------------------------------------------

def latest_point(runs, machine, wanted):
    """The newest run on MACHINE that measured every (Class.method, params) of WANTED: {key: measurement}, or None."""
    for run in reversed(runs):
        if run.label != machine:
            continue
        found = {k: run.find(name, params) for k, (name, params) in wanted.items()}
        if all(found.values()):
            return found
    return None


def per_gib(m):
    return m.seconds() * 1e3 / (int(m.params["tableMiB"]) / 1024)


def plot_attach(plt, runs, path):
    sizes = sorted({int(m.params["tableMiB"]) for r in runs if r.label == "H200" for m in r.measurements
                    if m.benchmark.endswith(".vmmGpu") and "tableMiB" in m.params})
    fig, ax = plt.subplots(figsize=(8, 5.4))
    for (backend, java, _), color in zip(BACKENDS, ("tab:blue", "tab:orange", "tab:green")):
        xs, ours, cs = [], [], []
        for mib in sizes:
            point = None
            for c in ATTACH_C[java]:  # the in-process C baseline where a run has it, else the other
                point = latest_point(runs, "H200", {"java": (A + java, {"tableMiB": str(mib)}),
                                                    "c": (A + c, {"tableMiB": str(mib)})})
                if point:
                    break
            if point:
                xs.append(mib / 1024)
                ours.append(per_gib(point["java"]))
                cs.append(per_gib(point["c"]))
        ax.plot(xs, ours, "o-", color=color, label=f"{backend}: Java client")
        ax.plot(xs, cs, "s--", color=color, alpha=0.6, label=f"{backend}: C, the same driver calls")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([s / 1024 for s in sizes], [f"{s / 1024:g}" for s in sizes])
    ax.set_yticks([5, 10, 20, 50, 100], ["5", "10", "20", "50", "100"])
    ax.set_xlabel("table size (GiB)")
    ax.set_ylabel("attach time per GiB (ms/GiB, log scale)")
    ax.set_title("Attach with a GPU view (H200): lower is faster")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    save(plt, fig, path)


def plot_gather(plt, runs, path):
    methods = [("gatherVmm", "cuda-vmm view", "o-", "tab:blue"),
               ("gatherMemfdHugetlb", "memfd-hugetlb view", "o-", "tab:orange"),
               ("gatherMemfd", "memfd view (4 KiB pages)", "o-", "tab:green"),
               ("gatherPinnedAlloc", "engine's pinned copy: cuMemHostAlloc", "s--", "black"),
               ("gatherPinnedRegister", "engine's pinned copy: cuMemHostRegister", "^:", "gray")]
    runs = [r for r in runs if r.label == "H200"]
    sizes = sorted({int(m.params["tableMiB"]) for r in runs for m in r.measurements
                    if m.benchmark.endswith(".gatherPinnedAlloc")})
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.2), sharey=True)
    for ax, row in zip(axes, (64, 264, 1024)):
        points = {}
        for mib in sizes:
            p = {"tableMiB": str(mib), "rowBytes": str(row), "gatherRows": "1048576"}
            point = latest_point(runs, "H200", {name: (G + name, p) for name, *_ in methods})
            if point:
                points[mib] = point
        xs = [mib / 1024 for mib in points]
        for name, label, style, color in methods:
            ys = [1048576 / points[mib][name].seconds() / 1e6 for mib in points]
            ax.plot(xs, ys, style, color=color, label=label, alpha=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_title(f"{row}-byte rows")
        ax.set_xlabel("table size (GiB)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("random rows gathered (M rows/s)")
    axes[0].set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    fig.suptitle("GPU gather of 1 M random rows (H200): our views against an engine's own pinned copy")
    save(plt, fig, path)


def plot_restart(plt, runs, path):
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    engines = [m for m in SUMMARY[1][4] if m.ours.startswith(R) and m.machine == "H200"
               and m.params.get("tableMiB") == "40960"]
    labels, ours, cs = [], [], []
    for metric in engines:
        found = metric.latest(runs)
        if found:
            _, o, c = found
            who = {"javaClient": "Java", "javaClientWithoutAppCds": "Java, no AppCDS",
                   "pythonAfterTorch": "Python"}[method(o.benchmark)]
            labels.append(f"{who}\n{metric.backend}")
            ours.append(o.median)
            cs.append(c.median)
    x = range(len(labels))
    for bars in (left.bar([i - 0.2 for i in x], ours, 0.4, label="the engine", color="tab:blue"),
                 left.bar([i + 0.2 for i in x], cs, 0.4, label="the C client, same run", color="tab:gray")):
        left.bar_label(bars, fmt="%.0f", fontsize=7)
    target_line(left, 800, "Java's target: 800 ms", -0.45)
    left.set_xticks(list(x), labels, fontsize=8)
    left.set_ylabel("process start to tables usable on the GPU (ms)")
    left.set_title("An engine restarting, 40 GiB of tables (H200)")
    left.legend(fontsize=8, loc="upper left")
    left.grid(True, axis="y", alpha=0.3)
    kinds = [("takeover", "takeover, JVM up"), ("takeoverWithJvm", "takeover with JVM start"),
             ("fdStoreRestart", "fd-store restart"), ("reload", "full reload")]
    groups = [("cuda-vmm", 40960), ("memfd", 16384)]
    for j, (name, label) in enumerate(kinds):
        ys, xs = [], []
        for i, (backend, mib) in enumerate(groups):
            point = latest_point(runs, "H200", {"m": (D + name, {"backend": backend, "checkpointMiB": str(mib)})})
            if point:
                xs.append(i + (j - 1.5) * 0.2)
                ys.append(point["m"].median)
        right.bar_label(right.bar(xs, ys, 0.2, label=label), fmt="%.0f", fontsize=7)
    right.set_yscale("log")
    right.set_ylim(top=60000)
    target_line(right, 100, "takeover's target: 100 ms", -0.45)
    target_line(right, 1000, "fd-store restart's target: 1 s", -0.45)
    right.set_xticks(range(len(groups)), [f"{b}, {mib // 1024} GiB" for b, mib in groups], fontsize=8)
    right.set_ylabel("time (ms, log scale)")
    right.set_title("The daemon restarting (H200)")
    right.legend(fontsize=8, loc="upper right", ncol=2)
    right.grid(True, axis="y", which="both", alpha=0.3)
    save(plt, fig, path)


def target_line(ax, y, text, x):
    ax.axhline(y, color="tab:red", linestyle="--", linewidth=1)
    ax.text(x, y, text, color="tab:red", ha="left", va="bottom", fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})


def save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def write_plots(runs, directory):
    """Writes the PNGs; returns None, or the line saying why they were skipped."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (f"plots skipped: no matplotlib for {sys.executable} (the PNGs in {rel(directory)} stay as they"
                " were); for them: apt-get install python3-matplotlib, then /usr/bin/python3"
                " scripts/bench/bench-report.py")
    plt.rcParams.update({"font.size": 9})
    os.makedirs(directory, exist_ok=True)
    plot_attach(plt, runs, os.path.join(directory, "attach.png"))
    plot_gather(plt, runs, os.path.join(directory, "gather.png"))
    plot_restart(plt, runs, os.path.join(directory, "restart.png"))
    return None


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    print(f"bench-report: wrote {rel(path)}")


def regenerate():
    runs = load_runs([RESULTS])
    skipped = write_plots(runs, PLOTS)
    if skipped:
        print(f"bench-report: {skipped}", file=sys.stderr)
    write(SUMMARY_PAGE, render_summary(summary_rows(runs)))
    write(REPORT, render_report(runs))


def main(argv):
    ap = argparse.ArgumentParser(description="Records benchmark runs; writes docs/benchmarks.md, its plots and"
                                             " bench/report.md.")
    ap.add_argument("paths", nargs="*", help="runs: directories or files (NAME.meta.json, or summaries)")
    ap.add_argument("--record", action="store_true", help="record the runs in PATHS under bench/results, then"
                                                           " regenerate")
    ap.add_argument("--label", help="with --record: the machine the runs were measured on (e.g. H200)")
    a = ap.parse_args(argv)
    try:
        if a.record:
            if not a.paths:
                ap.error("--record needs the runs' directories or NAME.meta.json files")
            metas = [p for p in a.paths if p.endswith(".meta.json")]
            metas += sorted(m for p in a.paths if os.path.isdir(p)
                            for m in glob.glob(os.path.join(p, "**", "*.meta.json"), recursive=True))
            if not metas:
                ap.error("no NAME.meta.json in " + " ".join(a.paths))
            record(metas, a.label)
            regenerate()
        elif a.paths:
            sys.stdout.write(render_report(load_runs(a.paths)))
        else:
            regenerate()
    except (OSError, ValueError, KeyError) as e:
        print(f"bench-report: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
