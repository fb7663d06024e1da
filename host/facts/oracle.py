"""Classify the objects a sliced function refers to into the slicer's `Kind`s.

Keras objects count as TF when their calls build TF ops and nothing else, so that tracing
them once gives what eager runs every call: Keras's own classes (a built-in layer or
optimizer), and a user's own layer or model class whose `call` the slicer finds to be all
TF work for that instance (gpe.slicer.layers), each of its sublayers likewise. A user's
class whose `call` has Python side effects (a print, a counter) stays on the host.
"""
from __future__ import annotations

import inspect
import os
import threading
import types
import weakref
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from . import keras_methods
from ... import slicer  # (its layers module: loaded when a layer is judged)
from ...slicer.facts import Kind
from ...tfprog import recurrent

try:
    import keras
except ImportError:  # pragma: no cover - keras comes with tensorflow
    keras = None

_HOST_MODULES = ("numpy", "math", "random", "statistics", "builtins", "operator", "itertools",
                 "functools", "collections", "time", "json", "re", "string")
_TF_CONTEXTS = (tf.GradientTape,)
_TF_CONTEXT_MAKERS = (tf.name_scope, tf.device)  # functions in TF 2, classes in some versions
_CONSTANT_MAKERS = (tf.constant, tf.convert_to_tensor)
_TF_FUNCTION = tf.types.experimental.GenericFunction
_EFFECT_MODULES = ("tensorflow.python.ops.logging_ops", "tensorflow.python.ops.check_ops",
                   "tensorflow.python.ops.summary_ops_v2")
# Python-level TF utilities are not TF ops: eager runs them as Python on every call (they
# print, read or set process state, return Python values), and in a traced part they would
# run once, symbolically, or answer differently (tf.executing_eagerly() is False there).
# Rule: a `tensorflow` callable from one of these modules, or named below, runs on the host
# (Kind.HOST: it may touch TF state, so it keeps its place among host effects).
_HOST_TF_MODULES = (
    "tensorflow.python.autograph.utils.ag_logging",  # tf.autograph.trace, set_verbosity
    "tensorflow.python.eager.context",  # tf.executing_eagerly, set_log_device_placement
    "tensorflow.python.framework.config",  # tf.config.*
    "tensorflow.python.eager.polymorphic_function.eager_function_run",  # run_functions_eagerly
    "tensorflow.python.platform.tf_logging",  # tf.get_logger
    "tensorflow.python.framework.random_seed",  # tf.random.set_seed
    "tensorflow.python.debug.lib.check_numerics_callback",  # enable_check_numerics
)
_KERAS_OP_MODULES = ("keras.src.ops.", "keras.src.losses.", "keras.src.activations.",
                     "keras.src.metrics.", "keras.src.backend.tensorflow.")
_KERAS_HOST_FUNCTIONS = ("convert_to_numpy", "serialize", "deserialize", "get")
# Keras's own methods of a layer or model that are host utilities: they run their own loops
# and tf.functions and return NumPy or Python values (`model.predict(next_states)` in
# handson-ml2's DQN), or read or write a model's state as NumPy: never TF work
_KERAS_HOST_METHODS = frozenset({
    "predict", "predict_on_batch", "fit", "evaluate", "train_on_batch", "test_on_batch",
    "get_weights", "set_weights", "save", "save_weights", "load_weights", "summary",
    "count_params", "get_config", "to_json", "compile", "export"})
_HOST_TF_NAMES = (  # dotted names under `tf` whose modules also hold real ops
    "summary.create_file_writer", "summary.create_noop_writer", "summary.record_if",
    "summary.should_record_summaries", "summary.experimental.set_step",
    "summary.experimental.get_step", "summary.flush", "is_tensor", "get_static_value",
    "inside_function", "executing_eagerly",
)


def _resolve(dotted: str) -> Any:
    obj: Any = tf
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


_HOST_TF_FUNCTIONS = tuple(f for f in map(_resolve, _HOST_TF_NAMES) if f is not None)


def _host_tf_utility(obj: Any, module: str) -> bool:
    return module in _HOST_TF_MODULES or any(obj is f for f in _HOST_TF_FUNCTIONS)


