"""gpe.host.distribution: sliced functions under tf.distribute.

Owns where a call is made from (a replica thread or cross-replica context),
`strategy.run` of a sliced function (one replicated call whose TF part holds every
replica's work) and per-replica steps with host work (the host part once per replica, one
TF part for all). It may import gpe.host.variants and everything below it.
"""
