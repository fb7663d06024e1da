"""tf.distribute: where a call is made from.

MirroredStrategy runs `strategy.run(fn)` once per replica, each in a thread of its own;
the threads meet at every cross-replica step (`merge_call`: an optimizer's all-reduce,
`ReplicaContext.all_reduce`). A sliced call made there must neither wait on another
replica's call nor send anything a graph would not see once per replica.
"""
from __future__ import annotations

from tensorflow.python.distribute import distribute_lib
from tensorflow.python.framework import ops


def in_replica_context() -> bool:
    """Inside a non-default strategy's replica context (a replica thread of strategy.run),
    eagerly. The default strategy's replica context (plain code) is not.

    On every call's path: outside any strategy the thread's strategy stack is empty (TF's
    own `get_replica_context` and `has_strategy` each find that out by catching an
    IndexError, several microseconds a call). The stack is read where the graph's
    `_distribution_strategy_stack` property keeps it (a thread that never entered a
    strategy has none: the property would make an empty one)."""
    stack = getattr(ops.get_default_graph()._thread_local,  # noqa: SLF001
                    "_distribution_strategy_stack", None)
    if not stack:
        return False
    mode = stack[-1]
    return mode.replica_context is not None and not isinstance(
        mode.strategy, distribute_lib._DefaultDistributionStrategy)  # noqa: SLF001
