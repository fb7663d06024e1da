"""Sink templates: the sink's FunctionDefs traced once per process, filled per part set.

A template is the sink program (see sink.py) for its kind, traced with a stand-in wrapper
(`gpe_sink_dummy`): kind "one" calls that wrapper by name (TensorFlow inlines the call,
as it does a traced call), kind "case" picks among wrappers with a `Case` op whose
branches name them (not lowered to Switch/Merge: that costs every call a little for every
part); a wrapper returns the word it took from its part's dispatch queue (RUN, STOP or
the part to go on to: see sink.dispatched). Its arguments: the control queue (which
gives the first part only), the acknowledgement queue (when acked), the packed
resources, each part's offset into them, the timer variable (when timed).
`instantiate` copies the template's loop body and sink with the real wrapper names in
place of the stand-in's, under new names, and registers them: no Python runs.

A bundle carries the templates (`export`) so that a program that only loads bundles
traces none (`adopt`, with the config attributes of this process's calls put in).
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

import tensorflow as tf
from tensorflow.core.framework import function_pb2
from tensorflow.python.eager import context
from tensorflow.python.ops import gen_data_flow_ops, gen_functional_ops, \
    gen_resource_variable_ops
from tensorflow.python.ops import control_flow_util_v2

from .exact import exact_arithmetic

TRACES = {"template": 0, "wrapper": 0, "sink": 0}  # Python traces made (see sink.py)
# the words a part's dispatch queue carries first (sink.dispatched): run the call whose
# entry values follow; end the sink; a number >= 0: the sink goes on to that part
RUN, STOP = -2, -1
PROTOCOL = "dispatch"  # in a bundle's template keys: templates of this protocol
DUMMY = "gpe_sink_dummy"
KINDS = [(kind, timed, acked) for kind in ("one", "case")
         for timed in (False, True) for acked in (True, False)]
_CALLS = ("PartitionedCall", "StatefulPartitionedCall")


@dataclass
class Template:
    sink: function_pb2.FunctionDef
    body: function_pb2.FunctionDef
    cond: function_pb2.FunctionDef
    dummy: str  # the stand-in wrapper's name in body


_templates: dict[tuple, Template] = {}
_lock = threading.Lock()
_serial = itertools.count()
_held: list = []  # what the traced templates registered (cond, stand-in): kept registered


def loop_body(run_one, timer=None, acks=None):
    """The while loop's body: part `index` takes the word its dispatch queue holds next
    (`run_one` returns it; see sink.dispatched), run its call if RUN, time it,
    acknowledge it; the next part is the same one after RUN, else the one the word names
    (a switch; STOP ends the loop)."""
    def body(index):
        if timer is None:
            word = run_one(index)
        else:
            with tf.control_dependencies([index]):
                start = tf.timestamp()
            with tf.control_dependencies([start]):
                word = run_one(index)
            with tf.control_dependencies([word]):
                elapsed = tf.timestamp() - start
            ran = tf.cast(tf.equal(word, RUN), tf.float64)  # a call, not a switch
            add = gen_resource_variable_ops.assign_add_variable_op(
                timer, tf.stack([elapsed * ran, ran]))
            with tf.control_dependencies([add]):
                word = tf.identity(word)
        following = tf.where(tf.equal(word, RUN), index, word)
        if acks is not None:
            with tf.control_dependencies([word]):
                acked = gen_data_flow_ops.queue_enqueue_v2(acks, [tf.reshape(index, [])])
            with tf.control_dependencies([acked]):
                following = tf.identity(following)
        return following
    return body


def instantiate(kind: str, timed: bool, acked: bool, wrappers: list[str]) -> list[str]:
    """Register a sink of this kind calling `wrappers`; (body name, sink name)."""
    template = _template(kind, timed, acked)
    serial = next(_serial)
    body = function_pb2.FunctionDef()
    body.CopyFrom(template.body)
    body.signature.name = f"{template.body.signature.name}_gpe{serial}"
    for node in body.node_def:
        if node.op in _CALLS and node.attr["f"].func.name == template.dummy:
            node.op = "StatefulPartitionedCall"
            node.attr["f"].func.name = wrappers[0]
        elif node.op in ("Case", "StatelessCase"):
            del node.attr["branches"].list.func[:]
            for name in wrappers:
                node.attr["branches"].list.func.add(name=name)
    sink = function_pb2.FunctionDef()
    sink.CopyFrom(template.sink)
    sink.signature.name = f"gpe_sink_{serial}"
    for node in sink.node_def:
        if "body" in node.attr and node.attr["body"].func.name == template.body.signature.name:
            node.attr["body"].func.name = body.signature.name
    ctx = context.context()
    if not ctx.has_function(template.cond.signature.name):  # a bundle's, first used
        ctx.add_function_def(template.cond)
    ctx.add_function_def(body)
    ctx.add_function_def(sink)
    return [body.signature.name, sink.signature.name]


def _template(kind: str, timed: bool, acked: bool) -> Template:
    key = (kind, timed, acked)
    template = _templates.get(key)
    if template is None:
        with _lock:
            template = _templates.get(key) or _trace(kind, timed, acked)
            _templates[key] = template
    return template


def _trace(kind: str, timed: bool, acked: bool) -> Template:
    TRACES["template"] += 1
    resource = tf.TensorSpec([], tf.resource)
    signature = [resource] + [resource] * acked + [tf.TensorSpec([None], tf.resource),
                                                   tf.TensorSpec([None], tf.int32)] + \
        [resource] * timed
    with exact_arithmetic():
        dummy = _dummy()
        name = dummy.function_def.signature.name

        def gpe_sink(control, *rest):
            acks = rest[0] if acked else None
            packed, offsets = rest[acked], rest[acked + 1]
            timer = rest[-1] if timed else None

            def run_one(index):
                offset = tf.gather(offsets, index)
                if kind == "one":
                    return dummy(packed, offset)
                out = gen_functional_ops.case(index, [packed, offset], [tf.int32], [name],
                                              output_shapes=[tf.TensorShape([])])
                control_flow_util_v2.maybe_set_lowering_attr(out[0].op,
                                                             lower_using_switch_merge=False)
                return out[0]

            first = gen_data_flow_ops.queue_dequeue_v2(control, [tf.int32])[0]
            body = loop_body(run_one, timer, acks)
            return tf.while_loop(lambda i: i >= 0, body, [tf.reshape(first, [])],
                                 parallel_iterations=1)

        traced = tf.function(gpe_sink, input_signature=signature,
                             autograph=False).get_concrete_function()
    sink = traced.function_def
    ctx = context.context()
    while_node = next(n for n in sink.node_def if n.op in ("While", "StatelessWhile"))
    body = ctx.get_function_def(while_node.attr["body"].func.name)
    cond = ctx.get_function_def(while_node.attr["cond"].func.name)
    _held.extend([traced, dummy])
    return Template(sink, body, cond, name)


def _dummy():
    def gpe_sink_dummy(packed, offset):
        return tf.constant(0, tf.int32)
    return tf.function(gpe_sink_dummy, input_signature=[tf.TensorSpec([None], tf.resource),
                                                        tf.TensorSpec([], tf.int32)],
                       autograph=False).get_concrete_function()


# carried by bundles ---------------------------------------------------------------------
def export() -> tuple[dict, list]:
    """({kind key: {"sink", "body", "cond", "dummy": FunctionDef name}}, the FunctionDefs):
    every template, for a bundle to carry."""
    index, fdefs = {}, []
    for key in KINDS:
        template = _template(*key)
        dummy = context.context().get_function_def(template.dummy)
        index[",".join(str(k) for k in key + (PROTOCOL,))] = {
            "sink": template.sink.signature.name, "body": template.body.signature.name,
            "cond": template.cond.signature.name, "dummy": template.dummy}
        fdefs += [template.sink, template.body, template.cond, dummy]
    return index, fdefs


def adopt(index: dict, library: dict, call_attrs: dict) -> None:
    """Use a bundle's templates for the kinds not traced yet: `index` as export gave it
    (renamed), `library` the bundle's FunctionDefs by name; call_attrs: this process's
    attributes for a call's config (put in place of those the extraction wrote)."""
    for key, names in index.items():
        kind, timed, acked, *protocol = key.split(",")
        key = (kind, timed == "True", acked == "True")
        if key in _templates or key not in KINDS or protocol != [PROTOCOL]:
            continue  # (a bundle extracted before the sink's protocol: traced here)
        with _lock:
            if key in _templates:
                continue
            body = function_pb2.FunctionDef()
            body.CopyFrom(library[names["body"]])
            set_call_attrs(body, call_attrs)
            cond = library[names["cond"]]  # registered when first used (instantiate)
            _templates[key] = Template(library[names["sink"]], body, cond, names["dummy"])


def set_call_attrs(fdef, call_attrs: dict) -> None:
    """Give every call node of `fdef` (in place) this process's call attributes."""
    for node in fdef.node_def:
        if node.op in _CALLS:
            for name, value in call_attrs.items():
                if name in node.attr:
                    node.attr[name].s = value if isinstance(value, bytes) else value.encode()
