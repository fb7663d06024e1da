"""Run a bundle's functions in the program's one session: no slicing, no tracing.

`install(sliced, bundle, name)` gives a SlicedFunction the variant a bundle entry holds:
its plan, its channel specs, its generated host code, and for its TF part a
`BundledFunction`, which the sink calls by name. The entry binds what its TF part
captured by name in the program's own modules (see bundle_export, which loading does
not import): the module the index names is imported, each captured variable or tensor is
looked up there and checked (kind, dtype, shape), and the key the variant runs under
guards the captured objects' identities (and Python numbers' values) as a sliced
variant's key does. So the bundle's functions use the program's variables, shared with
its eager code.

Nothing is installed at load (`gpe.load` checks and binds by name only): an entry's
variant is made at its function's first call (`method_call`), and its FunctionDefs are
added to the eager context only when the sink first runs the part that calls them
(`registered` lists them): a program calling 2 functions of a bundle of 50 builds 2
variants and registers those 2 functions and their callees.
"""
from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import sys
import threading
import warnings
from typing import Any

import tensorflow as tf
from tensorflow.core.function.polymorphism import function_type as function_type_lib
from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import atomic_function
from tensorflow.python.framework import ops

from ..facts.signature import resolve
from ..diagnostics.stats import GpeWarning
from ..variants.variant import Crossings, Variant, assemble
from ...tfprog import bundle_codec as codec, sink_template
from ...tfprog.bundle_codec import dispatch_to_json, module_hash, synthetic
from ...tfprog.exact import exact_arithmetic
from ...tfprog.bundle import Bundle, BundleError, read, reachable
from ...tfprog.part import Part

log = logging.getLogger("gpe")

registered: list[str] = []  # FunctionDef names added to the eager context, in order


class Stale(Exception):
    """The source a bundle entry was extracted from has changed."""


class BundledFunction:
    """A bundle's FunctionDef where a Part holds a ConcreteFunction: called (inside the
    sink's trace) with the part's queue handles, it adds its FunctionDef and callees to
    the eager context (once) and to the sink's graph library, and calls it by name with
    them and the captured values, as a ConcreteFunction's call in a graph does (so
    TensorFlow inlines and optimises it into the sink as it does a traced part)."""

    def __init__(self, bundle: Bundle, name: str, captured: list, variables: list,
                 wrapper: dict | None = None):
        self.bundle, self.name = bundle, name
        self.captured, self.variables = captured, variables
        self.function_def = bundle.library[name]
        self.wrapper = wrapper  # the sink's wrapper of it, in the bundle: {function, handles}

    def sink_wrapper(self, count: int, dispatch: tuple):
        """The sink's wrapper of this function (see tfprog.sink.wrapper) that the bundle
        carries, registered with its callees; None where it has none for `count` handles
        and this `dispatch` (the sink then traces one around this function)."""
        if not self.wrapper or self.wrapper.get("handles") != count or \
                self.wrapper.get("dispatch") != dispatch_to_json(dispatch):
            return None
        name = self.wrapper["function"]
        self.register(name)
        return _Wrapper(self.bundle.library[name])

    def register(self, name: str | None = None) -> list:
        """The AtomicFunctions of this function (or `name`) and its callees (callees
        first), added to the eager context the first time any bundle function reaches
        them."""
        out = []
        for fname in reachable(self.bundle, [name or self.name]):
            held = _atomics.get(fname)
            if held is None:
                fdef = self.bundle.library[fname]
                held = _atomics[fname] = (fdef, atomic_function.from_function_def(
                    fdef, function_type_lib.FunctionType([])))
                registered.append(fname)
            out.append(held[1])
        return out

    @property
    def captured_inputs(self) -> list:  # as a ConcreteFunction's (the sink packs resources)
        return list(self.captured)

    def __call__(self, *handles):
        return self._call_flat(handles, self.captured)

    def _call_flat(self, handles, captured) -> tf.Tensor:
        """The call with `captured` in place of the captured values (the sink's wrappers
        pass the resources from its packed vector)."""
        graph = ops.get_default_graph()
        for atomic in self.register():
            graph._add_function_recursive(atomic)  # noqa: SLF001 (what a call in a graph does)
        attrs = context.context().function_call_options.as_attrs()
        op = atomic_function.partitioned_call_op(
            name=self.name, args=list(handles) + list(captured), is_stateful=True,
            tout=[tf.int32.as_datatype_enum], config=attrs["config_proto"],
            executor_type=attrs["executor_type"])
        return op.outputs[0]


