"""gpe.host.call: `SlicedFunction`, what `@gpe.function` returns, and the life of a call.

Owns the call path: the call key (the host-side guard on arguments and captured objects),
the variant lookup, and the phases a call goes through (profile, build, timing, sliced or
eager), with statistics and fallbacks. It is the top of gpe.host and may import every
other part of it.
"""
from . import traced  # noqa: F401  (calls become events while a profile records)
