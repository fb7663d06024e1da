"""gpe.host: runs sliced programs. The only package that runs graphs.

Its subpackages, each a concern, bottom to top (a lower one never imports a higher one;
tests/test_layout.py holds the order):

- runtime: the session, its sinks, channels and Pending values, fences, the watchdog;
- facts: what the slicer is told about objects and arguments (oracle, signatures);
- diagnostics: statistics and `gpe.timing()`;
- speculation: assumptions, the adaptive sliced/eager choice, when slicing pays;
- variants: building a variant (builder, loader) and running it (host stubs);
- distribution, bundles: tf.distribute and precompiled functions, on variants;
- call: `SlicedFunction` and the life of a call, the top.
"""
from .. import tfprog  # noqa: F401  checks the TensorFlow version first
