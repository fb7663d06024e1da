"""The host's half of tfprog/losses.py: after a sliced call, the Python lists of losses of
the layers its TF part called hold that call's values, as an eager call leaves them.

`Replay.ran` (the TF part ran the whole call) clears each model's lists and appends
`Pending`s received in FIFO order from each loss's queue: nothing waits for the graph.
`Replay.stopped` (the call left early, raised, or was finished eagerly: how far the TF
part got is the graph's) waits for the graph, then replays the model calls whose losses
their queues hold.
"""
from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops

from .channel import HostChannel
from ...tfprog.channels import ValueSpec
from ...tfprog.losses import Added


class Replay:
    def __init__(self, events: list, session):
        self.events, self.session = events, session
        self.channels = {}
        for event in events:
            if isinstance(event, Added):
                _drain(event.queue)  # left by calls of a failed generation
                layer = event.layer()
                self.channels[id(event)] = HostChannel(
                    event.queue, [event.dtype], [ValueSpec(event.dtype, event.shape)],
                    f"the loss {getattr(layer, 'name', '?')!r} added", session)

    def ran(self) -> None:
        for event in self.events:
            layer = event.layer()
            if isinstance(event, Added):
                pending = self.channels[id(event)].recv()
                if layer is not None:
                    layer._losses.append(pending)  # noqa: SLF001 (Keras's own list)
            elif layer is not None:
                layer._clear_losses()  # noqa: SLF001

    def stopped(self) -> None:
        try:
            self.session.fence()
            if self.session.failed:
                return
            ready = [self._has_value(e) for e in self.events]
            for i, event in enumerate(self.events):
                layer = event.layer()
                if isinstance(event, Added):
                    if not ready[i]:
                        continue
                    value = self.channels[id(event)].recv_now()[0]
                    if layer is not None:
                        layer._losses.append(value)  # noqa: SLF001
                elif layer is not None and any(ready[i + 1:]):
                    layer._clear_losses()  # noqa: SLF001
        except (tf.errors.OpError, RuntimeError):  # the session failed meanwhile
            pass

    def _has_value(self, event) -> bool:
        """This call's value of an added loss is in its queue (after the fence)."""
        if not isinstance(event, Added):
            return False
        channel = self.channels[id(event)]
        size = int(gen_data_flow_ops.queue_size_v2(event.queue.queue_ref))
        return size > len(channel._waiting)  # noqa: SLF001 (values earlier calls own)


def _drain(queue: tf.queue.FIFOQueue) -> None:
    for _ in range(int(gen_data_flow_ops.queue_size_v2(queue.queue_ref))):
        gen_data_flow_ops.queue_dequeue_v2(queue.queue_ref, queue.dtypes)