def classify(obj: Any) -> Kind:
    if isinstance(obj, tf.Variable) or _is_keras_variable(obj):
        return Kind.VARIABLE
    if isinstance(obj, tf.Tensor):
        return Kind.TENSOR
    if isinstance(obj, (tf.distribute.Strategy, tf.distribute.ReduceOp)):
        return Kind.TF_OBJECT  # strategy.run, strategy.reduce(ReduceOp.SUM, ...): TF part
    if isinstance(obj, (tf.DType, tf.TensorShape, tf.random.Generator)):
        return Kind.TF_OBJECT  # a Generator's state is a variable its methods advance
    if inspect.ismethod(obj) and isinstance(obj.__self__, tf.random.Generator):
        return Kind.TF_EFFECT_OP
    if isinstance(obj, (np.ndarray, np.generic)):
        return Kind.HOST_DATA
    if isinstance(obj, (list, tuple)) and obj and all(
            isinstance(v, tf.Variable) or _is_keras_variable(v) for v in obj):
        return Kind.TF_OBJECT  # e.g. model.trainable_variables: read when the part is traced
    if isinstance(obj, (list, tuple)) and obj and all(_tf_callable_object(v) for v in obj):
        return Kind.TF_OBJECT  # `self.layers` of modules or layers whose calls are TF work
    if isinstance(obj, dict) and obj and all(
            isinstance(v, tf.Variable) or _is_keras_variable(v) for v in obj.values()):
        return Kind.TF_OBJECT  # params = {"w": tf.Variable(...), ...} (TF Core's guides)
    if isinstance(obj, types.ModuleType):
        return Kind.TF_MODULE if _top(obj.__name__) in ("tensorflow", "keras") else Kind.HOST
    if any(obj is maker for maker in _TF_CONTEXT_MAKERS):
        return Kind.TF_FACTORY
    if inspect.isclass(obj):
        if issubclass(obj, _TF_CONTEXTS) or _keras_loss_class(obj):
            return Kind.TF_FACTORY
        return Kind.HOST  # tf.Variable(...) and other constructors run eagerly on the host
    if getattr(type(obj), "_gpe_sliced", False):
        return Kind.SLICED_FN
    if isinstance(obj, _TF_FUNCTION):  # a tf.function, bound or not (`model.loss_func`):
        return Kind.TF_EFFECT_OP           # its graph, which may change TF state
    keras_kind = _keras_kind(obj)
    if keras_kind is not None:
        return keras_kind
    if isinstance(getattr(type(obj), "__call__", None), _TF_FUNCTION):
        # a tf.Module whose __call__ is a tf.function (the TF Core guides' MLP): calling
        # it runs its traced graph, eagerly as in the TF part
        return Kind.TF_OP
    if isinstance(obj, tf.Module):
        return _module_kind(obj)
    if callable(obj):
        module = getattr(obj, "__module__", None) or type(obj).__module__ or ""
        if obj in _CONSTANT_MAKERS:
            return Kind.TF_CONSTANT
        if _top(module) == "tensorflow" and isinstance(getattr(obj, "__self__", None),
                                                       (list, dict, set)):
            # tf.Module keeps a list or dict attribute as TF's ListWrapper/_DictWrapper
            # (`self.steps.append(loss)`): its methods are a Python list's or dict's
            return Kind.HOST_FN
        if _top(module) == "tensorflow":
            if _host_tf_utility(obj, module):
                return Kind.HOST
            return Kind.TF_EFFECT_OP if module in _EFFECT_MODULES else Kind.TF_OP
        if _keras_op(obj, module):
            return Kind.TF_OP
        if _top(module) in _HOST_MODULES or isinstance(obj, np.ufunc):
            return Kind.HOST_FN
    return Kind.HOST


def _keras_loss_class(cls: type) -> bool:
    """A Keras loss class of Keras's own (`SparseCategoricalCrossentropy`): an instance
    holds its configuration and no variables or state, so the TF part makes its own when
    traced where eager makes one every call (a metric class makes variables: host)."""
    return (keras is not None and issubclass(cls, keras.losses.Loss)
            and _top(cls.__module__ or "") == "keras")


def _keras_op(obj: Any, module: str) -> bool:
    """A Keras function that is TF work and nothing else: `keras.ops.*`, `keras.losses.*`,
    `keras.activations.*` and the metric functions (tf.keras's too; the TF backend)."""
    return (inspect.isfunction(obj) and module.startswith(_KERAS_OP_MODULES)
            and obj.__name__ not in _KERAS_HOST_FUNCTIONS)


def _top(module_name: str) -> str:
    return module_name.split(".", 1)[0]


_KERAS_LAYER_CLASS: dict[type, bool] = {}


def keras_layer_class(cls: type) -> bool:
    """Whether `cls` is a Keras layer or model class, of Keras 3 or of tf_keras (by its
    classes' modules: tf_keras need not be imported; cached per class)."""
    known = _KERAS_LAYER_CLASS.get(cls)
    if known is None:
        known = _KERAS_LAYER_CLASS[cls] = any(
            c.__module__.startswith(("keras.", "tf_keras.")) and c.__name__ == "Layer"
            for c in cls.__mro__)
    return known


