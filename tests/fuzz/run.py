"""Long fuzzing runs: `python -m tests.fuzz.run --seeds 0:1000 --jobs 1 [--json FILE]`.

Runs each seed's program eagerly and under gpe in child processes (`--jobs` of them, each
serving many seeds; one that hangs is killed and replaced), prints each finding as it
comes and a summary: programs run, differences, gpe-only errors, hangs, and how many
programs had sliced calls. `--minimise` shrinks each finding's program
(tests/fuzz/minimise.py) and prints it.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from fuzz.differential import FINDINGS, Result, Worker  # noqa: E402
else:
    from .differential import FINDINGS, Result, Worker


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        if ":" in part:
            a, b = part.split(":")
            seeds += range(int(a), int(b))
        else:
            seeds.append(int(part))
    return seeds


def run_parallel(seeds: list[int], jobs: int, timeout: float, calls: int,
                 report, recycle: int = 100) -> list[Result]:
    queue = collections.deque(seeds)
    lock = threading.Lock()
    results: list[Result] = []

    def loop():
        worker = Worker(recycle=recycle)
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    seed = queue.popleft()
                result = worker.request({"seed": seed, "calls": calls}, timeout)
                with lock:
                    results.append(result)
                    report(result, len(results))
        finally:
            worker.stop()

    threads = [threading.Thread(target=loop) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: r.seed)


def summary(results: list[Result], wall: float) -> str:
    count = collections.Counter(r.status for r in results)
    sliced = [r for r in results if r.graph_calls > 0]
    mostly = [r for r in results if r.calls and r.graph_calls >= r.calls // 2]
    helpers = [r for r in results if r.helper_graph_calls > 0]
    reasons = collections.Counter()
    for r in results:
        for reason in r.fallbacks:
            if reason.startswith("/"):  # "file:line: kind: explanation": the kind
                reason = reason.split(": ", 1)[-1]
            reasons[reason.split(" at line")[0].split(": ")[0][:90]] += 1
    lines = [
        f"programs run: {len(results)} in {wall:.0f} s "
        f"(median {statistics.median([r.seconds for r in results] or [0]):.2f} s a program)",
        f"  no difference: {count['same']}",
        f"  differences: {count['diff']}",
        f"  gpe-only errors: {count['gpe_error']}",
        f"  hangs: {count['hang']}",
        f"  broken programs (generator bugs): {count['broken']}",
        f"programs with sliced calls of main: {len(sliced)} "
        f"({100 * len(sliced) / max(len(results), 1):.0f}%); with at least half of main's calls "
        f"sliced: {len(mostly)} ({100 * len(mostly) / max(len(results), 1):.0f}%); "
        f"with sliced calls of a helper (mode all): {len(helpers)}",
        f"sliced calls of main: {sum(r.graph_calls for r in results)} of "
        f"{sum(r.calls for r in results)}",
        f"programs where some call raised eagerly: {sum(r.eager_raised > 0 for r in results)}",
    ]
    if reasons:
        lines.append("fallback reasons (programs):")
        lines += [f"  {n:4d}  {reason}" for reason, n in reasons.most_common(12)]
    found = [r for r in results if r.status in FINDINGS]
    if found:
        lines.append("findings: " + " ".join(f"{r.seed}:{r.status}" for r in found))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0:100", help="a:b ranges and numbers, comma separated")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a program")
    parser.add_argument("--recycle", type=int, default=100,
                        help="programs a worker process runs before it is replaced "
                             "(1: a fresh process for each program)")
    parser.add_argument("--json", help="write every result to this file (JSON lines)")
    parser.add_argument("--minimise", action="store_true", help="shrink each finding")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    out = open(args.json, "w") if args.json else None

    def report(result: Result, done: int) -> None:
        if out:
            out.write(json.dumps(asdict(result)) + "\n")
            out.flush()
        if result.status in FINDINGS or result.status == "broken":
            print(f"seed {result.seed} [{result.mode}]: {result.status}: "
                  f"{result.detail[:600]}", flush=True)
        elif not args.quiet and done % 50 == 0:
            print(f"... {done}/{len(seeds)}", flush=True)

    start = time.perf_counter()
    results = run_parallel(seeds, args.jobs, args.timeout, args.calls, report, args.recycle)
    print(summary(results, time.perf_counter() - start))
    if args.minimise:
        if __package__ in (None, ""):
            from fuzz.minimise import minimise_seed
        else:
            from .minimise import minimise_seed
        for r in results:
            if r.status in FINDINGS:
                print(f"\n# seed {r.seed}: {r.status}: {r.detail[:300]}")
                print(minimise_seed(r.seed, calls=args.calls, timeout=args.timeout).source)
    return 1 if any(r.status in FINDINGS for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
