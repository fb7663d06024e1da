"""`gpe extract` and `gpe inspect`: write a bundle ahead of time, and show one.

`extract(target, out)` imports a module, a package (every module in it) or a file,
under its module name (so `if __name__ == "__main__":` blocks do not run: nothing runs but
the import), and slices every function defined there whose argument types are declared
(`@gpe.function(input_signature=...)` or a `tf.TensorSpec` annotation on each parameter),
without calling it (host/bundles/bundle_export.py). It reports progress per function and what
it skipped with why, and writes the bundle (tfprog/bundle.py). `tensorboard(...)`
writes each function's graph as an event file TensorBoard shows (one run per function).
"""
from __future__ import annotations

import datetime
import importlib
import inspect
import itertools
import os
import pkgutil
import secrets
import sys
from typing import Any, TextIO

from . import __version__
from .host.bundles.bundle_export import Skipped, declared_signature, export
from .host.call.function import SlicedFunction
from .tfprog import bundle as bundles
from .tfprog import part as parts
from .tfprog import sink_template


def import_target(target: str) -> tuple[list, dict[str, str]]:
    """The modules `target` names: a .py file, a package folder, or a module name (a
    package brings every module in it); and the package's modules that failed to import,
    with why."""
    if target.endswith(".py") or os.path.isdir(target):
        path = os.path.abspath(target.rstrip("/"))
        if not os.path.exists(path):
            raise FileNotFoundError(f"no such file or folder: {target}")
        folder, name = os.path.split(path[:-3] if path.endswith(".py") else path)
        prefix = []
        while os.path.isfile(os.path.join(folder, "__init__.py")):  # inside a package
            folder, package = os.path.split(folder)
            prefix.insert(0, package)
        sys.path.insert(0, folder)
        target = ".".join(prefix + [name])
    elif os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` finds modules
    module = importlib.import_module(target)
    modules, failed = [module], {}
    if hasattr(module, "__path__"):  # a package: its modules too
        for info in pkgutil.walk_packages(module.__path__, module.__name__ + ".",
                                          onerror=lambda name: None):
            try:
                modules.append(importlib.import_module(info.name))
            except Exception as exc:  # one module that does not import: said, skipped
                failed[info.name] = f"the module does not import: {type(exc).__name__}: {exc}"
    return modules, failed


def candidates(modules: list) -> list[tuple[str, Any]]:
    """(qualified name, function) for the functions defined in `modules` (not imported
    into them), and the `@gpe.function` methods of the classes defined there, in source
    order."""
    out = []
    for module in modules:
        for name, obj in vars(module).items():
            target = obj.fn if isinstance(obj, SlicedFunction) else obj
            if inspect.isfunction(target) and target.__module__ == module.__name__ \
                    and target.__qualname__ == name:
                out.append((f"{module.__name__}.{name}", obj))
            elif inspect.isclass(obj) and obj.__module__ == module.__name__ \
                    and obj.__qualname__ == name:
                out += [(f"{module.__name__}.{name}.{k}", v) for k, v in vars(obj).items()
                        if isinstance(v, SlicedFunction) and v.fn.__qualname__ == f"{name}.{k}"]
    return out


def instance_of(sliced: SlicedFunction) -> Any:
    """The object a method is sliced for at extraction: an instance of its class that the
    module holds as a global (made by its import), else one made by calling the class
    with no arguments; Skipped where there is neither."""
    module = sys.modules[sliced.fn.__module__]
    cls: Any = module
    for part in sliced.fn.__qualname__.split(".")[:-1]:
        cls = getattr(cls, part)
    for obj in vars(module).values():
        if type(obj) is cls:
            return obj
    try:
        return cls()
    except Exception as exc:
        raise Skipped(f"a method of {cls.__qualname__}: no instance of it in the module and "
                      f"{cls.__qualname__}() fails ({type(exc).__name__}: {exc})") from None


def extract(target: str, out: str, tensorboard_dir: str | None = None,
            stream: TextIO = sys.stderr) -> dict:
    """Write the bundle of `target` to `out`; returns its index."""
    modules, failed = import_target(target)
    for name, why in failed.items():
        print(f"{name} ... skipped: {why}", file=stream)
    found = candidates(modules)
    token = secrets.token_hex(4)
    # the TF parts' op scopes (gpeN_L...) name their part: numbers no program uses itself
    parts._part_ids = itertools.count(1_000_000 * (1 + int(token, 16) % 4000))
    functions, skipped, fdefs, host = {}, dict(failed), {}, {}
    for i, (name, obj) in enumerate(found, 1):
        print(f"[{i}/{len(found)}] {name} ...", end=" ", file=stream, flush=True)
        try:
            exported = _one(obj)
        except Skipped as why:
            skipped[name] = str(why)
            print(f"skipped: {why}", file=stream, flush=True)
            continue
        functions[name], host[name] = exported.entry, exported.host_source
        for fdef in exported.fdefs:
            fdefs.setdefault(fdef.signature.name, fdef)
        print(f"ok ({1 + len(exported.entry['callees'])} FunctionDefs)", file=stream,
              flush=True)
    templates, template_defs = sink_template.export()  # the session's sink, made already
    for fdef in template_defs:
        fdefs.setdefault(fdef.signature.name, fdef)
    library = list(fdefs.values())
    names = bundles.rename(library, f"gpeb_{token}_")
    by_name = {f.signature.name: f for f in library}
    templates = {key: {k: names[v] for k, v in kind.items()} for key, kind in templates.items()}
    for entry in functions.values():
        entry["function"] = names[entry["function"]]
        if "wrapper" in entry:
            entry["wrapper"]["function"] = names[entry["wrapper"]["function"]]
        entry["callees"] = sorted(names[c] for c in entry["callees"])
        own = [entry["function"]] + entry["callees"]
        entry["ops"] = bundles.op_counts(by_name, own)
        entry["bytes"] = sum(by_name[n].ByteSize() for n in own)
    meta = {"gpe": __version__, "token": token, "target": target, "skipped": skipped,
            "sink_templates": templates,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    index = bundles.write(out, functions, library, host, meta)
    print(f"gpe: wrote {out}: {len(functions)} functions, {len(library)} FunctionDefs; "
          f"{len(skipped)} skipped", file=stream)
    if tensorboard_dir:
        tensorboard(bundles.read(out), tensorboard_dir)
        print(f"gpe: graphs for TensorBoard in {tensorboard_dir}", file=stream)
    return index


def _one(obj) -> Any:
    specs = declared_signature(obj)
    if specs is None:
        raise Skipped("no declared argument types (@gpe.function(input_signature=...) or "
                      "a tf.TensorSpec annotation on each parameter)")
    if isinstance(obj, SlicedFunction):
        sliced = obj
    else:
        sliced = SlicedFunction(obj, adaptive=False)
    sliced.bundled = False  # slice from source, whatever bundle may be there
    method = "." in sliced.fn.__qualname__
    try:
        return export(sliced, specs, instance_of(sliced) if method else None)
    except Skipped:
        raise
    except Exception as exc:  # one function gpe cannot build must not stop the others
        raise Skipped(f"failed: {type(exc).__name__}: {exc}") from exc


def tensorboard(bundle: bundles.Bundle, directory: str) -> list[str]:
    """Write each function's graph (its FunctionDef's body, its callees in the graph's
    library) to directory/<qualified name>/; returns the runs written."""
    import tensorflow as tf
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def
    runs = []
    for name, entry in sorted(bundle.functions.items()):
        fdef = bundle.library[entry["function"]]
        callees = [bundle.library[c] for c in entry["callees"]]
        with tf.Graph().as_default():  # where the body's calls find their callees
            tf.graph_util.import_graph_def(tf.compat.v1.GraphDef(
                library={"function": callees}), name="")
            graph_def, _ = function_def_to_graph_def(fdef)
        graph_def.library.function.extend(callees)
        writer = tf.summary.create_file_writer(os.path.join(directory, name))
        with writer.as_default():
            tf.summary.graph(graph_def)
        writer.close()
        runs.append(name)
    return runs


def describe(path: str) -> str:
    """`gpe inspect`: the index, readable."""
    index = bundles.read_index(path, check_versions=False)
    lines = [f"bundle {path}", f"  schema {index['schema']}, gpe {index.get('gpe')}, "
             f"TensorFlow {index.get('tensorflow')}, extracted {index.get('created')} "
             f"from {index.get('target')}"]
    files = index.get("files", {})
    lines.append(f"  files: " + ", ".join(f"{k} ({v.get('bytes')} bytes)"
                                          for k, v in sorted(files.items())))
    for name, entry in sorted(index["functions"].items()):
        args = ", ".join(f"{s['name']}: {s['dtype']}"
                         f"[{', '.join('?' if d is None else str(d) for d in s['shape'])}]"
                         for s in entry["signature"])
        lines.append(f"\n  {name}({args})")
        lines.append(f"    FunctionDef {entry['function']} ({entry.get('bytes')} bytes with "
                     f"its callees)")
        for callee in entry["callees"]:
            lines.append(f"      calls {callee}")
        for ch in entry["plan"]["channels"]:
            specs = entry["part"]["specs"].get(str(ch[0])) or []
            types = ", ".join(f"{s[0]}{tuple(s[1]) if s[1] is not None else '(?)'}"
                              for s in specs)
            lines.append(f"    channel {ch[0]}: {ch[1].lower()} {', '.join(ch[2]) or '-'}"
                         f" (line {ch[3]}){': ' + types if types else ''}")
        for c in entry["captured"]:
            if c["kind"] == "self-variable":
                lines.append(f"    captures self.variables[{c['index']}] {c['name']} "
                             f"{c['dtype']}{c['shape']}")
                continue
            lines.append(f"    captures {c['kind']} {c['module']}.{c['path']}"
                         f"{'.variables[%d]' % c['index'] if 'index' in c else ''} "
                         f"{c['dtype']}{c['shape']}")
        for g in entry["guards"]:
            what = repr(g["value"]) if g["kind"] == "number" else g["type"]
            lines.append(f"    guards {g['path']}: {what}")
        ops = ", ".join(f"{k} x{v}" for k, v in entry.get("ops", {}).items())
        lines.append(f"    ops: {ops}")
    for name, why in sorted(index.get("skipped", {}).items()):
        lines.append(f"\n  skipped {name}: {why}")
    return "\n".join(lines) + "\n"
