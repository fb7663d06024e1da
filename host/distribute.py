"""tf.distribute: where a call is made from.

MirroredStrategy runs `strategy.run(fn)` once per replica, each in a thread of its own;
the threads meet at every cross-replica step (`merge_call`: an optimizer's all-reduce,
`ReplicaContext.all_reduce`). A sliced call made there must neither wait on another
replica's call nor send anything a graph would not see once per replica.
"""
from __future__ import annotations

from tensorflow.python.distribute import distribute_lib


def in_replica_context() -> bool:
    """Inside a non-default strategy's replica context (a replica thread of strategy.run),
    eagerly. The default strategy's replica context (plain code) is not."""
    context = distribute_lib.get_replica_context()
    return context is not None and distribute_lib.has_strategy() and not isinstance(
        context.strategy, distribute_lib._DefaultDistributionStrategy)  # noqa: SLF001
