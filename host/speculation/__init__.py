"""gpe.host.speculation: what a function's variants assume, and when slicing is worth it.

Owns `Assumptions` (JANUS-style facts from the profile calls, how each relaxes when its
guard breaks), the adaptive choice between running a variant sliced or eagerly, and the
payoff rule (a function is sliced once its calls have paid for the build) with the
progress line of long builds. It may import gpe.host.facts.
"""