def _is_keras_variable(obj: Any) -> bool:
    return keras is not None and isinstance(obj, keras.Variable)


def _keras_own(obj: Any) -> bool:
    return _top(type(obj).__module__ or "") == "keras"


# what a user's subclass of a Keras optimizer or metric may define and still behave as
# Keras's class does (`class AdamOptWrapper(optimizers.Adam)` passing its defaults on)
_CONSTRUCTION = frozenset({"__init__", "get_config", "from_config", "__module__",
                           "__qualname__", "__doc__", "__dict__", "__weakref__",
                           "__firstlineno__", "__static_attributes__"})


def _keras_behaved(obj: Any) -> bool:
    """Keras's own, or a user's subclass of it that only constructs it: every method it
    runs when called or applied is Keras's."""
    return all(_top(cls.__module__ or "") in ("keras", "tensorflow", "builtins") or
               set(vars(cls)) <= _CONSTRUCTION for cls in type(obj).__mro__)


def _keras_kind(obj: Any) -> Kind | None:
    """Kinds of Keras layers, models, optimizers and their bound methods, or None."""
    if keras is None:
        return None
    if inspect.ismethod(obj):
        owner = obj.__self__
        if isinstance(owner, (keras.layers.Layer, keras.optimizers.Optimizer,
                              keras.metrics.Metric)):
            if keras_methods.reads(obj):  # `self.compute_loss(y=y, y_pred=p)`: TF work
                # where the model and the losses it was compiled with are
                tf_work = keras_methods.tf_method(obj, _all_tf, unbuilt.seen)
                return Kind.TF_EFFECT_OP if tf_work else Kind.HOST
            if obj.__func__.__name__ in _KERAS_HOST_METHODS and _top(
                    obj.__func__.__module__ or "") == "keras":
                return Kind.HOST
            if _keras_all_the_way(owner) and _top(obj.__func__.__module__ or "") == "keras":
                # model.predict_step, opt.apply_gradients, metric.update_state, ...
                return Kind.TF_EFFECT_OP
            if _is_add_loss(obj.__func__):  # `self.add_loss(...)` in a layer's `call`: its
                return Kind.TF_EFFECT_OP     # list of losses is replayed (tfprog/losses.py)
            return Kind.HOST
        return None
    if isinstance(obj, keras.layers.Layer):
        _recurrent(obj)
        if _top(getattr(type(obj).__call__, "__module__", "") or "") != "keras":
            return _module_kind(obj)  # a user's own __call__ (older TF2 examples' models)
        return Kind.TF_EFFECT_OP if _keras_all_the_way(obj) or _all_tf(obj) else Kind.HOST
    if isinstance(obj, keras.optimizers.Optimizer):
        return Kind.TF_OBJECT if _keras_behaved(obj) else Kind.HOST
    if isinstance(obj, keras.metrics.Metric):  # calling one updates its variables
        return Kind.TF_EFFECT_OP if _keras_behaved(obj) else Kind.HOST
    if isinstance(obj, keras.losses.Loss) and _keras_own(obj):
        return Kind.TF_OP  # a loss object: calling it is TF work (functions: _keras_op)
    return None


def _recurrent(layer: Any) -> None:
    """The Keras recurrent layers in `layer`'s tree that are not unrolled (LSTM, GRU, an
    RNN): a TF part traces them unrolled (tfprog/recurrent.py: a While's gradient adds the
    per-step gradients in another order than eager's tape; unrolled, the bits are
    eager's)."""
    for sub in layer._flatten_layers(include_self=True, recursive=True):
        if isinstance(sub, keras.layers.RNN) and not sub.unroll:
            recurrent.register(sub)


def _is_add_loss(function: Any) -> bool:
    """Keras's `Layer.add_loss` (as gpe wraps it while tracing too: functools.wraps)."""
    return getattr(function, "__qualname__", "") == "Layer.add_loss" and \
        _top(getattr(function, "__module__", "") or "") == "keras"


def _keras_all_the_way(obj: Any) -> bool:
    if isinstance(obj, (keras.optimizers.Optimizer, keras.metrics.Metric)):
        return _keras_behaved(obj)
    layers = obj._flatten_layers(include_self=True, recursive=True)
    return all(_keras_own(layer) for layer in layers)


