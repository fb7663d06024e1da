"""gpe.host: runs sliced programs: the session and its sink thread, host stubs, Pending values,
guards, fallback to eager and statistics. The only package that runs graphs."""
import gpe.tfprog  # noqa: F401  checks the TensorFlow version first
