"""The slicer's house: one pipeline with stop points, an acyclic import graph among its
modules, a callee cache that lets functions go, independent copies from templates."""
import ast
import gc
import pathlib
import types
import weakref

import gast

import gpe.slicer
from gpe.slicer import namespaces, ArgFact, Facts, Kind, anno, callees, templates
from gpe.slicer.anno import Key
from gpe.slicer.parser import parse
from gpe.slicer.pipeline import Pass, analyse

SLICER = pathlib.Path(gpe.slicer.__file__).parent
PACKAGE = "gpe.slicer"

tf = types.SimpleNamespace(matmul=lambda *a: None)


def classify(obj):
    if obj is tf:
        return Kind.TF_MODULE
    if obj is tf.matmul:
        return Kind.TF_OP
    return Kind.HOST


FACTS = Facts(args={"x": ArgFact(Kind.TENSOR)}, classify=classify)


def imported_modules(source: str, modules: set[str]) -> set[str]:
    """The slicer modules `source` imports, at module level or inside a function
    (`from gpe.slicer import Refusal` imports the package: "__init__")."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names
                      if a.name.startswith(PACKAGE + ".")}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module.startswith(PACKAGE + "."):
                module = module[len(PACKAGE) + 1:]
            elif node.level == 0 and module == PACKAGE or node.level == 1 and not module:
                module = ""
            elif node.level == 0:
                continue  # outside the slicer
            if module:  # from gpe.slicer.kinds import ..., from .kinds import ...
                found.add(module.split(".")[0])
            else:  # from gpe.slicer import anno, Refusal
                found |= {a.name if a.name in modules else "__init__" for a in node.names}
    return found


def test_the_import_finder_sees_function_local_imports():
    source = ("import os\nfrom gpe.slicer.anno import Key\ndef f():\n"
              "    from gpe.slicer import callees, Refusal\n    import gpe.slicer.kinds\n"
              "    from . import plan\n    from .facts import Kind\n")
    assert imported_modules(source, {"anno", "callees", "kinds", "plan", "facts"}) == {
        "anno", "callees", "kinds", "plan", "facts", "__init__"}


def test_slicer_modules_import_each_other_without_a_cycle():
    modules = {p.stem for p in SLICER.glob("*.py")}
    graph = {m: imported_modules((SLICER / f"{m}.py").read_text(), modules) - {m}
             for m in modules}
    assert graph["pipeline"] >= {"kinds", "callees", "partition"}  # the finder works
    done, on_path = set(), []

    def visit(module):
        if module in on_path:
            cycle = on_path[on_path.index(module):] + [module]
            raise AssertionError("slicer import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        on_path.append(module)
        for dep in sorted(graph[module]):
            visit(dep)
        on_path.pop()
        done.add(module)

    for module in sorted(modules):
        visit(module)


def body_callee(x):
    return tf.matmul(x, x)


def caller(x):
    y = body_callee(x)
    return y


def test_analyse_stops_after_the_named_pass():
    parsed = parse(caller)
    analyse(parsed, FACTS, until=Pass.KINDS)
    assign = parsed.node.body[0]
    assert anno.get(assign.value, Key.KIND) == Kind.TENSOR and anno.get(assign.value, Key.CALLEE)
    assert not anno.has(assign, Key.READS) and not anno.has(assign, Key.PLACE)
    parsed = parse(caller)
    analyse(parsed, FACTS, until=Pass.PLACEMENT)
    assert anno.has(parsed.node.body[0], Key.PLACE)
    assert not anno.has(parsed.node, Key.ENTRY)  # crossings did not run
    analyse(parsed, FACTS)
    assert anno.has(parsed.node, Key.ENTRY)


def test_callee_cache_lets_a_function_go_and_keeps_a_live_one():
    def make():
        def local_callee(x):
            return tf.matmul(x, x)

        def local_caller(x):
            y = local_callee(x)
            return y
        return local_callee, local_caller

    local_callee, local_caller = make()
    for fn in (local_caller, caller):
        parsed = parse(fn)
        analyse(parsed, FACTS, until=Pass.KINDS)
        assert anno.get(parsed.node.body[0].value, Key.CALLEE)
    assert local_callee in callees._cache and body_callee in callees._cache
    gone = weakref.ref(local_callee)
    del local_callee, local_caller, parsed, fn
    gc.collect()
    assert gone() is None
    (key, judged), = callees._cache[body_callee].items()  # kept, with what it reads of
    assert key == (Kind.TENSOR,) and judged.kind == Kind.TF_OP  # its own globals: `tf`
    assert judged.globals == ((namespaces.root(body_callee, "tf"), False),)


def test_template_copies_have_their_own_annotations():
    base = templates.name("w")
    anno.set(base, Key.KIND, Kind.VARIABLE)
    sub = gast.Attribute(value=base, attr="value", ctx=gast.Load())
    anno.set(sub, Key.PATH, "w.value")
    (stmt,) = templates.replace("y = (x, x)", x=sub)
    first, second = stmt.value.elts
    copies = [first, second, first.value, second.value]
    assert len({id(n) for n in copies + [sub, base]}) == 6  # no node is shared
    assert anno.get(first, Key.PATH) == anno.get(second, Key.PATH) == "w.value"
    assert anno.get(second.value, Key.KIND) == Kind.VARIABLE
    anno.set(first, Key.PATH, "changed")
    anno.set(first.value, Key.KIND, Kind.TENSOR)
    anno.set(first, Key.CONSTANT, True)
    assert anno.get(second, Key.PATH) == anno.get(sub, Key.PATH) == "w.value"
    assert anno.get(second.value, Key.KIND) == anno.get(base, Key.KIND) == Kind.VARIABLE
    assert not anno.has(second, Key.CONSTANT) and not anno.has(sub, Key.CONSTANT)
