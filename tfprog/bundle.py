"""Bundles: sliced functions saved ahead of time (`gpe extract`), read back (`gpe.load`).

A bundle is a folder:

    index.json    the index (versioned JSON, SCHEMA): per Python function its FunctionDef
                  and callees, channels, plan, guards, captured values by name, source hash
    library.pb    a FunctionDefLibrary with every FunctionDef of the bundle
    host/N.py     the generated host code of function N

`read(path)` checks everything before anything is used: the schema, the TensorFlow
version, each file's SHA-256 and size (a truncated or altered file), that the library
parses, that every op a FunctionDef uses exists in the installed TensorFlow and is not
one that reads or writes files or runs Python (unless `allow_ops` names it), and that
each host file only defines the factory the loader calls. Any failure raises
`BundleError` naming the file and what is wrong; nothing is registered or executed.

The FunctionDef names carry the bundle's token (`gpeb_<token>_...`), so two bundles and
the program's own functions never clash in the one eager context they are added to.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.framework import function_pb2
from tensorflow.python.framework import op_def_registry

SCHEMA = 1
FORMAT = "gpe-bundle"
INDEX, LIBRARY = "index.json", "library.pb"

# ops that read or write files, or call back into Python: refused unless allowed by name
UNSAFE_OPS = frozenset({
    "ReadFile", "WriteFile", "PyFunc", "PyFuncStateless", "EagerPyFunc", "MatchingFiles",
    "Save", "SaveV2", "SaveSlices", "Restore", "RestoreV2", "RestoreSlice",
    "MergeV2Checkpoints", "ShardedFilename", "ImmutableConst", "TFRecordDataset",
    "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "CreateSummaryFileWriter", "WriteSummary",
    "WriteScalarSummary", "WriteHistogramSummary", "WriteImageSummary", "WriteAudioSummary",
    "WriteGraphSummary", "WriteRawProtoSummary", "CreateSummaryDbWriter",
    "WholeFileReader", "WholeFileReaderV2", "TextLineReader", "TextLineReaderV2",
    "TFRecordReader", "TFRecordReaderV2", "FixedLengthRecordReader",
    "FixedLengthRecordReaderV2", "ReaderReadV2", "ReaderRead", "DebugIdentityV2",
    "DebugIdentityV3", "SnapshotDataset", "SnapshotDatasetV2", "SaveDataset",
    "SaveDatasetV2", "LoadDataset", "CacheDatasetV2", "CacheDataset",
})


class BundleError(Exception):
    """A bundle that cannot be used, with why (`kind`: a short fixed word)."""

    def __init__(self, path: str, kind: str, message: str):
        super().__init__(f"gpe: bundle {path} refused ({kind}): {message}")
        self.path, self.kind = path, kind


@dataclass
class Bundle:
    path: str
    index: dict
    library: dict[str, function_pb2.FunctionDef]  # by (bundle) name
    host: dict[str, str] = field(default_factory=dict)  # qualified name -> host source
    # reachable()'s answers, by the names asked (the library does not change once read)
    reach: dict[tuple, list[str]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def functions(self) -> dict[str, dict]:
        return self.index["functions"]


# writing -----------------------------------------------------------------------------
def rename(library: list, prefix: str) -> dict[str, str]:
    """Give every FunctionDef in `library` (in place) the name prefix + its name, and
    rewrite the references between them; returns old name -> new name."""
    names = {f.signature.name: prefix + f.signature.name.lstrip("_") for f in library}
    for fdef in library:
        fdef.signature.name = names[fdef.signature.name]
        for node in fdef.node_def:
            if node.op in names:
                node.op = names[node.op]
            for attr in node.attr.values():
                if attr.HasField("func") and attr.func.name in names:
                    attr.func.name = names[attr.func.name]
                for func in attr.list.func:
                    if func.name in names:
                        func.name = names[func.name]
    return names


def write(path: str, functions: dict[str, dict], library: list, host: dict[str, str],
          meta: dict) -> dict:
    """Write a bundle folder. functions: qualified name -> index entry (its "host" key
    is set here); host: qualified name -> generated host source. Returns the index."""
    os.makedirs(os.path.join(path, "host"), exist_ok=True)
    files = {}
    lib = function_pb2.FunctionDefLibrary(function=library)
    files[LIBRARY] = _write(path, LIBRARY, lib.SerializeToString())
    for n, name in enumerate(sorted(functions)):
        rel = f"host/{n}.py"
        files[rel] = _write(path, rel, host[name].encode())
        functions[name]["host"] = rel
    index = dict(meta, format=FORMAT, schema=SCHEMA, tensorflow=tf.__version__,
                 files=files, functions=functions)
    with open(os.path.join(path, INDEX), "w") as out:
        json.dump(index, out, indent=1, sort_keys=True)
    return index


def _write(path: str, rel: str, data: bytes) -> dict:
    with open(os.path.join(path, rel), "wb") as out:
        out.write(data)
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


# reading and checking ------------------------------------------------------------------
def read(path: str, allow_ops: frozenset[str] | set[str] = frozenset(),
         check_versions: bool = True) -> Bundle:
    """The bundle at `path`, checked (see the module docstring); raises BundleError."""
    index = read_index(path, check_versions)
    files = index.get("files")
    if not isinstance(files, dict) or LIBRARY not in files:
        raise BundleError(path, "corrupted", f"{INDEX} lists no {LIBRARY}")
    data = {rel: _read_checked(path, rel, files[rel]) for rel in sorted(files)}
    library = function_pb2.FunctionDefLibrary()
    try:
        library.ParseFromString(data[LIBRARY])
    except DecodeError as exc:
        raise BundleError(path, "corrupted", f"{LIBRARY} does not parse: {exc}") from None
    fdefs = {f.signature.name: f for f in library.function}
    _check_ops(path, fdefs, frozenset(allow_ops))
    host = {}
    for name, entry in _functions(path, index).items():
        wrapper = entry.get("wrapper") or {}
        for fname in [entry.get("function")] + list(entry.get("callees", [])) + \
                ([wrapper.get("function")] if wrapper else []):
            if fname not in fdefs:
                raise BundleError(path, "corrupted",
                                  f"{name} names FunctionDef {fname!r}, not in {LIBRARY}")
        rel = entry.get("host")
        if rel not in data:
            raise BundleError(path, "corrupted", f"{name}: host code {rel!r} not listed")
        host[name] = _check_host(path, rel, data[rel])
    return Bundle(path, index, fdefs, host)


def read_index(path: str, check_versions: bool = True) -> dict:
    where = os.path.join(path, INDEX)
    if not os.path.isfile(where):
        raise BundleError(path, "missing", f"no {INDEX} (not a bundle folder)")
    try:
        with open(where, encoding="utf-8") as f:
            index = json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BundleError(path, "corrupted", f"{INDEX} is not valid JSON: {exc}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise BundleError(path, "corrupted", f"{INDEX} is not a gpe bundle index")
    if index.get("schema") != SCHEMA:
        raise BundleError(path, "schema", f"bundle schema {index.get('schema')!r}; this gpe "
                          f"reads schema {SCHEMA} (extract the bundle again)")
    if check_versions and index.get("tensorflow") != tf.__version__:
        raise BundleError(path, "tensorflow-version",
                          f"extracted with TensorFlow {index.get('tensorflow')}, "
                          f"TensorFlow {tf.__version__} is installed (extract it again)")
    _functions(path, index)
    return index


def _functions(path: str, index: dict) -> dict:
    functions = index.get("functions")
    if not isinstance(functions, dict) or not all(
            isinstance(e, dict) for e in functions.values()):
        raise BundleError(path, "corrupted", f"{INDEX}: 'functions' is not a mapping")
    return functions


def _read_checked(path: str, rel: str, expected: Any) -> bytes:
    if (not isinstance(rel, str) or rel.startswith(("/", "\\")) or ".." in rel.split("/")
            or not isinstance(expected, dict)):
        raise BundleError(path, "corrupted", f"{INDEX} lists a bad file entry {rel!r}")
    where = os.path.join(path, rel)
    if not os.path.isfile(where):
        raise BundleError(path, "corrupted", f"{rel} is missing")
    with open(where, "rb") as f:
        data = f.read()
    if len(data) != expected.get("bytes"):
        raise BundleError(path, "corrupted", f"{rel} has {len(data)} bytes, the index says "
                          f"{expected.get('bytes')} (truncated or altered)")
    if hashlib.sha256(data).hexdigest() != expected.get("sha256"):
        raise BundleError(path, "corrupted", f"{rel}: SHA-256 differs from the index")
    return data


def _check_ops(path: str, fdefs: dict, allow: frozenset[str]) -> None:
    for fname, fdef in sorted(fdefs.items()):
        for node in fdef.node_def:
            if node.op in fdefs:
                continue
            if node.op in UNSAFE_OPS and node.op not in allow:
                raise BundleError(path, "unsafe-op", f"FunctionDef {fname} uses {node.op} "
                                  f"(node {node.name}), which reads or writes files or runs "
                                  f"Python; pass allow_ops={{'{node.op}'}} to load it anyway")
            if op_def_registry.get(node.op) is None:
                raise BundleError(path, "unknown-op", f"FunctionDef {fname} uses op "
                                  f"{node.op!r}, which TensorFlow {tf.__version__} does "
                                  f"not have")


def _check_host(path: str, rel: str, data: bytes) -> str:
    """The host source, if it is what gpe generates: one `def _gpe_factory` and nothing
    else at the top level (so loading runs no code but that definition)."""
    try:
        source = data.decode("utf-8")
        tree = ast.parse(source)
    except (UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise BundleError(path, "corrupted", f"{rel} is not valid Python: {exc}") from None
    if (len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef)
            or tree.body[0].name != "_gpe_factory" or tree.body[0].decorator_list):
        raise BundleError(path, "corrupted", f"{rel} is not gpe's generated host code")
    factory = tree.body[0]
    if factory.args.defaults or factory.args.kw_defaults:
        raise BundleError(path, "corrupted", f"{rel} is not gpe's generated host code")
    return source


def reachable(bundle: Bundle, names: list[str]) -> list[str]:
    """The FunctionDefs `names` call, directly or not, with `names`, callees first (asked
    for each entry at load, again at its first call: kept on the bundle)."""
    key = tuple(names)
    if key not in bundle.reach:
        bundle.reach[key] = _reachable(bundle, names)
    return list(bundle.reach[key])


def _reachable(bundle: Bundle, names: list[str]) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name not in bundle.library:
            return
        seen.add(name)
        for callee in callees(bundle.library[name]):
            visit(callee)
        order.append(name)
    for name in names:
        visit(name)
    return order


def callees(fdef) -> list[str]:
    """Names of the functions a FunctionDef's nodes name (ops and function attributes)."""
    out = []
    for node in fdef.node_def:
        out.append(node.op)
        for attr in node.attr.values():
            if attr.HasField("func"):
                out.append(attr.func.name)
            out += [f.name for f in attr.list.func]
    return out


def op_counts(bundle_library: dict, names: list[str]) -> dict[str, int]:
    """Op type -> count over the FunctionDefs `names` (function calls not counted)."""
    counts: dict[str, int] = {}
    for name in names:
        for node in bundle_library[name].node_def:
            if node.op not in bundle_library:
                counts[node.op] = counts.get(node.op, 0) + 1
    return dict(sorted(counts.items()))