class _Wrapper:
    """A bundle's sink wrapper, as the sink sees a traced one: called by name."""

    captured_inputs: list = []

    def __init__(self, function_def):
        self.function_def = function_def


# the bundle FunctionDefs in the eager context, by name: (the definition, its
# AtomicFunction, held: it removes its function from the context when it is deleted)
_atomics: dict[str, tuple] = {}
# the FunctionDefs of the bundle entries installed, by name: one eager context holds one
# function of a name, so a second bundle may use a name only for the same definition (a
# copy of the same extraction), see claim
_claimed: dict[str, Any] = {}


def claim(bundle: Bundle, name: str) -> None:
    """Refuse entry `name` when its FunctionDefs (or callees) have the names of different
    ones another bundle's entries use: calling them would run the other's."""
    entry = bundle.functions[name]
    wrapper = entry.get("wrapper") or {}
    names = reachable(bundle, [entry["function"]] + ([wrapper["function"]] if wrapper else []))
    for fname in names:
        other = _claimed.get(fname)
        if other is not None and other != bundle.library[fname]:
            raise BundleError(bundle.path, "clash", f"{name}: FunctionDef {fname} differs "
                              "from the one of that name in a bundle loaded before (a copy "
                              "edited since?); extract it again")
    for fname in names:
        _claimed.setdefault(fname, bundle.library[fname])


def resolve_function(bundle: Bundle, name: str):
    """The program's function a bundle entry names (its module imported)."""
    entry = bundle.functions[name]
    module = _import(bundle, entry["module"])
    obj: Any = module
    for part in str(entry["qualname"]).split("."):
        obj = getattr(obj, part, None)
    if obj is None or not callable(obj):
        raise BundleError(bundle.path, "missing-function",
                          f"{entry['module']} has no function {entry['qualname']}")
    return obj


def _import(bundle: Bundle, name: str):
    try:
        return sys.modules.get(name) or importlib.import_module(name)
    except ImportError as exc:
        raise BundleError(bundle.path, "missing-module", f"cannot import {name!r}, which "
                          f"the bundle names ({exc}); put its folder on sys.path") from None


def check_sources(bundle: Bundle, name: str) -> None:
    """Raise Stale when a module the entry was extracted from has changed."""
    for module, digest in bundle.functions[name].get("sources", {}).items():
        _import(bundle, module)
        if module_hash(module) != digest:
            raise Stale(f"{module} changed since the bundle at {bundle.path} was extracted")


def install(sliced, bundle: Bundle, name: str, instance: Any = None) -> Variant | None:
    """Give `sliced` the bundle's variant for entry `name`. None when a captured Python
    number no longer has the value the TF part holds (the call key then differs). A
    method's entry is installed for one object, `instance` (see `method_call`)."""
    entry = bundle.functions[name]
    try:
        plan = codec.plan_from_json(entry["plan"])
        specs = codec.specs_from_json(entry["part"]["specs"])
        layouts = codec.layouts_from_json(entry["part"]["layouts"])
        tree = None
        if entry.get("host_lines") is not None:
            tree = codec.with_line_numbers(bundle.host[name], entry["host_lines"])
        declared = [tf.TensorSpec(s["shape"], tf.as_dtype(s["dtype"]))
                    for s in entry["signature"]]
    except (KeyError, TypeError, ValueError, SyntaxError) as exc:
        raise BundleError(bundle.path, "corrupted", f"{name}: bad index entry: "
                          f"{type(exc).__name__}: {exc}") from None
    claim(bundle, name)
    plan = dataclasses.replace(plan, filename=sliced.fn.__code__.co_filename)
    captured, variables = _bind(bundle, name, entry["captured"], instance)
    params = list(sliced.__signature__.parameters)
    values: dict[str, Any] = {}
    if entry.get("method"):
        values[params.pop(0)] = instance
    for param, spec in zip(params, declared):
        mask = tuple(d is None for d in spec.shape.as_list())
        if any(mask):
            sliced.assumed.relaxed[param] = mask
        values[param] = synthetic(spec)
    function = BundledFunction(bundle, entry["function"], captured, variables,
                               entry.get("wrapper"))
    _adopt_templates(bundle)
    part = Part(plan=plan, function=function, specs=specs, layouts=layouts,
                waits=frozenset(entry["part"]["waits"]), uid=int(entry["part"]["uid"]),
                nested=[])
    variant = assemble(sliced, plan, values, Crossings(specs, layouts), lambda _: part,
                       host=(plan.host_source, tree), adaptive=sliced.adaptive)
    key = sliced.guarded_key(plan.captures, values)
    if not _guards_hold(bundle, sliced, entry["guards"], values):
        return None
    sliced.install(key, variant, ", ".join(f"{s['name']}: {s['dtype']}{tuple(s['shape'])}"
                                           for s in entry["signature"]) + " (from bundle)")
    return variant


