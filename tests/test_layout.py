"""The package's shape: one name in site-packages, imports one way (gpe -> host -> tfprog ->
slicer), the TensorFlow version checked in one place with the bounds pyproject.toml states."""
import ast
import os
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# what each package may import from gpe (besides itself); gpe's API and CLI may import all
ALLOWED = {
    "slicer": {"gpe.slicer"},
    "tfprog": {"gpe.tfprog", "gpe.slicer"},
    "host": {"gpe.host", "gpe.tfprog", "gpe.slicer"},
}


def gpe_imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] in ("slicer", "host", "tfprog"):
                found.add(name)  # an old top-level name: never allowed
            elif parts[0] == "gpe" and len(parts) > 1:
                found.add(".".join(parts[:2]))
            elif parts[0] == "gpe":
                found.add("gpe")
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_go_one_way(package):
    bad = {}
    for path in sorted((ROOT / package).glob("*.py")):
        wrong = {m for m in gpe_imports(path) if m not in ALLOWED[package]}
        if wrong:
            bad[path.name] = sorted(wrong)
    assert not bad, f"{package}/ imports outside gpe -> host -> tfprog -> slicer: {bad}"


def test_slicer_has_no_tensorflow_in_its_source():
    for path in (ROOT / "slicer").glob("*.py"):
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


@pytest.mark.timeout(300)
def test_wheel_adds_only_gpe_to_site_packages(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(ROOT)],
                   check=True, timeout=240, cwd=tmp_path)
    wheel, = wheels.glob("gpe-*.whl")
    top = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in top if not t.endswith(".dist-info")} == {"gpe"}
    # installed into a fresh virtualenv: site-packages gains exactly gpe and its metadata
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    before = set(os.listdir(site))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=120)
    added = set(os.listdir(site)) - before
    assert {a for a in added if not a.endswith(".dist-info")} == {"gpe"}, added
    assert (venv / "bin" / "gpe").is_file()  # the command
    for sub in ("slicer", "host", "tfprog"):
        assert (site / "gpe" / sub / "__init__.py").is_file()
    # and the installed copy imports as one namespace (this interpreter has its dependencies)
    code = "import gpe.slicer, gpe.host.session, sys; print(gpe.slicer.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(site)},
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().startswith(str(site)), out.stdout


def test_modules_and_functions_stay_small():
    """DESIGN: modules of 150-500 lines, functions under ~60 (tests and examples aside)."""
    big = []
    for package in ("gpe", *ALLOWED):
        for path in sorted((ROOT / package).glob("*.py")):
            source = path.read_text()
            if source.count("\n") > 500:
                big.append(f"{package}/{path.name}: {source.count(chr(10))} lines")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > 60:
                        big.append(f"{package}/{path.name}: {node.name} {length} lines")
    assert not big, big
