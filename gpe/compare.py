"""Compare what two runs of a program observed: results (losses, final variables, host
state) and printed output. Used by `gpe bench` and examples/_drive.py.

`compare(a, b)` walks nested lists, tuples, dicts, NumPy arrays and Python values and says
"identical", "close" (every float within RTOL_CLOSE, relative to max(|a|, |b|,
SCALE_FLOOR)) or "differs", with the worst relative difference and where the first
difference of that kind is. `verdict(eager, other)` is the whole judgement of one run
against the eager run. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import math
import re

import numpy as np

RTOL_CLOSE = 1e-4    # "close": every float within this relative difference
SCALE_FLOOR = 1e-2   # ... of max(|a|, |b|, SCALE_FLOOR): tiny values compare absolutely
ORDER = {"identical": 0, "close": 1, "differs": 2}
RESULT_PARTS = ("losses", "weights", "state")
NUMBER = re.compile(r"-?\d+\.?\d*(?:e[-+]?\d+)?")


def _compare_arrays(a, b, where: str) -> tuple[str, float, str]:
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape or x.dtype.kind != y.dtype.kind:
        return "differs", math.inf, f"{where}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
    if x.dtype.kind not in "fc":
        if np.array_equal(x, y):
            return "identical", 0.0, ""
        i = np.argwhere(x != y)[0]
        i = tuple(int(k) for k in i)
        return "differs", math.inf, f"{where}{list(i)}: {_item(x[i])} vs {_item(y[i])}"
    if np.array_equal(x, y, equal_nan=True):
        return "identical", 0.0, ""
    with np.errstate(all="ignore"):
        diff = np.abs(x - y) / np.maximum(np.maximum(np.abs(x), np.abs(y)), SCALE_FLOOR)
    diff = np.where(np.isnan(x) & np.isnan(y), 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    worst = float(diff.max())
    i = tuple(int(k) for k in np.unravel_index(int(diff.argmax()), diff.shape))
    text = f"{where}{list(i) if i else ''}: {_item(x[i])} vs {_item(y[i])}"
    return ("close" if worst <= RTOL_CLOSE else "differs"), worst, text


def _item(value) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def compare(a, b, where: str = "") -> tuple[str, float, str]:
    """("identical" | "close" | "differs", max relative difference, first difference)."""
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating, int)) or \
            isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return _compare_arrays(a, b, where)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return "differs", math.inf, f"{where}: length {len(a)} vs {len(b)}"
        return merge([compare(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b))])
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return "differs", math.inf, f"{where}: keys {sorted(map(str, a))} vs " \
                                        f"{sorted(map(str, b))}"
        return merge([compare(a[k], b[k], f"{where}.{k}") for k in a])
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return "differs", math.inf, f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if a == b:
        return "identical", 0.0, ""
    return "differs", math.inf, f"{where}: {_item(a)} vs {_item(b)}"[:200]


def merge(parts) -> tuple[str, float, str]:
    """The worst of several comparisons, with the first difference of that kind."""
    status = max((p[0] for p in parts), key=ORDER.get, default="identical")
    worst = max((p[1] for p in parts), default=0.0)
    first = next((p[2] for p in parts if p[0] == status and p[2]), "")
    return status, worst, first


def compare_stdout(a: str, b: str) -> str:
    """"identical", "numbers differ (max rel X)" or "differs at line N: ..."."""
    if a == b:
        return "identical"
    if NUMBER.sub("#", a) == NUMBER.sub("#", b):
        xs = [float(v) for v in NUMBER.findall(a)]
        ys = [float(v) for v in NUMBER.findall(b)]
        worst = max(abs(x - y) / max(abs(x), abs(y), 1e-6) for x, y in zip(xs, ys))
        return f"numbers differ (max rel {worst:.1e})"
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"differs at line {i + 1}: {x!r} vs {y!r}"[:300]
    return f"differs: {len(la)} lines vs {len(lb)}"


def _printed_status(stdout_verdict: str) -> str:
    """compare_stdout's verdict as identical / close / differs."""
    if stdout_verdict == "identical":
        return "identical"
    found = re.fullmatch(r"numbers differ \(max rel (.*)\)", stdout_verdict)
    return "close" if found and float(found.group(1)) <= RTOL_CLOSE else "differs"


def _parts(eager_result, other_result) -> dict[str, tuple[str, float, str]]:
    """Per part of `main`'s result: the examples' {"losses", "weights", "state"} by key,
    anything else as one part, "result"."""
    if isinstance(eager_result, dict) and isinstance(other_result, dict) and \
            set(RESULT_PARTS) <= set(eager_result) and set(RESULT_PARTS) <= set(other_result):
        keys = list(RESULT_PARTS) + sorted(
            str(k) for k in set(eager_result) | set(other_result) if k not in RESULT_PARTS)
        missing = object()
        return {k: compare(eager_result.get(k, missing), other_result.get(k, missing), k)
                for k in keys}
    return {"result": compare(eager_result, other_result, "result")}


def verdict(eager: dict, other: dict) -> dict:
    """Judge one run (`other`) against the eager run. Both are the records a child writes:
    "result" (main's return value made plain), "stdout", "error". Returns "status"
    (identical / close / differs / error), "match" (the long text, with the first
    difference), "short" (one cell of a table), "parts" and "stdout"."""
    if other.get("error") and other.get("result") is None:
        if eager.get("error") == other["error"]:
            return {"status": "identical", "match": f"same error as eager: {other['error']}",
                    "short": "identical (same error as eager)", "parts": {},
                    "stdout": compare_stdout(eager.get("stdout", ""), other.get("stdout", ""))}
        text = f"error: {other['error']}"
        return {"status": "error", "match": text, "short": text[:80], "parts": {}}
    if eager.get("error") and eager.get("result") is None:
        text = f"eager failed ({eager['error']}), this did not"
        return {"status": "differs", "match": text, "short": text[:80], "parts": {}}
    parts = _parts(eager.get("result"), other.get("result"))
    stdout = compare_stdout(eager.get("stdout", ""), other.get("stdout", ""))
    if stdout != "identical":
        parts["printed output"] = (_printed_status(stdout), 0.0, stdout)
    status, worst, _ = merge(list(parts.values()))
    out = {"status": status, "parts": {k: p[0] for k, p in parts.items()}, "stdout": stdout}
    if status == "identical":
        out["match"] = out["short"] = "identical"
    elif status == "close":
        out["match"] = out["short"] = f"close (max rel {worst:.1e})"
    else:
        out["match"] = "DIFFERS: " + "; ".join(
            f"{k} {p[0]}" + (f" ({p[2]})" if p[0] == "differs" else "")
            for k, p in parts.items() if p[0] != "identical")
        out["short"] = "DIFFERS: " + ", ".join(k for k, p in parts.items() if p[0] == "differs")
    if other.get("error"):
        out["match"] += f"; then error: {other['error']}"
        out["short"] += f"; then error: {other['error']}"[:80]
        out["status"] = "error"
    return out
