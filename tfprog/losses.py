"""Losses a Keras layer adds while a TF part runs, handed to the host after each call.

Eagerly, a model call clears its layers' Python lists of losses, and each `add_loss`
(`self.add_loss(...)` in a layer's `call`; an activity regularizer) appends a tensor:
after the call `model.losses` holds that call's values. Traced once into a TF part, the
lists would hold the trace's symbolic tensors from then on. So while a part is traced
(`recording(recorder)`), the outermost `_clear_losses` of a model call and each
`add_loss` are recorded in order (`Recorder.events`), and each loss added is also put
into a queue of its own (made outside the graph: the host reads it). After each sliced
call the host replays them (host/runtime/losses.py): the lists are cleared and filled with the
call's values, received in FIFO order as `Pending`s.

An `add_loss` the part does not run exactly once per call that the host did not cancel
(one inside a branch or a loop of the TF part, or in a function of its own; a gate's
segment is fine: `Recorder.onward`) cannot be replayed: the part is refused. So is a
replicated part's (tfprog/replica_part.py).
"""
from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf
from tensorflow.python.distribute import mirrored_run
from tensorflow.python.ops import gen_data_flow_ops

try:
    from keras.src.layers.layer import Layer
except ImportError:  # no Keras 3: nothing to intercept
    Layer = None


@dataclass
class Added:
    """One loss a traced layer added: replayed as the value its queue receives."""

    layer: weakref.ref
    queue: tf.queue.FIFOQueue
    dtype: tf.DType
    shape: tuple


@dataclass
class Cleared:
    """The outermost layer of a model call cleared its tree's lists of losses."""

    layer: weakref.ref


@dataclass
class Recorder:
    graph: Any = None  # the part's own graph (set when its trace starts)
    events: list = field(default_factory=list)
    refused: str | None = None
    cleared_elsewhere: str | None = None  # a model called in a branch, loop or function
    depth: int = 0     # _clear_losses recursing into sublayers
    saved: list = field(default_factory=list)  # (layer, its list before the trace)
    onward_graphs: list = field(default_factory=list)  # see onward

    def save(self, layers) -> None:
        """Keep the lists the trace changes: the trace leaves them as they were (its
        symbolic tensors are no call's losses)."""
        for layer in layers:
            if not any(layer is kept for kept, _ in self.saved):
                self.saved.append((layer, list(layer._losses)))  # noqa: SLF001

    def restore(self) -> None:
        for layer, losses in self.saved:
            layer._losses[:] = losses  # noqa: SLF001
        self.saved.clear()

    def onward(self, segment):
        """`segment` runs the rest of the call in a `tf.cond` that only a cancellation by
        the host skips (a gate; tfprog/part.py): its graph counts as the part's own."""
        def run(*args):
            self.onward_graphs.append(tf.compat.v1.get_default_graph())
            return segment(*args)
        return run

    def once_per_call(self) -> bool:
        """The current graph runs once per call that is not cancelled: the part's own, or
        a gate's segment in it."""
        graph = tf.compat.v1.get_default_graph()
        while graph is not self.graph and self.graph is not None:  # (None: a replica trace's)
            if not any(graph is g for g in self.onward_graphs):
                return False
            graph = getattr(graph, "outer_graph", None)
        return True

    @property
    def added(self) -> list[Added]:
        return [e for e in self.events if isinstance(e, Added)]


_lock = threading.RLock()
_recording: dict[int, Recorder] = {}  # thread id -> the recorder of the part it traces
_originals: dict[str, Any] = {}


class recording:
    """Around the trace of a part on this thread."""

    def __init__(self, recorder: Recorder):
        self.recorder = recorder

    def __enter__(self):
        if Layer is None:
            return self.recorder
        with _lock:
            if not _recording:
                _patch()
            _recording[threading.get_ident()] = self.recorder
        return self.recorder

    def __exit__(self, *exc):
        if Layer is None:
            return
        self.recorder.restore()
        with _lock:
            _recording.pop(threading.get_ident(), None)
            if not _recording:
                _unpatch()


