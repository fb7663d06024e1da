"""`gpe bench PROGRAM`: run a program eagerly, with tf.function and with gpe, each in its own
process, time its steps and check that what it observed matches eager.

Per way and run (gpe.drive runs the child): the program's main step function (TIMED_STEP,
else `train_step`, else the first step function) is timed by the interval between the
starts of successive calls in the second half of its calls (and after at least `warmup`),
so a step's time includes the loop's host work; `ms_per_step` is the median of those
intervals, `ms_to_end` the mean from the first timed call to the end of `main` (which waits
for work still in flight). Over `repeats` runs the median is kept. Build time: the time of
the calls in which gpe built a variant or tf.function traced, less that step's median call.
Eager calls under gpe (profile calls aside: fallbacks, and calls gpe's adaptive choice ran
eagerly) are counted; where gpe still runs a step eagerly at the end, the gpe child
alternates calls of the plain step function and of the gpe one on the last arguments
(gpe.drive.calibrate): the per-call overhead gpe adds where it does not slice, measured in
one process (across processes this machine varies by more than that overhead). Every run
of tf.function and gpe is compared with the eager run of the same round (gpe.compare).
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile

from .compare import ORDER, verdict
from .drive import KINDS, check_program, run_mode

WAYS = ("eager", "tf.function", "gpe")


def timed_label(record: dict) -> str | None:
    calls = record.get("calls") or {}
    name = record.get("timed")
    if name in calls:
        return name
    if "train_step" in calls:
        return "train_step"
    return next((k for k in calls if k.endswith(".train_step")),
                next((k for k, v in calls.items() if v["starts"]), None))


def _skip(n: int, warmup: int) -> int:
    """Calls left out of timing: the first half, and at least `warmup` where at least 3
    calls remain (gpe's first calls are profile calls, a build and its adaptive timing:
    3 + 16 sliced + 16 eager calls of a new variant)."""
    return max(n // 2, warmup) if n >= warmup + 3 else n // 2


def _label_metrics(calls: dict, warmup: int) -> dict:
    durations, kinds = calls["durations"], calls["kinds"]
    skip = _skip(len(durations), warmup)
    steady = sorted(durations[skip:]) or sorted(durations)
    typical = statistics.median(steady) if steady else 0.0
    built = [d for d, k in zip(durations, kinds) if k in (KINDS["built"], KINDS["traced"])]
    eager = [d for d, k in zip(durations[skip:], kinds[skip:]) if k == KINDS["eager"]]
    plain = [d for d, k in zip(durations[skip:], kinds[skip:]) if k == KINDS["call"]]
    return {"calls": len(kinds), "sliced": kinds.count(KINDS["sliced"]),
            "eager": kinds.count(KINDS["eager"]), "builds": len(built),
            "build_s": sum(max(0.0, d - typical) for d in built),
            "eager_median_s": statistics.median(eager) if eager else None,  # after warm-up
            "plain_median_s": statistics.median(plain) if plain else None}


def run_metrics(record: dict, warmup: int) -> dict:
    """One run of one way: timing, build time, call kinds per step function."""
    label = timed_label(record)
    calls = record.get("calls") or {}
    starts = calls[label]["starts"] if label else []
    skip = _skip(len(starts), warmup)
    intervals = [b - a for a, b in zip(starts[skip:], starts[skip + 1:])]
    per_label = {name: _label_metrics(c, warmup) for name, c in calls.items()}
    return {
        "step": label, "calls": len(starts), "warmup": skip,
        "ms_per_step": statistics.median(intervals) * 1e3 if intervals else None,
        "ms_to_end": ((record["end"] - starts[skip]) / (len(starts) - skip) * 1e3
                      if len(starts) > skip else None),
        "intervals_ms": [(b - a) * 1e3 for a, b in zip(starts, starts[1:])],  # all calls
        "build_s": sum(m["build_s"] for m in per_label.values()),
        "per_step": per_label,
        "overhead": _overhead(record, per_label),
    }


def _overhead(record: dict, per_step: dict) -> float | None:
    """From the gpe child's calibration (gpe.drive.calibrate): per step function, the
    median of gpe's eager-run calls over the median of the plain calls - 1 (0.05: 5%
    slower), weighted by how many of main's calls gpe ran eagerly."""
    total = weight = 0.0
    for label, c in (record.get("calibration") or {}).items():
        count = (per_step.get(label) or {}).get("eager", 0)
        if count and c.get("plain_s") and c.get("gpe_eager_s"):
            ratio = statistics.median(c["gpe_eager_s"]) / statistics.median(c["plain_s"])
            total += (ratio - 1.0) * count
            weight += count
    return total / weight if weight else None


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _reasons(record: dict) -> list[str]:
    found = []
    for label, s in (record.get("stats") or {}).items():
        found += [f"{label}: eager x{n}: {r}" for r, n in s["fallbacks"].items()]
        found += [f"{label}: guard failed x{n}: {r}" for r, n in s["guard_failures"].items()]
    return found


