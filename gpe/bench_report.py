"""`gpe bench PROGRAM`'s output: a table per program, a summary table over programs, the
JSON file and the plot of step times. The tables are Markdown, readable as text."""
from __future__ import annotations

import importlib.util
import json
import math

from .bench_program import WAYS

SCHEMA = 1
COLORS = {"eager": "tab:blue", "tf.function": "tab:orange", "gpe": "tab:green"}


def _ms(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _sliced(row: dict) -> str:
    if not row.get("calls"):
        return "-"
    return f"{row['sliced_calls']}/{row['calls']} ({row['sliced_calls'] / row['calls']:.0%})"


def _eager_calls(row: dict) -> str:
    if row.get("calls") is None:
        return "-"
    text = str(row.get("eager_calls", 0))
    overhead = row.get("fallback_overhead")
    if overhead is not None:
        text += f" ({overhead * 100:+.0f}%/call)"
    return text


def _match(row: dict, way: str) -> str:
    if way == "eager":
        return f"error: {row['error']}" if row.get("error") else "(reference)"
    text = row.get("short") or (f"error: {row['error']}" if row.get("error") else "-")
    return text.replace("|", "/").replace("\n", " ")[:100]


def program_table(summary: dict) -> str:
    """One row per way for one program."""
    ways = summary["ways"]
    step = next((r["step"] for r in ways.values() if r.get("step")), "?")
    runs = max((r.get("runs") or 0) for r in ways.values())
    lines = [f"{summary['program']}: {summary['steps']} steps, {runs} run(s) per way; "
             f"ms/step: median interval between calls of {step}",
             "| way | ms/step | mean to end | vs eager | vs tf.function | build s | sliced calls | "
             "eager calls (overhead) | matches eager |", "|" + "---|" * 9]
    for way in WAYS:
        row = ways[way]
        build = "-" if row.get("build_s") is None else f"{row['build_s']:.2f}"
        sliced = _sliced(row) if way == "gpe" else "-"
        eager_calls = _eager_calls(row) if way == "gpe" else "-"
        ms = "error" if row.get("error") and row.get("ms_per_step") is None \
            else _ms(row.get("ms_per_step"))
        lines.append(f"| {way} | {ms} | {_ms(row.get('ms_to_end'))} | "
                     f"{_x(row.get('vs_eager'))} | {_x(row.get('vs_tf_function'))} | {build} | "
                     f"{sliced} | {eager_calls} | {_match(row, way)} |")
    for way in WAYS[1:]:
        if ways[way].get("status") not in (None, "identical", "close"):
            lines.append(f"  {way}: {ways[way]['match']}"[:300])
    reasons = ways["gpe"].get("reasons") or []
    lines += [f"  gpe ran eagerly: {r}"[:200] for r in reasons[:5]]
    return "\n".join(lines)


def summary_table(summaries: list[dict]) -> str:
    """One row per program: the figures a reader compares."""
    lines = ["| program | eager ms/step | tf.function ms/step (vs eager) | gpe ms/step "
             "(vs eager) | gpe vs tf.function | gpe build s | gpe sliced calls | "
             "gpe eager calls (overhead) | tf.function result | gpe result |",
             "|" + "---|" * 10]
    for s in summaries:
        e, t, g = (s["ways"][w] for w in WAYS)

        def timed(row):
            if row.get("ms_per_step") is None:
                return "error" if row.get("error") else "-"
            return f"{_ms(row['ms_per_step'])} ({_x(row.get('vs_eager'))})"
        build = "-" if g.get("build_s") is None else f"{g['build_s']:.2f}"
        eager_ms = _ms(e["ms_per_step"]) if e.get("ms_per_step") is not None else timed(e)
        lines.append(f"| {s['program']} | {eager_ms} | "
                     f"{timed(t)} | {timed(g)} | {_x(g.get('vs_tf_function'))} | {build} | "
                     f"{_sliced(g)} | {_eager_calls(g)} | {_match(t, 'tf.function')} | "
                     f"{_match(g, 'gpe')} |")
    return "\n".join(lines)


def _clean(value):
    """JSON-safe: infinities and NaN as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(path: str, summaries: list[dict], settings: dict) -> None:
    with open(path, "w") as f:
        json.dump(_clean({"schema": SCHEMA, "settings": settings, "programs": summaries}),
                  f, indent=1, default=str)


def plot_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def write_plot(path: str, summaries: list[dict]) -> None:
    """A PNG: per program, each way's step times (ms, log scale: the interval between
    successive calls of the timed step) against the call number, from the first run; a
    dashed line where the warm-up ends."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    count = len(summaries)
    cols = min(count, 3)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for ax, s in zip(axes.flat, summaries):
        for way in WAYS:
            times = s["ways"][way].get("intervals_ms") or []
            if times:
                ax.plot(range(2, len(times) + 2), times, label=way, linewidth=1,
                        color=COLORS[way])
        warmup = s["ways"]["eager"].get("warmup")
        if warmup:
            ax.axvline(warmup + 1, color="grey", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title(s["program"], fontsize=10)
        ax.set_xlabel("call of the timed step (dashed: end of warm-up)")
        ax.set_ylabel("ms per step")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