class Unbuilt(threading.local):
    """While a function is sliced (the builder enters it): user layers seen unbuilt while
    classifying (their weights do not exist yet, so their `call` cannot be judged: a plan
    sliced then is provisional, see host.builder); and what was found for each layer (by
    id, the layer kept alive meanwhile), so that a layer reached from many places (a tree
    of user layers: each is reached from every layer above it) is judged once per slice."""

    def __init__(self):
        self.seen: list | None = None
        self.memo: dict | None = None

    def __enter__(self) -> list:
        self.seen, self.memo = [], {}
        return self.seen

    def __exit__(self, *exc) -> None:
        self.seen = self.memo = None


unbuilt = Unbuilt()


_judging = threading.local()  # the layers whose `call` is being analysed, outermost first


def _stack() -> list:
    return _judging.__dict__.setdefault("stack", [])


def _depth(obj: Any) -> int:
    """Where `obj` is on the judging stack (outermost 0); the stack's height if not."""
    stack = _stack()
    return next((i for i, other in enumerate(stack) if other is obj), len(stack))


def _once(what: str, obj: Any, judge: Callable[[], Any]) -> Any:
    """`judge()`, once per slice for `obj` in this place: an answer depends on whether
    `obj` is being judged already (inside its own `call`, `self` is host work), and is kept
    only if no layer judged further out was met again inside it (then it depends on where
    it was reached from)."""
    memo, height = unbuilt.memo, len(_stack())
    if memo is None:
        return judge()
    at = _depth(obj)
    key = (what, id(obj), at < height)
    found = memo.get(key)
    if found is not None:
        return found[1]
    outer, _judging.met = getattr(_judging, "met", height), height
    try:
        answer = judge()
        if _judging.met >= at:
            memo[key] = (obj, answer)
    finally:
        _judging.met = min(outer, _judging.met)
    return answer


def _guarded(obj: Any) -> bool:
    """`obj` is being judged already (met again inside its own `call`); else it is now."""
    at = _depth(obj)
    if at < len(_stack()):
        _judging.met = min(getattr(_judging, "met", at), at)
        return True
    _stack().append(obj)
    return False


def _all_tf(layer: Any) -> bool:
    """Every layer in `layer`'s tree is Keras's own or a user's class whose `call` is all
    TF work (and which leaves `__call__` to Keras). A layer met again while its own `call`
    is analysed (`self` inside it) is not TF work there."""
    if _guarded(layer):
        return False
    try:
        return _once("layers", layer, lambda: _all_tf_below(layer))
    except AttributeError:  # a layer whose Keras __init__ has not run yet (a user's own
        return False        # __init__ being sliced, before its super().__init__())
    finally:
        _stack().pop()


def _all_tf_below(layer: Any) -> bool:
    for sub in layer._flatten_layers(include_self=True, recursive=True):
        if _keras_own(sub):
            continue
        cls = type(sub)
        if not sub.built and not _uncallable(cls):
            if unbuilt.seen is not None:
                unbuilt.seen.append(sub)
            return False
        if _top(getattr(cls.__call__, "__module__", "") or "") != "keras":
            return False
        call = cls.call
        if _top(getattr(call, "__module__", "") or "") == "keras":
            continue  # a subclass that only configures a Keras layer
        kind, why = _once("call", sub, lambda: judge_layer_call(call, sub, classify))
        if kind is None:
            _why_host[sub] = f"{type(sub).__qualname__}.call: {why}"
            return False
    return True


def _tf_callable_object(obj: Any) -> bool:
    """A module or layer whose calls are TF work (tf.keras's layers are tf.Modules,
    Keras 3's are not: `self.blocks = [Block(...), ...]` in a Keras 3 model)."""
    if not isinstance(obj, tf.Module) and not (
            keras is not None and isinstance(obj, keras.layers.Layer)):
        return False
    return classify(obj) in (Kind.TF_OP, Kind.TF_EFFECT_OP)


def _module_kind(module: Any) -> Kind:
    """A tf.Module (not Keras) called as a function: its `__call__` (TF Core's guides put
    the forward pass there) judged as a user layer's `call` is: all TF work, or HOST."""
    call = getattr(type(module), "__call__", None)
    call = getattr(call, "__wrapped__", call)  # `gpe run` wraps it
    if not inspect.isfunction(call):
        return Kind.HOST
    if _guarded(module):
        return Kind.HOST
    try:
        kind, why = _once("call", module, lambda: judge_layer_call(call, module, classify))
    finally:
        _stack().pop()
    if kind is None:
        _why_host[module] = f"{type(module).__qualname__}.__call__: {why}"
        return Kind.HOST
    return kind


