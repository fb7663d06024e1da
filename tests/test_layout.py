"""The package's shape: one name in site-packages, imports one way (gpe -> host -> tfprog ->
slicer), the TensorFlow version checked in one place with the bounds pyproject.toml states."""
import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest

import background

ROOT = pathlib.Path(__file__).resolve().parent.parent
# what each package may import from gpe (besides itself); gpe's API and CLI may import all
ALLOWED = {
    "slicer": {"gpe.slicer"},
    "tfprog": {"gpe.tfprog", "gpe.slicer"},
    "host": {"gpe.host", "gpe.tfprog", "gpe.slicer"},
}
# host/'s concerns, bottom to top: what each may import of gpe.host besides itself
HOST_ALLOWED = {
    "runtime": set(),
    "facts": set(),
    "diagnostics": {"runtime"},
    "speculation": {"facts"},
    "variants": {"runtime", "facts", "speculation", "diagnostics"},
    "distribution": {"variants", "runtime", "facts", "speculation", "diagnostics"},
    "bundles": {"variants", "runtime", "facts", "speculation", "diagnostics"},
    "call": {"variants", "runtime", "facts", "speculation", "diagnostics", "distribution",
             "bundles"},
}
# the CLI's own modules import what a command needs when it runs (TensorFlow included)
LAZY_IMPORTS_ALLOWED = {"gpe/cli.py", "gpe/drive.py"}


def installed_name(path: pathlib.Path) -> list[str]:
    """The dotted package a project file belongs to, as installed (host/x/y.py -> gpe.host.x)."""
    rel = path.relative_to(ROOT)
    top = ["gpe"] if rel.parts[0] == "gpe" else ["gpe", rel.parts[0]]
    return top + list(rel.parts[1:-1])


def project_imports(path: pathlib.Path, tree=None) -> list[tuple[ast.AST, str, bool]]:
    """(node, absolute module, written relatively) for each import of the project."""
    found = []
    package = installed_name(path)
    for node in ast.walk(tree or ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
            found += [(node, f"{module}.{a.name}", True) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node, f"{node.module}.{a.name}", False) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node, a.name, False) for a in node.names]
    return [(n, m, rel) for n, m, rel in found
            if m.split(".")[0] in ("gpe", "slicer", "host", "tfprog")]


def gpe_imports(path: pathlib.Path, depth: int = 2) -> set[str]:
    """The gpe packages (first `depth` parts of the name) a file imports; an old top-level
    name (slicer, host, tfprog) is never allowed and is kept whole."""
    return {m if m.split(".")[0] != "gpe" else ".".join(m.split(".")[:depth])
            for _, m, _ in project_imports(path)}


