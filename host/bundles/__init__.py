"""gpe.host.bundles: precompiled functions, written and loaded.

Owns `export` (slicing a function ahead of time for its declared argument types into a
bundle entry) and loading (installing a bundle entry's variant in the program's session
without slicing or tracing). It may import gpe.host.variants and everything below it.
"""
