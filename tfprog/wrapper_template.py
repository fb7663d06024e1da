"""A part's sink wrapper written as FunctionDefs, not traced (see sink.wrapper).

The wrapper of a part (sink.py: `wrapper`, `dispatched`) has the same nodes for every
part but for what its signature gives: how many handles it takes from the packed
resources, which of them it reads as a variable's value, its dispatch queue's dtypes, its
relay queue and the part it calls. Traced in Python it cost a new part's first call about
15 ms of CPU (a tf.function with a tf.cond, whose two branches are traced too); written
here from the part's FunctionDef signature it costs well under a millisecond. The nodes
are the traced wrapper's: the handles sliced from the packed vector and unstacked, the
values of held tensors read, the word and entry values dequeued from the dispatch queue,
then an `If` (lowered to Switch/Merge, as tf.cond's) on word == RUN whose true branch
relays the values into the relay queue, calls the part and returns the word, and whose
false branch returns the word (a switch or STOP).

`build` returns None where the part's signature does not fit these nodes (a capture the
wrapper would capture itself): sink.wrapper traces that one.
"""
from __future__ import annotations

import itertools
from typing import Sequence

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, \
    tensor_shape_pb2, types_pb2
from tensorflow.core.function.polymorphism import function_type as function_type_lib
from tensorflow.python.eager.polymorphic_function import atomic_function
from tensorflow.python.framework import ops, tensor_util

from .exact import _options
from .sink_template import RUN

MADE = {"wrappers": 0}  # wrappers written here (tests count them; traced ones: sink.TRACES)
_serial = itertools.count()
_INT, _RESOURCE = types_pb2.DT_INT32, types_pb2.DT_RESOURCE


class TemplatedWrapper:
    """What sink.build_sink uses of a wrapper (its FunctionDef's name, no captures), and
    what a bundle's export takes of it (`graph.as_graph_def().library`: its branches).
    Holds the registered functions: they leave the eager context with it."""

    captured_inputs: list = []

    def __init__(self, fdef, branches: list, held: list):
        self.function_def = fdef
        self._branches = branches
        self._held = held  # the AtomicFunctions (branches first): registered while held
        self.graph = self  # (export: `wrapper.graph.as_graph_def()`)

    def __call__(self, packed, offset):
        """Its call inside a sink traced in Python (sink._traced_sink: another part's
        wrapper captures a value itself), by name, as a traced wrapper's call would be."""
        graph = ops.get_default_graph()
        for atomic in self._held:
            graph._add_function_recursive(atomic)  # noqa: SLF001 (what a call does)
        config = _options()
        return atomic_function.partitioned_call_op(
            name=self.function_def.signature.name, args=[packed, offset], is_stateful=True,
            tout=[_INT], config=config.config_proto_serialized,
            executor_type=config.executor_type or "").outputs[0]

    def as_graph_def(self) -> graph_pb2.GraphDef:
        graph = graph_pb2.GraphDef()
        graph.library.function.extend(self._branches)
        return graph


def build(function, count: int, dispatch: tuple, held: list) -> TemplatedWrapper | None:
    """The wrapper of `function` (a ConcreteFunction, registered) taking `count` queue
    handles from the packed vector (see sink.wrapper), or None where it does not fit."""
    if any(h is None for h in held):
        return None
    entry, dtypes = dispatch
    signature = function.function_def.signature
    queues = count - 1 - (entry is not None)
    inputs = [arg.type for arg in signature.input_arg]
    if len(inputs) != queues + len(held) or any(t != _RESOURCE for t in inputs[:queues]):
        return None
    for kind, h, c in zip(inputs[queues:], held, function.captured_inputs):
        if kind != (_RESOURCE if h is True else c.dtype.as_datatype_enum):
            return None
    register = getattr(function, "register", None)  # a bundle's part: its FunctionDefs
    if register is not None:                          # into the eager context (a traced
        register()                                    # one's are there from its trace)
    MADE["wrappers"] += 1
    serial = next(_serial)
    name = f"gpe_call_{signature.name}_t{serial}"
    values = [tf.as_dtype(d).as_datatype_enum for d in dtypes]
    # the If's inputs: the word, the relay queue and the values, the part's arguments
    branch_types = [_INT] + ([_RESOURCE] + values if entry is not None else []) + inputs
    outputs = [arg.type for arg in signature.output_arg]
    then = _then(f"{name}_run", branch_types, entry is not None, len(values), dtypes,
                 signature.name, inputs, outputs)
    otherwise = _else(f"{name}_skip", branch_types)
    fdef = _wrapper(name, count, entry, values, held, function.captured_inputs, inputs,
                    branch_types, then.signature.name, otherwise.signature.name)
    registered = [atomic_function.from_function_def(f, function_type_lib.FunctionType([]))
                  for f in (then, otherwise, fdef)]
    return TemplatedWrapper(fdef, [then, otherwise], registered)


