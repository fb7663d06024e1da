"""Slicing cost grows linearly with the code sliced, checked by counts (not timings): the
templates the slicer writes code from are parsed once each, however many functions are
sliced, and a plan's programs are compiled from their trees without being unparsed."""
import importlib.util
import sys
import types

from gpe.slicer import ArgFact, Facts, Kind, slice_function, templates

FUNCTION = '''
def f{i}(x):
    a = tf.matmul(x, W)
    b = tf.reduce_sum(a) * {i}.0
    for k in range(2):
        b = b + tf.reduce_sum(a)
    hist.append(float(b))
    c = tf.matmul(a, W)
    if len(hist) > {i}:
        c = c + 1.0
    print(len(hist), {i})
    d = tf.reduce_sum(c) * len(hist)
    return d
'''

HEADER = '''
import types
tf = types.SimpleNamespace(matmul=lambda *a: None, reduce_sum=lambda *a: None)
W = object()
hist = []
'''


def generated(tmp_path, count: int) -> types.ModuleType:
    """A module of `count` functions of 12 lines with TF work, host work, a loop the TF part
    unrolls and an `if` the host decides (each on its own lines of the file)."""
    path = tmp_path / "many_functions.py"
    path.write_text(HEADER + "".join(FUNCTION.format(i=i) for i in range(count)))
    spec = importlib.util.spec_from_file_location("many_functions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BLOCK = '''
    a{j} = tf.matmul(x, W)
    b{j} = tf.reduce_sum(a{j}) * 2.0
    for k in range(2):
        b{j} = b{j} + tf.reduce_sum(a{j})
    hist.append(float(b{j}))
    c{j} = tf.matmul(a{j}, W)
    if len(hist) > {j}:
        c{j} = c{j} + 1.0
    print(len(hist), {j})
    x = tf.reduce_sum(c{j}) * len(hist) + x
'''


def long_function(tmp_path, blocks: int):
    """One function of `blocks` blocks of 10 lines (each line's kind as in FUNCTION)."""
    path = tmp_path / f"long_{blocks}.py"
    path.write_text(HEADER + "def g(x):" + "".join(BLOCK.format(j=j) for j in range(blocks))
                    + "    return x\n")
    spec = importlib.util.spec_from_file_location(f"long_{blocks}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def python_calls(fn, *args) -> int:
    """How many Python function calls running `fn(*args)` makes (a count, not a time)."""
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1
    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return count[0]


def facts_for(module) -> Facts:
    def classify(obj):
        if obj is module.tf:
            return Kind.TF_MODULE
        if obj in (module.tf.matmul, module.tf.reduce_sum):
            return Kind.TF_OP
        if obj is module.W:
            return Kind.VARIABLE
        return Kind.HOST
    return Facts(args={"x": ArgFact(Kind.TENSOR)}, classify=classify)


def test_templates_are_parsed_once_however_many_functions_are_sliced(tmp_path):
    module = generated(tmp_path, 16)
    facts = facts_for(module)
    templates._parsed.cache_clear()
    start = templates.parses.count
    plans = [slice_function(getattr(module, f"f{i}"), facts) for i in range(8)]
    first = templates.parses.count - start
    # the first 8 functions used every template these functions need (with other line
    # numbers and channel numbers): the next 8 parse none
    plans += [slice_function(getattr(module, f"f{i}"), facts) for i in range(8, 16)]
    assert 0 < first == templates.parses.count - start
    assert all(p.channels and p.nested == () for p in plans)
    kinds = {c.kind.name for p in plans for c in p.channels}
    assert {"ENTRY", "GATE", "BRANCH", "OUTPUT"} <= kinds  # host decisions, both ways


def test_programs_are_not_unparsed_when_sliced_and_compile_from_their_trees(tmp_path):
    module = generated(tmp_path, 2)
    plan = slice_function(module.f1, facts_for(module))
    programs = (plan.host, plan.tf, plan.profile)
    assert all(p._text is None for p in programs)  # nothing unparsed yet
    code = plan.host.code(module.f1.__code__.co_filename)
    assert plan.host.code(module.f1.__code__.co_filename) is code  # compiled once
    assert plan.host._text is None
    # the host program's code keeps the user's line numbers
    lines, todo = set(), [code]
    while todo:
        c = todo.pop()
        lines |= {i[2] for i in c.co_lines() if i[2] is not None}
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    first = module.f1.__code__.co_firstlineno
    assert {first + 5, first + 9} <= lines  # hist.append(...), print(...)
    # the text, when asked for, is the same program
    assert "hist.append" in plan.host_source and "tf.matmul" in plan.tf_source
    assert "_gpe_obs" in plan.profile_source


def test_slicing_work_grows_linearly_with_the_length_of_a_function(tmp_path):
    calls = {}
    for blocks in (1, 4, 8):
        module = long_function(tmp_path, blocks)
        slice_function(module.g, facts_for(module))  # templates parsed (see above)
        calls[blocks] = python_calls(slice_function, module.g, facts_for(module))
    # 80 lines cost twice what 40 lines cost (measured: x1.99; quadratic would be x4)
    assert 1.8 < calls[8] / calls[4] < 2.2, calls
    assert calls[4] / (4 * calls[1]) < 1.2, calls


def test_the_slicers_walk_is_ast_walks_order(tmp_path):
    """slicer/nodes.py walks as `gast.walk` and `gast.iter_child_nodes` do (the passes
    depend on the order), over every node of a real module's tree."""
    import inspect  # pylint: disable=import-outside-toplevel

    import gast  # pylint: disable=import-outside-toplevel

    from gpe.slicer import nodes, partition  # pylint: disable=import-outside-toplevel
    tree = gast.parse(inspect.getsource(partition))
    assert [id(n) for n in nodes.walk(tree)] == [id(n) for n in gast.walk(tree)]
    for node in gast.walk(tree):
        assert nodes.children(node) == list(gast.iter_child_nodes(node))
