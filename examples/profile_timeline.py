"""Profile examples/train_mlp.py's step under gpe: the host ahead of the graph, then a step
that reads its loss with `.numpy()` and so waits for the graph at every call.

    python examples/profile_timeline.py [DIR] [--steps 200]

Writes two TensorBoard profiles under DIR (default: gpe-profile), one per run, and prints
where the host's time went in each (as `gpe run --report` does). View them with
TensorBoard's profile plugin: `pip install 'gpe[profile]'`, `tensorboard --logdir DIR`,
Profile tab, trace viewer (docs/profiling.md says how to read the timeline).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpe  # noqa: E402
from gpe.host.diagnostics.profile import HostTime, format_host_time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_mlp import make_data, make_model, make_step  # noqa: E402


class ReadNow(list):
    """A history that keeps each loss as a NumPy value: `history.append(loss)` in the step
    then needs the value at once, and the host waits for the graph at every call."""

    def append(self, loss) -> None:
        super().append(loss.numpy())


def profiled(logdir: str, steps: int, read_now: bool) -> None:
    data, history = make_data(), ReadNow() if read_now else []
    step = gpe.function(make_step(make_model(), history), adaptive=False)
    for i in range(10):  # profile calls and the build, before the profile
        step(*data[i % len(data)])
    float(history[-1])
    with gpe.profile(logdir, calls="all") as p:  # (every call of the block)
        started = time.perf_counter()
        with HostTime(overlap=False) as host:
            for i in range(steps):
                loss = step(*data[i % len(data)])
            final = float(loss)
        took = time.perf_counter() - started
    print(f"{step.__name__}: final loss {final:.5f}; profile written to {p.path}")
    print(format_host_time(host, took))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", nargs="?", default="gpe-profile")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    profiled(os.path.join(args.logdir, "ahead"), args.steps, read_now=False)
    time.sleep(1.1)  # (TensorFlow names a profile's run by the second it was written)
    profiled(os.path.join(args.logdir, "waits"), args.steps, read_now=True)
    print(f"view: tensorboard --logdir {args.logdir}  (pip install 'gpe[profile]')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
