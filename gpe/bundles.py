"""`gpe.load`: a bundle's functions, callable, without slicing or tracing them again.

    lib = gpe.load("mylib/gpe_bundle")
    lib.dense(x)                      # or lib["mylib.layers.dense"]

Loading reads and checks the whole bundle first (tfprog/bundle.py: schema, TensorFlow
version, checksums, ops), then imports the modules the index names, checks that their
source is the one extracted from and that what the functions captured is there (by name,
kind, dtype and shape), and returns the functions (the module's own `@gpe.function`
object where it is one, so the module's callers use the bundle too). Each gets its
precompiled variant at its first call (a method's, per object), bound then to the
program's variables (see host/bundles/bundle_load.py): loading builds no variant and
starts nothing for functions the program does not call. Calls
whose arguments do not match the declared types are handled as any gpe call (profiled
and sliced from source). Nothing else runs: no code but the modules the index names and
the generated host code of the functions it lists.
"""
from __future__ import annotations

from typing import Any, Iterable

from .host.bundles.bundle_load import Stale, check_bindings, check_sources, claim, \
    resolve_function
from .host.call.function import SlicedFunction
from .host.runtime.session import get_session
from .tfprog.bundle import Bundle, BundleError, read


class Library:
    """The functions of a loaded bundle: by qualified name (`lib["pkg.mod.f"]`), or as
    attributes by their own name where that is unique (`lib.f`)."""

    def __init__(self, bundle: Bundle, functions: dict[str, SlicedFunction]):
        self.bundle = bundle
        self.functions = functions
        short: dict[str, list[str]] = {}
        for name, fn in functions.items():
            short.setdefault(fn.__qualname__.rsplit(".", 1)[-1], []).append(name)
        self._short = {k: v[0] for k, v in short.items() if len(v) == 1}

    def __getitem__(self, name: str) -> SlicedFunction:
        return self.functions[name]

    def __getattr__(self, name: str) -> SlicedFunction:
        if name.startswith("_") or name not in self.__dict__.get("_short", {}):
            raise AttributeError(f"the bundle has no function {name!r} (or several: use "
                                 f"lib['module.{name}'])")
        return self.functions[self._short[name]]

    def __iter__(self):
        return iter(self.functions)

    def __len__(self) -> int:
        return len(self.functions)

    def __repr__(self) -> str:
        return f"<gpe bundle {self.bundle.path}: {', '.join(self.functions)}>"


def load(path: str, allow_ops: Iterable[str] = (), names: Iterable[str] | None = None
         ) -> Library:
    """The functions of the bundle at `path` (all, or those named), each runnable at once
    in the program's session. Raises `BundleError` (with why) for a bundle that does not
    fit: see the module docstring. allow_ops: ops that read or write files or run Python
    (`ReadFile`, `PyFunc`, ...) that this bundle may use."""
    bundle = read(path, frozenset(allow_ops))
    # gpe's start, before the modules are imported: its GC freeze (host/runtime/session)
    # spares the collections their import may trigger a traversal of TensorFlow's heap
    get_session()
    wanted = list(bundle.functions) if names is None else list(names)
    out: dict[str, SlicedFunction] = {}
    for name in wanted:
        if name not in bundle.functions:
            raise BundleError(path, "missing-function", f"no function {name!r} in it")
        try:
            check_sources(bundle, name)
        except Stale as exc:
            raise BundleError(path, "source-changed", f"{exc} (extract it again)") from None
        claim(bundle, name)
        out[name] = _sliced(bundle, name)
        if not bundle.functions[name].get("method"):
            check_bindings(bundle, name)  # refused now, not at its first call
        # installed at its first call (a method's per object): loading builds no variant
        out[name].bundle_entry = (bundle, name, True)
        out[name].bundle_done.clear()
    return Library(bundle, out)


def _sliced(bundle: Bundle, name: str) -> SlicedFunction:
    fn: Any = resolve_function(bundle, name)
    if isinstance(fn, SlicedFunction):
        fn.bundled = False  # this bundle replaces any one next to the module
        return fn
    return SlicedFunction(fn)