def _patch() -> None:
    for name, wrap in (("add_loss", _add_loss), ("_clear_losses", _clear_losses),
                       ("_get_own_losses", _get_own_losses)):
        original = Layer.__dict__[name]
        _originals[name] = original
        setattr(Layer, name, functools.wraps(original)(wrap(original)))


def _unpatch() -> None:
    for name, original in _originals.items():
        setattr(Layer, name, original)
    _originals.clear()


def _recorder() -> Recorder | None:
    """The recorder of the part this thread traces; for a replica thread of a
    MirroredStrategy traced in a part (tfprog/replica_part.py), the one part being traced."""
    recorder = _recording.get(threading.get_ident())
    if recorder is None and isinstance(threading.current_thread(),
                                       mirrored_run._MirroredReplicaThread):  # noqa: SLF001
        with _lock:
            recorders = list(_recording.values())
        recorder = recorders[0] if len(recorders) == 1 else None
    return recorder


def _traced(recorder: Recorder | None) -> bool:
    return recorder is not None and not tf.executing_eagerly()


def _add_loss(original):
    def add_loss(layer, loss):
        recorder = _recorder()
        if not _traced(recorder):
            return original(layer, loss)
        recorder.save([layer])
        result = original(layer, loss)
        if not recorder.once_per_call():
            recorder.refused = (f"{type(layer).__name__} {layer.name!r} adds a loss inside a "
                                "branch, a loop or a function of the TF part (each call's "
                                "`.losses` could not be told)")
            return result
        for value in tf.nest.flatten(loss):
            tensor = tf.convert_to_tensor(value)
            with tf.init_scope():  # the queue lives outside the graph: the host reads it
                queue = tf.queue.FIFOQueue(-1, [tensor.dtype])
            gen_data_flow_ops.queue_enqueue_v2(queue.queue_ref, [tensor])
            recorder.events.append(Added(weakref.ref(layer), queue, tensor.dtype,
                                         tuple(tensor.shape.as_list()) if
                                         tensor.shape.rank is not None else None))
        return result
    return add_loss


def _clear_losses(original):
    def clear_losses(layer):
        recorder = _recorder()
        if not _traced(recorder):
            return original(layer)
        if recorder.depth == 0:
            recorder.save(layer._flatten_layers(include_self=True, recursive=True))
            if not recorder.once_per_call():  # (matters only where losses are added)
                recorder.cleared_elsewhere = (f"{type(layer).__name__} {layer.name!r} is called inside "
                                    "a branch, a loop or a function of the TF part and its "
                                    "`.losses` are cleared there")
            recorder.events.append(Cleared(weakref.ref(layer)))
        recorder.depth += 1
        try:
            return original(layer)
        finally:
            recorder.depth -= 1
    return clear_losses


def refusal(recorder: Recorder, plan, nested: list) -> str | None:
    """Why a part whose layers add losses cannot be sliced, or None. The host replays a
    call's losses when the call ends: host code of the same function that reads `.losses`
    after the model call would read the call before's; and a callee's part run by this
    part (a nested call) has its replay at its own host's end, which may be cut short."""
    if recorder.refused:
        return recorder.refused
    if any(p is not None and any(isinstance(e, Added) for e in p.losses) for p in nested):
        return "a function it calls runs a layer that adds losses (`add_loss`) in its TF part"
    if not recorder.added:
        return None
    if recorder.cleared_elsewhere:
        return recorder.cleared_elsewhere
    for line in plan.lines:
        first = line.source.splitlines()[0] if line.source else ""
        if line.place == "host" and ".losses" in first:
            return (f"`{first.strip()}` ({plan.where(line.lineno)}) reads `.losses` on the "
                    "host, and a layer called in the TF part adds losses (`add_loss`)")
    return None


def _get_own_losses(original):
    def get_own_losses(layer):
        recorder = _recorder()
        if _traced(recorder) and any(isinstance(t, tf.Tensor) and not hasattr(t, "graph")
                                     or hasattr(t, "_gpe_pending") for t in layer._losses):
            recorder.refused = (f"`.losses` of {type(layer).__name__} {layer.name!r} is read "
                                "before the model call adds this call's (the TF part would "
                                "keep the values of the call it was traced after)")
        return original(layer)
    return get_own_losses