def _adopt_templates(bundle: Bundle) -> None:
    """The sink templates the bundle carries, for the kinds this process has not traced
    (see tfprog.sink_template): a program that only loads bundles traces no sink."""
    templates = bundle.index.get("sink_templates")
    if not templates or bundle.path in _adopted:
        return
    _adopted.add(bundle.path)
    try:
        with exact_arithmetic():
            attrs = context.context().function_call_options.as_attrs()
        sink_template.adopt(templates, bundle.library,
                            {"config_proto": attrs["config_proto"]})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BundleError(bundle.path, "corrupted", f"bad sink templates: "
                          f"{type(exc).__name__}: {exc}") from None


_adopted: set[str] = set()


def _guards_hold(bundle: Bundle, sliced, guards: list, values: dict) -> bool:
    for guard in guards:
        obj = resolve(guard["path"], values, sliced.lookup)
        if guard["kind"] == "number":
            if type(obj).__name__ != guard["type"] or obj != guard["value"]:
                log.info("%s: %s is %r, the bundle holds %r; sliced from source",
                         sliced.__qualname__, guard["path"], obj, guard["value"])
                return False
            continue
        kind = type(obj)
        if f"{kind.__module__}.{kind.__qualname__}" != guard["type"]:
            raise BundleError(bundle.path, "binding", f"{sliced.__qualname__}: {guard['path']} is a "
                              f"{kind.__qualname__}, the bundle expects {guard['type']}")
    return True


def _bind(bundle: Bundle, name: str, captured: list, instance: Any = None
          ) -> tuple[list, list]:
    """The program's tensors for what the TF part captured, looked up by name (a
    method's own variables: those of `instance`, see `_self_variable`)."""
    tensors, variables = [], []
    for binding in captured:
        if binding["kind"] == "self-variable":
            obj = _self_variable(bundle, name, binding, instance)
            variables.append(obj)
            tensors.append(obj.handle)
            continue
        module = _import(bundle, binding["module"])
        obj = getattr(module, binding["path"], None)
        where = f"{binding['module']}.{binding['path']}"
        if binding["kind"] == "module-variable":
            found = list(getattr(obj, "variables", ()) or ())
            if len(found) != binding["count"]:
                raise BundleError(bundle.path, "binding", f"{name}: {where} holds "
                                  f"{len(found)} variables, the bundle expects "
                                  f"{binding['count']} (is it built?)")
            obj = found[binding["index"]]
            where += f".variables[{binding['index']}]"
        wanted = tf.Variable if binding["kind"] != "tensor" else tf.Tensor
        if not isinstance(obj, wanted) or obj.dtype.name != binding["dtype"] or \
                obj.shape.as_list() != binding["shape"]:
            raise BundleError(bundle.path, "binding", f"{name}: {where} is not a "
                              f"{binding['kind']} {binding['dtype']}{binding['shape']}")
        if isinstance(obj, tf.Variable):
            variables.append(obj)
            tensors.append(obj.handle)
        else:
            tensors.append(obj)
    return tensors, variables


