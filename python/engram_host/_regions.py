"""The region-run arithmetic, the package's one copy of it: where a table lies in the regions of a MANIFEST
(docs/protocol.md, "A table over several regions"), whether a run of regions is mapped back to back, and where a
VMM import puts each region in its one VA range ("How to map a region"). Plain arithmetic over sizes and offsets:
no fds, no driver, no protocol errors; the callers (``_wire``'s MANIFEST checks, the client's attach, ``_cuda``'s
VmmImport) turn a problem named here into their error. Standard library only.

A region is anything with ``kind``, ``size``, ``numa_node`` and ``device``; a table anything with ``name``,
``region``, ``offset`` and ``nbytes`` (``_wire.Region`` and ``_wire.TableEntry``)."""

from __future__ import annotations

import bisect
from typing import Optional, Sequence


class Runs:
    """What the check of a run of regions needs, built once for a manifest's regions: ``ends[i]``, where region i
    ends in the regions laid back to back, and ``other[i]``, the first region after i whose kind, node or device
    differs from region i's (len(regions) if none). A table's run is then found by bisection, not a walk: a lying
    peer's million tables over 65536 regions cost no more than their count."""
    __slots__ = ("ends", "other")

    def __init__(self, regions: Sequence):
        ends, at = [], 0
        for r in regions:
            at += r.size
            ends.append(at)
        n = len(regions)
        other = [n] * n
        for i in range(n - 2, -1, -1):
            a, b = regions[i], regions[i + 1]
            other[i] = i + 1 if (a.kind, a.numa_node, a.device) != (b.kind, b.numa_node, b.device) else other[i + 1]
        self.ends, self.other = ends, other

    def last(self, region: int, offset: int, nbytes: int) -> tuple:
        """The last region a table of ``nbytes`` at ``offset`` in ``region`` reaches (len(regions) when it runs
        past the last one), and the bytes it has past the end of the last region (0 when none)."""
        end = (self.ends[region - 1] if region else 0) + offset + nbytes
        return max(region, bisect.bisect_left(self.ends, end)), max(0, end - self.ends[-1])


def place_problem(name: str, nbytes: int, region: int, offset: int, kind: int, node: int, device: int,
                  may_run_on: bool, regions: Sequence, runs: list) -> Optional[str]:
    """What is wrong with a table's place and kind against its region, or, for a table that ``may_run_on`` (a
    cuda-vmm host table, kind 2) past its region's end, against the run of regions from ``region`` on; None when
    nothing is. ``runs`` holds the manifest's :class:`Runs` once one was needed (a list of at most one, filled
    here). The text follows ``MANIFEST: ``."""
    reg = regions[region]
    if offset + nbytes > reg.size and (offset >= reg.size or not may_run_on):
        why = "" if offset >= reg.size else "; only a cuda-vmm host table (kind 2) runs on into the regions after it"
        return f"table {name!r} [{offset}, +{nbytes}) does not fit in region {region} of {reg.size} bytes{why}"
    if (kind, node, device) != (reg.kind, reg.numa_node, reg.device):
        return (f"table {name!r} says kind {kind}, node {node}, device {device} but its region {region} has "
                f"{reg.kind}, {reg.numa_node}, {reg.device}")
    if offset + nbytes <= reg.size:
        return None
    if not runs:
        runs.append(Runs(regions))
    last, left = runs[0].last(region, offset, nbytes)
    j = runs[0].other[region]  # the first region after it of another kind, node or device
    if j < len(regions) and j <= last:
        r = regions[j]
        return (f"table {name!r} says kind {kind}, node {node}, device {device} but region {j} of its run from "
                f"region {region} has {r.kind}, {r.numa_node}, {r.device}")
    if left:
        return (f"table {name!r} [{offset}, +{nbytes}) at region {region} runs past the last region, "
                f"{len(regions) - 1}, with {left} bytes left to place")
    return None


def table_runs(regions: Sequence, tables: Sequence) -> list:
    """The regions each table of a checked manifest lies in, in the order of ``tables``: an empty range for an
    empty table, its region, or for a cuda-vmm host table over several regions the run from its ``region`` on."""
    runs = None
    out = []
    for t in tables:
        if t.region < 0:
            out.append(range(0))
        elif t.offset + t.nbytes <= regions[t.region].size:
            out.append(range(t.region, t.region + 1))
        else:
            runs = runs or Runs(regions)
            out.append(range(t.region, runs.last(t.region, t.offset, t.nbytes)[0] + 1))
    return out


def runs_apart(regions: Sequence, tables: Sequence, addresses: Sequence[int]) -> Optional[str]:
    """Whether every run of regions a table lies in is mapped back to back, so that the table's bytes are one range
    from its first region's address plus its offset: None, or the first region that is not, in one line. Each
    region is looked at once, whatever the tables (a run's regions after its first)."""
    n = len(regions)
    starts = [0] * (n + 1)
    owner = [None] * n
    for t, run in zip(tables, table_runs(regions, tables)):
        if len(run) > 1:
            starts[run.start + 1] += 1
            starts[run.stop] -= 1
            owner[run.start + 1] = owner[run.start + 1] or t.name
    inside, name = 0, None
    for i in range(n):
        inside += starts[i]
        name = owner[i] or name
        if inside > 0 and addresses[i] != addresses[i - 1] + regions[i - 1].size:
            return (f"table {name}: region {i} of its run is mapped at 0x{addresses[i]:x}, not right after region "
                    f"{i - 1} (0x{addresses[i - 1]:x} + {regions[i - 1].size})")
    return None


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def back_to_back(sizes: Sequence[int], granules: Sequence[int]) -> tuple:
    """Where a VMM import maps regions of ``sizes`` (each a multiple of its allocation's granule, ``granules``) in
    one VA range, in order: each at the end of the one before rounded up to its own granule. Returns the offsets,
    the range's size (the end rounded up to the largest granule) and its alignment (that granule). A run's regions
    share one kind and node, so one granule, of which every size is a multiple: they lie back to back."""
    offsets = []
    end = alignment = 0
    for size, g in zip(sizes, granules):
        offset = round_up(end, g)
        offsets.append(offset)
        end = offset + size
        alignment = max(alignment, g)
    return offsets, round_up(end, alignment), alignment