def judge_layer_call(call, layer, classify):
    """slicer.layers' judgement of a user layer's `call`: the slicer's passes, loaded when
    a layer is first judged (a program that only runs bundles never imports them)."""
    return slicer.layers.judge_layer_call(call, layer, classify)


# a user's layer whose `call` was found to be host work -> why (for messages)
_why_host: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def reads(value: Any) -> tuple[tuple[str, bool], ...] | None:
    """What calling `value` in the TF part reads from its object when traced, as (path
    below the object, a Python number?) pairs the caller guards: a TF method's attributes
    (`model.compute_loss` reads `_compile_loss`), or what the `call` of a layer or module
    judged TF work reads of it and of the layers in its tree (`training`, `lin1.rate`).
    None where a layer of the tree read a number no attribute path from `value` reaches
    (a layer in a list): the call stays on the host. Of a Keras layer only the numbers:
    a built one refuses new sublayers."""
    if inspect.ismethod(value):
        return tuple((attr, False) for attr in keras_methods.reads(value))
    if isinstance(value, tf.Module) and not _keras_layer(value):
        tree = [value, *value.submodules]
    elif _keras_layer(value):
        tree = value._flatten_layers(include_self=True, recursive=True)
    else:
        return ()
    out = []
    for sub in tree:
        # (a built Keras layer refuses new sublayers: only its numbers can change)
        own = [(p, n) for p, n in slicer.layers.READS.get(sub, ())
               if n or not _keras_layer(sub)]
        if not own:
            continue
        base = "" if sub is value else _path_to(value, sub)
        if base is None and any(number for _, number in own):
            call = getattr(type(sub).call, "__code__", None)
            where = f" ({os.path.basename(call.co_filename)}:{call.co_firstlineno})" \
                if call is not None else ""
            read = next(p for p, number in own if number)
            _why_host[sub] = (f"{type(sub).__qualname__}.call{where} reads a Python number "
                              f"from the layer (`self.{read}`), which its trace would freeze, "
                              "and no attribute path from the model reaches the layer to "
                              "guard it (a layer in a list or a functional model's graph)")
            return None
        if base is None:
            continue  # (objects of a module in a list: as the list's own guard leaves them)
        out += [(base + path, number) for path, number in own]
    return tuple(out)


def _keras_layer(value: Any) -> bool:
    return keras is not None and isinstance(value, keras.layers.Layer)


def _path_to(top: Any, sub: Any, depth: int = 3) -> str | None:
    """"a.b." where `top.a.b is sub` (attributes holding layers or modules), or None."""
    todo = [(top, "")]
    for _ in range(depth):
        found = []
        for obj, prefix in todo:
            for name, held in getattr(obj, "__dict__", {}).items():
                if held is sub:
                    return f"{prefix}{name}."
                if isinstance(held, tf.Module) or _keras_layer(held):
                    found.append((held, f"{prefix}{name}."))
        todo = found
    return None


def plan_type(value: Any) -> Any:
    """What a plan depends on of an object it captured (a plan is shared by calls whose
    captures give equal answers): its type; for an object judged per instance, the object
    itself, weakly (equal while alive, never a later object's): a layer, model or module
    (judged by its own sublayers: another model of the same class whose layer prints took
    the plan sliced for the first, and the print ran only while tracing), a compiled loss
    (keras_methods)."""
    if isinstance(value, tf.Module) or (keras is not None and isinstance(
            value, keras.layers.Layer)) or keras_methods.judged_by_instance(value):
        return type(value), weakref.ref(value)
    return type(value)


def why_host(obj: Any) -> str | None:
    """Why calling `obj` (a Keras layer or model) is host work, where a layer in it was
    judged so (`ActivityRegularization.call: `self.add_loss(...)` (file:line) runs on the
    host`); else None."""
    if isinstance(obj, tf.Module) and not (keras and isinstance(obj, keras.layers.Layer)):
        return _why_host.get(obj)
    if keras is None or not isinstance(obj, keras.layers.Layer):
        return None
    try:
        layers = obj._flatten_layers(include_self=True, recursive=True)
        return next((_why_host[sub] for sub in layers if sub in _why_host), None)
    except TypeError:  # a layer without weak references
        return None


def _uncallable(cls: type) -> bool:
    """A user's Keras class that keeps Keras's abstract `call` (a model used only through
    its own methods, `vae.encode(x)`): calling it never builds it, so `built` stays False;
    its weights are its sublayers', each judged on its own."""
    return cls.call is keras.Model.call or cls.call is keras.layers.Layer.call
