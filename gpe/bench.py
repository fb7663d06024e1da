"""`gpe bench PROGRAM ...`: run, print and write (see gpe.bench_program for what is measured,
gpe.bench_report for the tables; `gpe bench --crossing` is gpe.bench_crossing)."""
from __future__ import annotations

import os
import signal
import sys

from . import bench_report
from .bench_program import bench
from .drive import ProgramError


def _check_outputs(args, usage) -> None:
    if args.plot is not None and not bench_report.plot_available():
        raise usage("--plot needs matplotlib, which is not installed: "
                    "pip install 'gpe[plot]' (or pip install matplotlib)")
    for option in ("json", "plot"):
        path = getattr(args, option)
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise usage(f"--{option}: no such directory: {os.path.dirname(path)}")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run_bench(args, usage) -> int:
    """Run the bench the parsed `args` ask for; `usage` is the exception class for bad
    input (reported as one line). Exit status 1 where gpe differs from eager or fails."""
    _check_outputs(args, usage)
    repeats = 3 if args.repeats is None else args.repeats
    summaries = []
    signal.signal(signal.SIGTERM, _interrupt)  # so that the running child is killed too
    try:
        for summary in bench(args.programs, args.steps, repeats, args.warmup,
                             not args.no_adaptive, args.timeout):
            print(bench_report.program_table(summary) + "\n", flush=True)
            summaries.append(summary)
    except ProgramError as exc:
        raise usage(str(exc)) from None
    except KeyboardInterrupt:  # the running child is killed by subprocess.run
        print("gpe: bench interrupted", file=sys.stderr)
        return 130
    if len(summaries) > 1:
        print(bench_report.summary_table(summaries), flush=True)
    settings = {"command": ["gpe", *getattr(args, "argv", [])], "steps": args.steps,
                "repeats": repeats, "warmup": args.warmup, "adaptive": not args.no_adaptive}
    if args.json:
        bench_report.write_json(args.json, summaries, settings)
    if args.plot:
        bench_report.write_plot(args.plot, summaries)
    bad = [s["program"] for s in summaries
           if s["ways"]["gpe"].get("status") not in ("identical", "close")]
    if bad:
        print(f"gpe: gpe's results differ from eager's or gpe failed: {', '.join(bad)}",
              file=sys.stderr)
    return 1 if bad else 0
