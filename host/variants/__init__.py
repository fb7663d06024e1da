"""gpe.host.variants: one variant of a function, built and run.

Owns the `Builder` (a new call key -> a plan, its eager profile calls, a built variant),
the `Variant` and its cache (`Variants`), the loader that turns a plan's generated host
source into a live function, and the host stubs that generated code calls (`Runtime`,
`CallContext`: sends, receives, nested calls, entry guards). `variant.assemble` is the
one way a Variant is put together: the builder, bundles and replicated steps use it (and
`builder.crossings`, what profile runs say crosses). It may import gpe.host.runtime, facts,
speculation and diagnostics.
"""
