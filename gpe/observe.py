"""What `gpe run --report` and `gpe run --profile DIR` add around the script's run: the
account of the host's time (its section of the report) and the TensorBoard profile
(host/diagnostics/profile.py)."""
from __future__ import annotations

import contextlib
import sys
import time

from .host.diagnostics.profile import HostTime, format_host_time, profile


class Observed:
    """Around the script's run (`with observed.running():`), then `told()` for stderr."""

    def __init__(self, report: bool, profile_dir: str | None, calls: int | None = None,
                 skip: int = 0):
        self.host = HostTime() if report else None
        self.profile = profile(profile_dir, calls=calls, skip=skip) if profile_dir else None
        self.run_s: float | None = None

    @contextlib.contextmanager
    def running(self):
        with contextlib.ExitStack() as stack:
            if self.profile is not None:
                stack.enter_context(self.profile)
            if self.host is not None:
                stack.enter_context(self.host)
            started = time.perf_counter()
            try:
                yield
            finally:
                self.run_s = time.perf_counter() - started

    def told(self) -> str:
        lines = []
        if self.host is not None and self.host.ledger is not None:
            lines.append(format_host_time(self.host, self.run_s))
        if self.profile is not None:
            recorded = self.profile.recorded
            window = "" if recorded is None else \
                f" (a window of {recorded} calls after {self.profile.skip})"
            if self.profile.path is not None:
                lines.append(f"gpe: profile{window} written to {self.profile.path}; view it with "
                             f"`tensorboard --logdir {self.profile.logdir}` (Profile tab, "
                             "trace viewer; pip install 'gpe[profile]')")
            elif recorded == 0:
                lines.append(f"gpe: no profile was written to {self.profile.logdir}: the "
                             f"run made {self.profile.skip} calls of gpe functions or fewer")
            else:
                lines.append(f"gpe: no profile was written to {self.profile.logdir}")
        return "\n".join(lines)


def tell(observed: Observed | None) -> None:
    if observed is not None:
        text = observed.told()
        if text:
            print(text, file=sys.stderr)