def _self_variable(bundle: Bundle, name: str, binding: dict, instance: Any) -> tf.Variable:
    """Variable `binding["index"]` of the object a method is called on, refused unless the
    object's variables are the bundle's: as many, and this one of the same name, dtype
    and shape (another class's object, or one built with other sizes, is refused)."""
    try:
        found = list(instance.variables)
    except Exception:  # noqa: BLE001 (no variables to bind: said below)
        found = []
    what = f"{name}: the {type(instance).__qualname__} object it is called on"
    if len(found) != binding["count"]:
        raise BundleError(bundle.path, "binding", f"{what} has {len(found)} variables, the "
                          f"bundle's has {binding['count']} (is it built?)")
    var = found[binding["index"]]
    want = f"{binding.get('name')} {binding['dtype']}{binding['shape']}"
    if not isinstance(var, tf.Variable) or var.name != binding.get("name") or \
            var.dtype.name != binding["dtype"] or var.shape.as_list() != binding["shape"]:
        got = f"{getattr(var, 'name', '?')} {var.dtype.name}{var.shape.as_list()}"
        raise BundleError(bundle.path, "binding", f"{what}: its variables[{binding['index']}]"
                          f" is {got}, the bundle's is {want}")
    return var


def check_bindings(bundle: Bundle, name: str) -> None:
    """Raise BundleError where what entry `name` (a function, not a method) captured is
    not in the program as the bundle expects: `gpe.load` refuses it then, though the
    variant is installed (and bound again) only at the function's first call."""
    _bind(bundle, name, bundle.functions[name]["captured"])


def installed(sliced, values: dict) -> bool:
    """Whether a bundle's variant was installed for this call of `sliced` (a new key):
    one shipped next to its module (looked for once, at the first call), or one of a
    bundle the program loaded (its first call; a method's, per object)."""
    if sliced.bundled:
        sliced.bundled = False
        if from_neighbour(sliced):
            return True
    return sliced.bundle_entry is not None and method_call(sliced, values)


def method_call(sliced, values: dict) -> bool:
    """At a call of a bundle's function whose key has no variant: install the bundle's
    variant, once (`gpe.load` installs none: a function never called costs nothing);
    a method's for the object it is called on (each object its own: the variables bound
    are that object's). True if it did. An object whose variables do not match the
    bundle's: BundleError for a bundle the program loaded (gpe.load), said once and
    sliced from source for one shipped next to the module."""
    bundle, name, explicit = sliced.bundle_entry
    method = bundle.functions[name].get("method")
    instance = values.get(method["self"]) if method else None
    with _installing:  # two threads' first calls: one installs, the other then finds it
        if id(instance) in sliced.bundle_done:
            return False
        sliced.bundle_done.add(id(instance))
        try:
            return install(sliced, bundle, name, instance) is not None
        except BundleError as exc:
            if explicit:
                raise
            _warn_once(f"{bundle.path}:{id(instance)}", f"{exc}; sliced from source")
    return False


_installing = threading.Lock()


# a bundle shipped next to a library's module ------------------------------------------
NEIGHBOUR = "gpe_bundle"  # the folder name: `gpe extract mylib -o mylib/gpe_bundle`
_neighbours: dict[str, Bundle | None] = {}
_warned: set[str] = set()


def from_neighbour(sliced) -> bool:
    """At a SlicedFunction's first call: install its variant from the bundle shipped next
    to its module, if that bundle has it; True if it did. A bundle that is refused, or
    whose source changed since extraction, is said once (a GpeWarning) and the functions
    are sliced from source as usual."""
    file = getattr(sliced.fn, "__globals__", {}).get("__file__")
    if not file:
        return False
    path = os.path.join(os.path.dirname(os.path.abspath(file)), NEIGHBOUR)
    if path not in _neighbours:
        _neighbours[path] = None
        if os.path.isdir(path):
            try:
                _neighbours[path] = read(path)
            except BundleError as exc:
                _warn_once(path, f"{exc}; its functions are sliced from source")
    bundle = _neighbours[path]
    name = f"{sliced.fn.__module__}.{sliced.fn.__qualname__}"
    if bundle is None or name not in bundle.functions:
        return False
    try:
        check_sources(bundle, name)
        if bundle.functions[name].get("method"):  # installed per object (method_call)
            sliced.bundle_entry = (bundle, name, False)
            return False
        return install(sliced, bundle, name) is not None
    except Stale as exc:
        _warn_once(path, f"gpe: {exc}; its functions are sliced again from source")
    except BundleError as exc:
        _warn_once(path, f"{exc}; sliced from source")
    return False


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, GpeWarning, stacklevel=4)
