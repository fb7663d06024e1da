"""gpe.host.diagnostics: what a user reads about a function's calls.

Owns `Stats` (calls, sliced and eager calls, fallbacks and their reasons, warned about once
per cause), `gpe.timing()` (how much host work overlapped graph work) and `gpe.profile()`
with `gpe run --report`'s account of the host's time (profile.py, on the host events of
gpe.host.runtime.trace). It may import
gpe.host.runtime (timing reads the session's clocks) and nothing else of gpe.host.
"""
