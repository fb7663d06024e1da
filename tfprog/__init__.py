"""gpe.tfprog: builds the TF side: FunctionDefs for TF parts, channel queues, the sink program.

Importing it checks the installed TensorFlow against the versions gpe is tested with.
"""
import tensorflow as _tf

from . import version as _version

_version.check(_tf.__version__)
