"""gpe.host.diagnostics: what a user reads about a function's calls.

Owns `Stats` (calls, sliced and eager calls, fallbacks and their reasons, warned about once
per cause) and `gpe.timing()` (how much host work overlapped graph work). It may import
gpe.host.runtime (timing reads the session's clocks) and nothing else of gpe.host.
"""