def _wrapper(name, count, entry, values, held, captures, inputs, branch_types, then_name,
             else_name) -> function_pb2.FunctionDef:
    fdef = _function(name, [("packed", _RESOURCE), ("offset", _INT)], [("word", _INT)])
    taken = count + len(held)
    _node(fdef, "taken", "Const", [], dtype=_type(_INT), value=_tensor(taken, tf.int32))
    _node(fdef, "end", "AddV2", ["offset", "taken:output:0"], T=_type(_INT))
    _node(fdef, "begin_at", "Pack", ["offset"], T=_type(_INT), N=_int(1), axis=_int(0))
    _node(fdef, "end_at", "Pack", ["end:z:0"], T=_type(_INT), N=_int(1), axis=_int(0))
    _node(fdef, "stride", "Const", [], dtype=_type(_INT), value=_tensor([1], tf.int32))
    _node(fdef, "mine", "StridedSlice", ["packed", "begin_at:output:0", "end_at:output:0",
                                         "stride:output:0"],
          T=_type(_RESOURCE), Index=_type(_INT), begin_mask=_int(0), end_mask=_int(0),
          ellipsis_mask=_int(0), new_axis_mask=_int(0), shrink_axis_mask=_int(0))
    _node(fdef, "handles", "Unpack", ["mine:output:0"], T=_type(_RESOURCE),
          num=_int(taken), axis=_int(0))
    mine = [f"handles:output:{i}" for i in range(taken)]
    own = mine[1:count] if entry is None else mine[2:count]
    if entry is not None:
        own[entry] = mine[1]  # the relay queue stands in for the entry queue
    args, rest = list(own), iter(mine[count:])
    for i, (h, c) in enumerate(zip(held, captures)):
        if h is True:
            args.append(next(rest))
        else:  # a tensor the part captured by value: the variable holding it, read
            _node(fdef, f"read_{i}", "ReadVariableOp", [next(rest)],
                  dtype=_type(c.dtype.as_datatype_enum))
            args.append(f"read_{i}:value:0")
    _node(fdef, "dequeued", "QueueDequeueV2", [mine[0]],
          component_types=_types([_INT] + values), timeout_ms=_int(-1))
    _node(fdef, "no_shape", "Const", [], dtype=_type(_INT), value=_tensor([], tf.int32))
    _node(fdef, "taken_word", "Reshape", ["dequeued:components:0", "no_shape:output:0"],
          T=_type(_INT), Tshape=_type(_INT))
    _node(fdef, "run", "Const", [], dtype=_type(_INT), value=_tensor(RUN, tf.int32))
    _node(fdef, "is_run", "Equal", ["taken_word:output:0", "run:output:0"], T=_type(_INT),
          incompatible_shape_error=attr_value_pb2.AttrValue(b=True))
    relayed = [mine[1]] + [f"dequeued:components:{i + 1}" for i in range(len(values))] \
        if entry is not None else []
    _node(fdef, "cond", "If", ["is_run:z:0", "taken_word:output:0"] + relayed + args,
          Tcond=_type(types_pb2.DT_BOOL), Tin=_types(branch_types), Tout=_types([_INT]),
          then_branch=_func(then_name), else_branch=_func(else_name),
          output_shapes=_shapes(1), _lower_using_switch_merge=attr_value_pb2.AttrValue(b=True))
    _node(fdef, "word", "Identity", ["cond:output:0"], T=_type(_INT))
    fdef.ret["word"] = "word:output:0"
    for stateful in ("dequeued", "cond"):
        fdef.signature.control_output.append(stateful)
        fdef.control_ret[stateful] = stateful
    return fdef


def _then(name, branch_types, relays, n_values, dtypes, part, inputs, outputs):
    """The If's true branch: relay the entry values, call the part, return the word."""
    names = ["word"] + (["relay"] + [f"value_{i}" for i in range(n_values)] if relays else [])
    names += [f"arg_{i}" for i in range(len(inputs))]
    fdef = _function(name, list(zip(names, branch_types)), [("word_out", _INT)])
    after = []
    if relays:
        _node(fdef, "relayed", "QueueEnqueueV2", names[1:2 + n_values],
              Tcomponents=_types([tf.as_dtype(d).as_datatype_enum for d in dtypes]),
              timeout_ms=_int(-1))
        after = ["^relayed"]
    config = _options()
    _node(fdef, "called", "StatefulPartitionedCall", names[len(names) - len(inputs):] + after,
          Tin=_types(inputs), Tout=_types(outputs), f=_func(part),
          config=attr_value_pb2.AttrValue(s=b""),
          config_proto=attr_value_pb2.AttrValue(s=config.config_proto_serialized),
          executor_type=attr_value_pb2.AttrValue(s=(config.executor_type or "").encode()))
    _node(fdef, "word_out", "Identity", ["word", "^called"], T=_type(_INT))
    fdef.ret["word_out"] = "word_out:output:0"
    for stateful in (["relayed"] if relays else []) + ["called"]:
        fdef.signature.control_output.append(stateful)
        fdef.control_ret[stateful] = stateful
    return fdef


def _else(name, branch_types):
    """The If's false branch: the word (a switch or STOP), nothing run."""
    names = ["word"] + [f"unused_{i}" for i in range(len(branch_types) - 1)]
    fdef = _function(name, list(zip(names, branch_types)), [("word_out", _INT)])
    _node(fdef, "word_out", "Identity", ["word"], T=_type(_INT))
    fdef.ret["word_out"] = "word_out:output:0"
    return fdef


# FunctionDef pieces -------------------------------------------------------------------
def _function(name: str, inputs: list, outputs: list) -> function_pb2.FunctionDef:
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = name
    fdef.signature.is_stateful = True
    for arg, kind in inputs:
        fdef.signature.input_arg.add(name=arg, type=kind)
    for arg, kind in outputs:
        fdef.signature.output_arg.add(name=arg, type=kind)
    return fdef


def _node(fdef, name: str, op: str, inputs: Sequence[str], **attrs) -> None:
    node = fdef.node_def.add(name=name, op=op)
    node.input.extend(inputs)
    for key, value in attrs.items():
        node.attr[key].CopyFrom(value)


def _type(kind) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(type=kind)


def _types(kinds) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(type=kinds))


def _int(value: int) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(i=value)


def _func(name: str) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=name))


def _tensor(value, dtype) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(tensor=tensor_util.make_tensor_proto(value, dtype))


def _shapes(n: int) -> attr_value_pb2.AttrValue:
    """n scalar shapes."""
    return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(
        shape=[tensor_shape_pb2.TensorShapeProto() for _ in range(n)]))
