"""The slicer slices the code Python runs: the text it reads from a function's file.

- A method's (indented) source is parsed as it is, not dedented: dedenting changed the
  multi-line strings inside it (a silent difference: eager returned 'a\\n            b',
  gpe 'a\\n    b').
- A file edited after it was imported (a training script changed while it trains) is not
  what Python runs: gpe sees that the text does not compile to the function's code and runs
  the function as Python does, with the reason named; it never slices the new text.
- The check must not refuse a function whose file did not change: thousands of library
  functions (methods, closures, private names, classes made inside a def) pass it.
"""
import importlib
import inspect
import sys
import warnings

import tensorflow as tf

import gpe
from gpe.slicer.parser import _block
from gpe.slicer.sourcecheck import same_code
from harness import check


class Report:
    def __init__(self):
        self.v = tf.Variable(1.0)

    def step(self, x):
        y = x * self.v
        self.v.assign_add(1.0)
        return y, """a
            b""", f"""{'c'}
        d"""


def test_multiline_strings_of_a_method_are_kept():
    def make(log):
        report = Report()
        return report.step, {"v": report.v}

    under = check(make, [(tf.constant(2.0),)] * 4)
    assert under.results[-1][1] == "a\n            b"


SCRIPT = '''\
import tensorflow as tf

V = tf.Variable(1.0)


def step(x):
    V.assign_add(x * {factor})
    return V * 2.0
'''


def test_a_file_edited_after_import_runs_as_python_runs_it(tmp_path, monkeypatch):
    (tmp_path / "edited_mod.py").write_text(SCRIPT.format(factor="2.0"))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("edited_mod")
    try:
        plain_step = module.step
        (tmp_path / "edited_mod.py").write_text(SCRIPT.format(factor="3.0"))
        step = gpe.function(plain_step, adaptive=False, profile_calls=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = [float(step(tf.constant(1.0))) for _ in range(4)]
        assert results == [6.0, 10.0, 14.0, 18.0]  # the imported code: V += 2 each call
        stats = step.stats()
        assert stats["graph_calls"] == 0, stats
        reasons = " ".join(stats["fallbacks"]) + " ".join(str(w.message) for w in caught)
        assert "source-changed" in reasons and "step" in reasons, reasons
    finally:
        sys.modules.pop("edited_mod", None)


def test_an_unchanged_file_still_slices(tmp_path, monkeypatch):
    (tmp_path / "unedited_mod.py").write_text(SCRIPT.format(factor="2.0"))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("unedited_mod")
    try:
        step = gpe.function(module.step, adaptive=False, profile_calls=1)
        results = [float(step(tf.constant(1.0))) for _ in range(4)]
        assert results == [6.0, 10.0, 14.0, 18.0]
        assert step.stats()["graph_calls"] == 3, step.stats()
    finally:
        sys.modules.pop("unedited_mod", None)


def _functions(module):
    for obj in vars(module).values():
        if inspect.isfunction(obj) and obj.__module__ == module.__name__:
            yield obj
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            for member in vars(obj).values():
                member = getattr(member, "__func__", getattr(member, "fget", member))
                if inspect.isfunction(member):
                    yield member


def test_the_check_refuses_no_unchanged_library_function():
    names = ["keras.src.layers.core.dense", "keras.src.layers.rnn.lstm",
             "keras.src.optimizers.adam", "keras.src.models.functional", "json.decoder",
             "email._header_value_parser", "gast.astn"]
    checked, wrong = 0, []
    for name in names:
        for fn in _functions(importlib.import_module(name)):
            try:
                lines, _ = inspect.getsourcelines(fn)
            except (OSError, TypeError):
                continue
            checked += 1
            if not same_code(fn, _block("".join(lines))[0], "<library>"):
                wrong.append(f"{name}.{fn.__qualname__}")
    assert checked > 150 and not wrong, (checked, wrong)


def test_a_closure_read_inside_a_comprehension_is_the_same_code():
    """A nested function whose comprehension reads a name of the enclosing function gets
    it through a cell (LOAD_CLOSURE, BUILD_TUPLE); its def compiled alone reads a global:
    the check took that for an edited file and every call ran eagerly."""
    def make(log):
        ws = [tf.Variable(1.0), tf.Variable(2.0)]

        def step(x):
            picked = [w for w in ws if w is not ws[1]]
            picked[0].assign_add(x)
            return picked[0] * ws[1]
        return step, {"a": ws[0], "b": ws[1]}
    step = make([])[0]
    source = inspect.getsource(step)
    assert same_code(step, source[source.index("def "):].replace("\n" + " " * 8, "\n"),
                     inspect.getsourcefile(step))
    check(make, [(tf.constant(1.0),)] * 4)
