"""Order across a loop's back edge, for the TF part of a loop the host runs (MIRROR).

The host's first statement in an iteration comes, in program order, after the TF work
that ended the iteration before: a `tf.print`, an op that can fail. The slicer puts a
check on it (slicer/crossings.py: `_check_after_back_edge`), but when the TF part is
traced that check comes before the body's TF work, so it cannot yet tell whether there
is any to wait for. `Iterations` keeps it pending until the body is traced: where the body
ends with such work unwaited for, the check's token is sent in each iteration after that
work of the iteration before, by construction: the next iteration's flag is received only
once that work is done, and every wait in the body sends its token after the flag.
(Found as a `print` and a `tf.print` in a tensor `while` printing out of eager's order now
and then: the host printed on while the graph's print of the iteration before ran.)
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops


@dataclass
class _Body:
    """One loop body being traced: its graph, the flag its iteration started with, and its
    first wait (a check or barrier of its own graph): (channel, its dependencies, sent)."""

    graph: object
    flag: tf.Tensor
    first: tuple | None = None
    queues: tuple = field(default=())


class Iterations:
    """The loop bodies being traced, innermost last (one per TraceRuntime)."""

    def __init__(self):
        self.bodies: list[_Body] = []

    @contextlib.contextmanager
    def body(self, runtime, queues, flag):
        """While `step` traces one iteration, whose flag (a loop variable) is `flag`; gives
        the list that holds, once the body is traced, its ops the next flag waits for."""
        self.bodies.append(_Body(tf.compat.v1.get_default_graph(), flag, queues=queues))
        left: list = []
        try:
            yield left
            runtime._note_failing_ops()  # noqa: SLF001 (the runtime's own bookkeeping)
            left += self._finish(runtime.unchecked, runtime.waits)
        finally:
            self.bodies.pop()

    def _here(self) -> _Body | None:
        """The body traced now, if the op being built is in its own graph (not in a
        branch's or segment's nested in it)."""
        if self.bodies and self.bodies[-1].graph is tf.compat.v1.get_default_graph():
            return self.bodies[-1]
        return None

    def after(self) -> list:
        """What a wait sends its token after besides the work before it: the flag of the
        iteration (so the work of the iteration before, see `_finish`)."""
        body = self._here()
        if body is None:
            return []
        if body.first is None:
            body.first = (None, (), True)
        return [body.flag]

    def pending(self, index: int, deps: list) -> None:
        """A check with nothing before it in the body to wait for: if it is the body's first
        wait, it may have to wait for the iteration before (decided by `_finish`)."""
        body = self._here()
        if body is not None and body.first is None:
            body.first = (index, tuple(deps), False)

    def _finish(self, left: list, waits: set) -> list:
        """The body is traced: `left` holds its ops that can fail or write output and that
        no wait in it waited for. The body's first wait, if pending, then waits for them
        (of the iteration before), and the next flag is received after them (see `body`)."""
        body = self.bodies[-1]
        left = [op for op in left if op.graph is body.graph]
        if left and body.first is not None and not body.first[2]:
            index, deps, _ = body.first
            with tf.control_dependencies([*deps, body.flag]):
                gen_data_flow_ops.queue_enqueue_v2(body.queues[index], [tf.constant(True)])
            waits.add(index)
        return left
