"""What `gpe run --report` and `gpe run --profile DIR` add around the script's run: the
account of the host's time (its section of the report) and the TensorBoard profile
(host/diagnostics/profile.py)."""
from __future__ import annotations

import contextlib
import sys
import time

from .host.diagnostics.profile import CALLS, HostTime, format_host_time, profile


class Observed:
    """Around the script's run (`with observed.running():`), then `told()` for stderr."""

    def __init__(self, report: bool, profile_dir: str | None, calls: int | str = CALLS,
                 skip: int | None = None):
        self.host = HostTime() if report else None
        self.profile = profile(profile_dir, calls=calls, skip=skip, warn=False) \
            if profile_dir else None
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
            lines.append(self._told_profile())
        return "\n".join(lines)

    def _told_profile(self) -> str:
        p = self.profile
        if p.path is not None:
            every = "" if p.calls is None else "; --profile-calls all records every call"
            return (f"gpe: profile {p.describe()} written to {p.path}; view it with "
                    f"`tensorboard --logdir {p.logdir}` (Profile tab, trace viewer; pip "
                    f"install 'gpe[profile]'){every}")
        missed = p.missed()
        if missed is None:  # (written nowhere TensorFlow said)
            return f"gpe: no profile was written to {p.logdir}"
        return (f"gpe: no profile was written to {p.logdir}: " +
                missed.replace("the block", "the run").replace("skip=", "--profile-skip "))


def tell(observed: Observed | None) -> None:
    if observed is not None:
        text = observed.told()
        if text:
            print(text, file=sys.stderr)