def _worst(verdicts: list[dict]) -> dict:
    rank = dict(ORDER, error=3)
    return max(verdicts, key=lambda v: rank.get(v.get("status"), 3))


def _way_summary(way: str, records: list[dict], metrics: list[dict],
                 verdicts: list[dict]) -> dict:
    ok = [m for m in metrics if m is not None]
    first = next((r for r in records if not r.get("error")), records[0])
    row = {"error": next((r["error"] for r in records if r.get("error")), None),
           "runs": len(ok), "step": ok[0]["step"] if ok else None,
           "ms_per_step": _median(m["ms_per_step"] for m in ok),
           "ms_per_step_runs": [m["ms_per_step"] for m in ok],
           "ms_to_end": _median(m["ms_to_end"] for m in ok),
           "build_s": _median(m["build_s"] for m in ok) if way != "eager" else None,
           "warmup": ok[0]["warmup"] if ok else None,
           "intervals_ms": ok[0]["intervals_ms"] if ok else [],
           "per_step": ok[0]["per_step"] if ok else {}}
    if ok:
        per = ok[0]["per_step"]
        row["calls"] = sum(m["calls"] for m in per.values())
        row["sliced_calls"] = sum(m["sliced"] for m in per.values())
        row["eager_calls"] = sum(m["eager"] for m in per.values())
    if verdicts:
        worst = _worst(verdicts)
        row.update(match=worst["match"], short=worst["short"], status=worst["status"],
                   stdout=worst.get("stdout"))
    if way == "gpe":
        row["stats"] = first.get("stats")
        row["reasons"] = _reasons(first)
        row["fallback_overhead"] = _median(m["overhead"] for m in ok)
        row["calibration"] = first.get("calibration")
    return row


def bench_program(path: str, steps: int | None, repeats: int, warmup: int, adaptive: bool,
                  timeout: float, progress=None) -> dict:
    """Run `path` `repeats` rounds of eager, tf.function and gpe (each its own process)."""
    name = os.path.splitext(os.path.basename(path))[0]
    records = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="gpe_bench_") as workdir:
        for r in range(repeats):
            for way in WAYS:
                if progress:
                    progress(f"[{name}] {way}, run {r + 1} of {repeats} ...")
                records[way].append(run_mode(way, path, steps, adaptive, workdir, timeout,
                                             tag=f".{r}"))
    metrics = {way: [None if rec.get("error") or not rec.get("calls") else
                     run_metrics(rec, warmup) for rec in recs]
               for way, recs in records.items()}
    ways = {}
    for way in WAYS:
        verdicts = [] if way == "eager" else [
            verdict(e, o) for e, o in zip(records["eager"], records[way])]
        ways[way] = _way_summary(way, records[way], metrics[way], verdicts)
    _ratios(ways)
    first = records["eager"][0]
    return {"program": name, "path": path, "steps": first.get("steps", steps),
            "ways": ways}


def _ratios(ways: dict) -> None:
    """vs_eager, vs_tf_function: the other way's ms per step over this one's (above 1:
    this way is faster)."""
    for row in ways.values():
        for key, base in (("vs_eager", "eager"), ("vs_tf_function", "tf.function")):
            other = ways[base].get("ms_per_step")
            mine = row.get("ms_per_step")
            row[key] = other / mine if other and mine else None


def bench(paths: list[str], steps: int | None, repeats: int, warmup: int, adaptive: bool,
          timeout: float, quiet: bool = False):
    """Check every program's contract first (ProgramError), then yield one summary per
    program as it is done."""
    for path in paths:
        check_program(path)
    progress = None if quiet else (lambda text: print(text, file=sys.stderr, flush=True))
    for path in paths:
        yield bench_program(os.path.abspath(path), steps, repeats, warmup, adaptive, timeout,
                            progress)