def project_files(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_go_one_way(package):
    bad = {}
    for path in project_files(package):
        wrong = {m for m in gpe_imports(path) if m not in ALLOWED[package]}
        if wrong:
            bad[str(path.relative_to(ROOT))] = sorted(wrong)
    assert not bad, f"{package}/ imports outside gpe -> host -> tfprog -> slicer: {bad}"


def test_host_concerns_import_downwards():
    assert {p.name for p in (ROOT / "host").glob("*.py")} == {"__init__.py"}, \
        "every host module lives in the subfolder of its concern"
    assert {p.parent.name for p in (ROOT / "host").glob("*/__init__.py")} == set(HOST_ALLOWED)
    bad = {}
    for concern, allowed in HOST_ALLOWED.items():
        for path in project_files(f"host/{concern}"):
            names = {m.split(".")[2] for m in gpe_imports(path, depth=3)
                     if m.startswith("gpe.host.")}
            wrong = names - allowed - {concern}
            if wrong:
                bad[str(path.relative_to(ROOT))] = sorted(wrong)
    assert not bad, f"host/ concerns importing upwards: {bad}"
    for concern in HOST_ALLOWED:  # each says what it owns and what it may import
        doc = ast.get_docstring(ast.parse((ROOT / "host" / concern / "__init__.py").read_text()))
        assert doc and "import" in doc, concern


def test_imports_inside_the_project_are_relative():
    absolute, late = [], []
    for package in ("gpe", "host", "slicer", "tfprog"):
        for path in project_files(package):
            rel = str(path.relative_to(ROOT))
            tree = ast.parse(path.read_text())
            in_functions = {id(n) for f in ast.walk(tree)
                            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                            for n in ast.walk(f)}
            for node, module, relative in project_imports(path, tree):
                if not relative:
                    absolute.append(f"{rel}:{node.lineno} {module}")
                elif id(node) in in_functions and rel not in LAZY_IMPORTS_ALLOWED:
                    late.append(f"{rel}:{node.lineno} {module}")
    assert not absolute, f"absolute imports of the project (import relatively): {absolute}"
    assert not late, f"imports of project modules inside functions: {late}"


def test_slicer_has_no_tensorflow_in_its_source():
    for path in project_files("slicer"):
        assert "tensorflow" not in {n.split(".")[0] for n in gpe_imports(path)}
        assert not re.search(r"^\s*(import|from)\s+tensorflow", path.read_text(), re.M), path


def test_tensorflow_bounds_are_stated_once():
    from gpe.tfprog import version
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"tensorflow{version.SUPPORTED}"' in pyproject
    import tensorflow as tf
    version.check(tf.__version__)  # the installed one is supported
    with pytest.raises(ImportError, match=re.escape(version.SUPPORTED)):
        version.check("2.99.0")
    with pytest.raises(ImportError, match="2.15.1"):
        version.check("2.15.1")


def _wheel_installed():
    """The checkout's wheel built, installed into a fresh virtualenv and imported from it, in
    a folder of its own (in the background after collection: tests/background.py); the test
    removes it: (folder, the wheel, the venv's site-packages, what it held before the
    install, the import's run)."""
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="gpe-tests-wheel-"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(ROOT)],
                   check=True, timeout=240, cwd=tmp_path, env=background.env())
    wheel, = wheels.glob("gpe-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120, env=background.env())
    site = next(venv.glob("lib/python*/site-packages"))
    before = set(os.listdir(site))
    # (without the checkout conftest puts on PYTHONPATH for `python -m pytest` from the
    # root: with a gpe.egg-info a build left there, pip took gpe as installed already)
    clean = {k: v for k, v in background.env().items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=120, env=clean)
    # the installed copy imported with this interpreter (it has the dependencies)
    code = "import gpe.slicer, gpe.host.runtime.session, sys; print(gpe.slicer.__file__)"
    out = subprocess.run([sys.executable, "-c", code],
                         env=background.env(PYTHONPATH=str(site)), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True)
    return tmp_path, wheel, site, before, out


def background_jobs():
    return {"test_wheel_adds_only_gpe_to_site_packages": _wheel_installed}


@pytest.mark.timeout(300)
def test_wheel_adds_only_gpe_to_site_packages():
    tmp_path, wheel, site, before, out = background.result(
        f"{__name__}.test_wheel_adds_only_gpe_to_site_packages", _wheel_installed)
    try:
        _check_wheel(tmp_path, wheel, site, before, out)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _check_wheel(tmp_path, wheel, site, before, out):
    top = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in top if not t.endswith(".dist-info")} == {"gpe"}
    # installed into a fresh virtualenv: site-packages gains exactly gpe and its metadata
    venv = tmp_path / "venv"
    added = set(os.listdir(site)) - before
    assert {a for a in added if not a.endswith(".dist-info")} == {"gpe"}, added
    assert (venv / "bin" / "gpe").is_file()  # the command
    # (every subpackage is in the wheel: host's concerns too)
    assert {p.parent.name for p in (site / "gpe" / "host").glob("*/__init__.py")} == \
        {p.parent.name for p in (ROOT / "host").glob("*/__init__.py")}
    for sub in ("slicer", "host", "tfprog"):
        assert (site / "gpe" / sub / "__init__.py").is_file()
    # and the installed copy imports as one namespace (this interpreter has its dependencies)
    assert out.stdout.strip().startswith(str(site)), out.stdout


def test_modules_and_functions_stay_small():
    """DESIGN: modules of 150-500 lines, functions under ~60 (tests and examples aside)."""
    big = []
    for package in ("gpe", *ALLOWED):
        for path in project_files(package):
            source, name = path.read_text(), path.relative_to(ROOT)
            if source.count("\n") > 500:
                big.append(f"{name}: {source.count(chr(10))} lines")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > 60:
                        big.append(f"{name}: {node.name} {length} lines")
    assert not big, big
