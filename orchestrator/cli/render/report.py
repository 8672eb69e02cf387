"""The matrix report: one static HTML page, a JSON form, and a rich table for the terminal.

Input: a list of *cells*, one per built engine (matrix cell), each a plain dict::

    {
      "address":     "vision/detector@1.2.0/fp16/default/sm89+trt10.13",   # the cell address (str)
      "model":       "detector",           # model name (str)
      "precision":   "fp16",               # fp32 | fp16 | bf16 | int8 | fp8
      "profile_set": "default",            # profile set name
      "target":      "sm89+trt10.13",      # target slug or name: one column per distinct value
      "status":      "passed",             # passed | failed | pending | noisy | blocked | skipped | error | held
      "parity":      {...} | None,         # ParityVerdict.to_json(), or None when not run
      "benchmark":   {...} | None,         # BenchmarkVerdict.to_json(), or None when not run
      "note":        "built on a CPU runner; needs sm89 to gate",   # optional, shown under the status
      "reasons":     ["build failed: ..."],  # optional: reasons beyond the verdicts' own (build errors, ...)
      "caveats":     ["fp16 parity was judged on a CPU only ..."],  # optional: what the verdicts do not show
    }

Rows are model × precision × profile set, columns are targets (first-seen order). A cell shows its status
(colour + text) and why (its note, else its first failure reason: which output, which metric, the value against
its threshold), p50/p95 in ms of the gated series at the ``opt`` shape and the spread of its timing blocks'
p50s, the worst parity error (largest max abs error over outputs and cases) and a latency histogram; a detail
card per cell below the grid adds the
parity error per output (max abs and relative L2, log-scale bars) and every failure reason.

The page is self-contained: inline CSS and inline SVG, no scripts, fonts or URLs, so it opens from a CI
artifact or an e-mail attachment. Computing (``cell_summary``) is separate from rendering.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from orchestrator.atomic import write_bytes_atomic
from orchestrator.contracts.runtime import DEVICE_CLOCKS
from orchestrator.gates.verdict import shape_gated_series

STATUS_COLOURS = {
    "passed": ("#1a7f37", "#dafbe1"),
    "failed": ("#cf222e", "#ffebe9"),
    "pending": ("#9a6700", "#fff8c5"),
    "noisy": ("#bc4c00", "#fff1e5"),
    "blocked": ("#57606a", "#eaeef2"),
    "skipped": ("#57606a", "#f6f8fa"),
    "error": ("#8250df", "#fbefff"),
    "held": ("#cf222e", "#fff8c5"),  # not gated, and held back: the ONNX it was built from failed parity
}
_UNKNOWN_COLOUR = ("#57606a", "#f6f8fa")


def _fmt_ms(value: float | None) -> str:
    return "—" if value is None else (f"{value:.3f}" if value < 10 else f"{value:.1f}")


def _fmt_spread(value: float | None) -> str:
    """The relative range of the timing blocks' p50s (gates.stats.spread_pct); empty for one block."""
    return "" if not value else f"{value:.0f}%" if value >= 10 else f"{value:.1f}%"


def _fmt_err(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return "0" if value == 0 else f"{value:.2e}"


def _num(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(value, value))
    return float(value)


def _gated_shape(benchmark: dict | None) -> dict | None:
    if not benchmark or not benchmark.get("shapes"):
        return None
    shapes = benchmark["shapes"]
    return next((s for s in shapes if s.get("label") == "opt"), shapes[0])


def parity_by_output(parity: dict | None) -> list[dict]:
    """Per output, the worst over cases: ``{name, max_abs_error, rel_l2, status}``."""
    if not parity:
        return []
    merged: dict[str, dict] = {}
    for case in parity.get("cases", ()):
        for out in case.get("outputs", ()):
            cur = merged.setdefault(out["name"], {"name": out["name"], "max_abs_error": 0.0, "rel_l2": 0.0,
                                                  "status": "passed"})
            for key in ("max_abs_error", "rel_l2"):
                v = _num(out.get(key))
                if v is not None and (math.isnan(v) or v > cur[key]):
                    cur[key] = v
            if out.get("status") == "failed":
                cur["status"] = "failed"
    return list(merged.values())


def cell_summary(cell: dict) -> dict:
    """What the grid shows for one cell (pure; used by the HTML, the JSON and the rich table)."""
    shape = _gated_shape(cell.get("benchmark"))
    series = e2e = None
    samples: list[float] = []
    gated = shape_gated_series(shape) if shape else None
    if shape and gated:
        series = shape.get(gated)
        samples = list(shape.get(f"{gated}_samples_ms") or [])
        e2e = shape.get("end_to_end") if gated == "compute" else None  # reported beside the device series
    outputs = parity_by_output(cell.get("parity"))
    worst = max(outputs, key=lambda o: (math.isnan(o["max_abs_error"]), o["max_abs_error"]), default=None)
    bench = cell.get("benchmark") or {}
    reasons = [str(r) for r in cell.get("reasons") or ()]
    reasons += [r for r in (cell.get("parity") or {}).get("reasons", ()) if r not in reasons]
    reasons += list(bench.get("reasons", ())) + list(bench.get("noisy", ()))
    note = cell.get("note")
    drift = drift_summary(cell.get("drift"))
    memory = cell.get("memory") or {}
    soak = cell.get("soak") or {}
    return {
        "address": cell.get("address", ""),
        "status": str(cell.get("status", "pending")),
        "p50_ms": series.get("p50_ms") if series else None,
        "p95_ms": series.get("p95_ms") if series else None,
        "series": ("end-to-end" if gated == "end_to_end" else "device" if str(shape.get("clock")) in DEVICE_CLOCKS
                   else "compute") if shape and gated else None,
        "end_to_end_p50_ms": e2e.get("p50_ms") if e2e else None,
        "end_to_end_spread_pct": e2e.get("spread_pct") if e2e else None,
        "shape_label": shape.get("label") if shape else None,
        "worst_output": worst["name"] if worst else None,
        "worst_max_abs": worst["max_abs_error"] if worst else None,
        "outputs": outputs,
        "samples_ms": samples,
        "spread_pct": series.get("spread_pct") if series else None,
        "reasons": reasons,
        "note": note,
        "caveats": [str(c) for c in cell.get("caveats") or ()],
        "why": note or (reasons[0] if reasons else None),
        "drift": drift,
        "task": task_summary(cell.get("parity")),
        "task_case": (task_case(cell.get("parity")) or {}).get("label"),
        "device_memory_mib": (_mib(memory.get("device_memory_bytes")) if memory.get("device_memory_bytes")
                               is not None else _mib(shape.get("device_memory_bytes")) if shape else None),
        "memory_shape": memory.get("shape") if memory.get("device_memory_bytes") is not None else None,
        "memory_threshold_mib": memory.get("threshold_mib"),
        "engine_mib": _mib(memory.get("engine_bytes")),
        "soak_growth_mib": soak.get("growth_mib"),
        "cpu": cpu_text(cell.get("cpu")),
    }


def cpu_text(cpu: object) -> str | None:
    """``AMD EPYC: avx fma avx2 avx512f ...`` for a CPU engine's verdict (the ISA it holds for); None otherwise."""
    if not isinstance(cpu, dict):
        return None
    features = " ".join(str(f) for f in cpu.get("features") or ()) if cpu.get("source") else "ISA unknown"
    declared = " (declared)" if cpu.get("source") == "ORCHESTRATE_CPU_FEATURES" else ""
    return f"{cpu.get('model') or 'CPU'}: {features or 'none of the kernel-selecting features'}{declared}"


def _mib(value: object) -> float | None:
    return float(value) / 2**20 if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _task_margin(task: dict) -> float:
    """How far a case's task metrics are from failing: the smallest margin to a threshold, relative to the bound
    (negative: beyond it; NaN: -inf; no threshold checked: +inf)."""
    worst = math.inf
    for name, bound in (task.get("thresholds") or {}).items():
        side, _, metric = str(name).partition("_")
        value = _num((task.get("metrics") or {}).get(metric))
        if side not in ("min", "max") or value is None or not isinstance(bound, (int, float)):
            continue
        if math.isnan(value):
            return -math.inf
        margin = (value - bound) if side == "min" else (bound - value)
        worst = min(worst, margin / max(abs(float(bound)), 1e-12))
    return worst


def task_case(parity: dict | None) -> dict | None:
    """The case whose task metrics stand for the verdict: the first whose task failed, else the one nearest to a
    threshold (the first of equals), else the first with metrics. None: no case has task metrics."""
    cases = [c for c in (parity or {}).get("cases") or () if ((c.get("task") or {}).get("metrics"))]
    if not cases:
        return None
    failed = [c for c in cases if c["task"].get("status") == "failed"]
    return failed[0] if failed else min(cases, key=lambda c: _task_margin(c["task"]))


def task_summary(parity: dict | None) -> dict[str, float]:
    """The task metrics of the shown parity verdict, from its failing or worst case (``task_case``)."""
    case = task_case(parity)
    metrics = ((case or {}).get("task") or {}).get("metrics") or {}
    return {k: n for k, n in ((k, _num(v)) for k, v in metrics.items()) if n is not None}


def drift_summary(drift: dict | None) -> dict | None:
    """One cell's drift comparison, flattened for the grid: the baseline (address, builder version), samples
    compared, the worst cosine / rel-L2 over the outputs, the task metrics against the baseline, p50 before and
    after, status and reasons. None: drift off or nothing to compare."""
    if not drift:
        return None
    outputs, latency = drift.get("outputs") or {}, drift.get("latency") or {}
    base = outputs.get("baseline") or latency.get("baseline")
    if not base:
        return None
    metrics = list((outputs.get("outputs") or {}).values())
    cosines = [c for c in (_num(m.get("cosine")) for m in metrics) if c is not None]
    rel_l2 = [c for c in (_num(m.get("rel_l2")) for m in metrics) if c is not None]
    statuses = {outputs.get("status"), latency.get("status")}
    return {"baseline": str(base.get("address", "")), "builder_version": str(base.get("builder_version", "")),
            "compared": outputs.get("compared"), "worst_cosine": min(cosines) if cosines else None,
            "worst_rel_l2": max(rel_l2) if rel_l2 else None,
            "task": {k: v for k, v in ((k, _num(v)) for k, v in (outputs.get("task") or {}).items()) if v is not None},
            "p50_ms": _num(latency.get("p50_ms")), "baseline_p50_ms": _num(latency.get("baseline_p50_ms")),
            "change_pct": _num(latency.get("change_pct")),
            "status": "failed" if "failed" in statuses else "passed",
            "reasons": [*outputs.get("reasons", ()), *latency.get("reasons", ())],
            "notes": [*outputs.get("notes", ()), *latency.get("notes", ())]}


def drift_bars_svg(drift: dict | None, *, width: int = 260) -> str:
    """Two bars: the baseline's p50 and this engine's, on one scale (empty when latency was not compared)."""
    if not drift or drift.get("baseline_p50_ms") is None or drift.get("p50_ms") is None:
        return ""
    old, new = float(drift["baseline_p50_ms"]), float(drift["p50_ms"])
    top = max(old, new) or 1.0
    rows = []
    for i, (label, value, colour) in enumerate(((drift["builder_version"], old, "#8c959f"),
                                                ("this engine", new, "#0969da"))):
        y = 4 + i * 18
        w = max(1.0, (width - 150) * value / top)
        rows.append(f'<text x="0" y="{y + 11}" font-size="10">{html.escape(str(label))}</text>'
                    f'<rect x="80" y="{y}" width="{w:.1f}" height="12" fill="{colour}"/>'
                    f'<text x="{84 + w:.1f}" y="{y + 11}" font-size="10">{value:.3g} ms</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="42" role="img" '
            f'aria-label="p50 against the drift baseline">{"".join(rows)}</svg>')


# -- per-model plots: latency per target and precision, accuracy against latency ------------------------------

# The task metric a scatter plots, first found wins (labels first: the user's own answers); without a task the
# tensor agreement of the worst output stands in.
ACCURACY_METRICS = ("accuracy", "map50", "label_text_accuracy", "label_mask_iou", "top1_agreement", "text_accuracy",
                    "box_recall", "mask_iou")
_PRECISION_COLOURS = {"fp32": "#0969da", "fp16": "#1a7f37", "bf16": "#8250df", "int8": "#bf8700", "fp8": "#cf222e"}


def accuracy_of(s: dict) -> tuple[str, float] | None:
    """(metric name, value) of a cell summary for the accuracy axis; None when the cell has neither."""
    for name in ACCURACY_METRICS:
        if name in s["task"]:
            return name, float(s["task"][name])
    rel = [o["rel_l2"] for o in s["outputs"] if o.get("rel_l2") is not None and math.isfinite(o["rel_l2"])]
    return ("1 - rel-L2 (worst output)", 1.0 - max(rel)) if rel else None


def latency_chart_svg(points: Sequence[tuple[str, str, float, float | None]], *, width: int = 560) -> str:
    """One model's p50 (bar) and p95 (tick) per (target, precision), grouped by target; empty without points."""
    if not points:
        return ""
    targets = list(dict.fromkeys(t for t, _, _, _ in points))
    precisions = list(dict.fromkeys(p for _, p, _, _ in points))
    top = max(max(p50, p95 or 0.0) for _, _, p50, p95 in points) or 1.0
    plot_h, left, bottom = 120, 44, 34
    group_w = (width - left) / len(targets)
    bar_w = max(4.0, min(28.0, (group_w - 10) / len(precisions)))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{plot_h + bottom + 16}" role="img" '
             f'aria-label="latency per target and precision">',
             f'<text x="0" y="10" font-size="10" fill="#57606a">{_fmt_ms(top)} ms</text>',
             f'<line x1="{left}" y1="{plot_h + 8}" x2="{width}" y2="{plot_h + 8}" stroke="#d0d7de"/>']
    by_key = {(t, p): (p50, p95) for t, p, p50, p95 in points}
    for i, target in enumerate(targets):
        x0 = left + i * group_w
        for j, precision in enumerate(precisions):
            if (target, precision) not in by_key:
                continue
            p50, p95 = by_key[(target, precision)]
            h = plot_h * p50 / top
            x = x0 + 4 + j * bar_w
            colour = _PRECISION_COLOURS.get(precision, "#57606a")
            parts.append(f'<rect x="{x:.1f}" y="{plot_h + 8 - h:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" '
                         f'fill="{colour}"><title>{html.escape(f"{target} {precision}: p50 {p50:.3g} ms")}'
                         f'</title></rect>')
            if p95 is not None:
                y = plot_h + 8 - plot_h * p95 / top
                parts.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + bar_w - 2:.1f}" y2="{y:.1f}" '
                             f'stroke="#cf222e" stroke-width="2"/>')
        parts.append(f'<text x="{x0 + 4:.1f}" y="{plot_h + 22}" font-size="10">{html.escape(target)}</text>')
    for j, precision in enumerate(precisions):
        colour = _PRECISION_COLOURS.get(precision, "#57606a")
        parts.append(f'<rect x="{left + j * 60}" y="{plot_h + bottom + 4}" width="8" height="8" fill="{colour}"/>'
                     f'<text x="{left + j * 60 + 11}" y="{plot_h + bottom + 12}" font-size="10">'
                     f'{html.escape(precision)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def accuracy_scatter_svg(points: Sequence[tuple[str, str, float, float]], metric: str, *,
                         width: int = 360, height: int = 180) -> str:
    """One model's cells as points: p50 (x) against ``metric`` (y), coloured by precision; empty without points."""
    if not points:
        return ""
    xs, ys = [p[2] for p in points], [p[3] for p in points]
    x_hi = max(xs) * 1.1 or 1.0
    y_lo = min(min(ys), 0.9) if min(ys) > 0 else min(ys)
    y_hi = max(max(ys), 1.0)
    span = (y_hi - y_lo) or 1.0
    left, top, plot_w, plot_h = 40, 8, width - 52, height - 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(metric, quote=True)} against p50 latency">',
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#d0d7de"/>',
             f'<text x="0" y="{top + 8}" font-size="9" fill="#57606a">{y_hi:.3g}</text>',
             f'<text x="0" y="{top + plot_h}" font-size="9" fill="#57606a">{y_lo:.3g}</text>',
             f'<text x="{left}" y="{height - 4}" font-size="9" fill="#57606a">p50 ms (0 .. {x_hi:.3g}) · '
             f'{html.escape(metric)}</text>']
    for target, precision, x, y in points:
        cx = left + plot_w * x / x_hi
        cy = top + plot_h * (1 - (y - y_lo) / span)
        colour = _PRECISION_COLOURS.get(precision, "#57606a")
        label = f"{target} {precision}: p50 {x:.3g} ms, {metric} {y:.4g}"
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{colour}"><title>{html.escape(label)}'
                     f'</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def model_plots(cells: Sequence[dict], summaries: dict[int, dict]) -> list[dict]:
    """Per model: the latency chart and the accuracy-vs-latency scatter of its cells that have figures."""
    models: dict[str, list[dict]] = {}
    for cell in cells:
        models.setdefault(str(cell.get("model", "")), []).append(cell)
    out = []
    for model, mine in models.items():
        latency, scatter, metrics = [], [], []
        for cell in mine:
            s = summaries[id(cell)]
            if s["p50_ms"] is None:
                continue
            target, precision = str(cell.get("target", "")), str(cell.get("precision", ""))
            latency.append((target, precision, float(s["p50_ms"]), s["p95_ms"]))
            acc = accuracy_of(s)
            if acc is not None:
                metrics.append(acc[0])
                scatter.append((target, precision, float(s["p50_ms"]), acc[1]))
        if not latency:
            continue
        metric = max(set(metrics), key=metrics.count) if metrics else ""
        points = [p for p, m in zip(scatter, metrics) if m == metric]
        out.append({"model": model, "latency": latency_chart_svg(latency), "metric": metric,
                    "scatter": accuracy_scatter_svg(points, metric) if points else ""})
    return out


# -- inline SVG -----------------------------------------------------------------------------------------------


def histogram_svg(samples_ms: Sequence[float], *, width: int = 180, height: int = 46, bins: int = 20) -> str:
    """A small latency histogram with p50/p95 ticks; empty string without samples."""
    data = sorted(float(x) for x in samples_ms if x is not None and math.isfinite(float(x)))
    if not data:
        return ""
    lo, hi = data[0], data[-1]
    span = (hi - lo) or max(hi, 1e-9) * 0.01
    counts = [0] * bins
    for x in data:
        counts[min(bins - 1, int((x - lo) / span * bins))] += 1
    top = max(counts)
    plot_h = height - 12
    bar_w = width / bins
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="latency histogram">']
    for i, c in enumerate(counts):
        h = plot_h * c / top
        parts.append(f'<rect x="{i * bar_w + 0.5:.1f}" y="{plot_h - h:.1f}" width="{bar_w - 1:.1f}" '
                     f'height="{h:.1f}" fill="#54aeff"/>')

    def tick(value: float, colour: str) -> str:
        x = (value - lo) / span * width
        return f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{plot_h}" stroke="{colour}" stroke-width="1.5"/>'

    n = len(data)
    p50 = data[min(n - 1, int(0.5 * (n - 1) + 0.5))]
    p95 = data[min(n - 1, int(0.95 * (n - 1) + 0.5))]
    parts += [tick(p50, "#1a7f37"), tick(p95, "#cf222e")]
    parts.append(f'<text x="0" y="{height - 1}" font-size="9" fill="#57606a">{_fmt_ms(lo)}</text>')
    parts.append(f'<text x="{width}" y="{height - 1}" font-size="9" fill="#57606a" text-anchor="end">'
                 f'{_fmt_ms(hi)} ms</text>')
    parts.append("</svg>")
    return "".join(parts)


def parity_bars_svg(outputs: Sequence[dict], *, width: int = 420) -> str:
    """Log-scale bars of max abs error and relative L2 per output (1e-8 … 10)."""
    if not outputs:
        return ""
    label_w, row_h, lo, hi = 120, 30, -8.0, 1.0
    plot_w = width - label_w - 70
    height = row_h * len(outputs) + 22

    def bar_len(v: float | None) -> float:
        if v is None or math.isnan(v):
            return plot_w
        if v <= 0:
            return 1.0
        return max(1.0, min(plot_w, (math.log10(v) - lo) / (hi - lo) * plot_w))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="parity error per output">']
    for i, out in enumerate(outputs):
        y = i * row_h + 4
        name = html.escape(out["name"][:18])
        parts.append(f'<text x="0" y="{y + 14}" font-size="11" fill="#24292f">{name}</text>')
        for j, (key, colour) in enumerate((("max_abs_error", "#fb8f44"), ("rel_l2", "#8250df"))):
            v = out.get(key)
            w = bar_len(v)
            parts.append(f'<rect x="{label_w}" y="{y + j * 12}" width="{w:.1f}" height="10" fill="{colour}"/>')
            parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + j * 12 + 9}" font-size="9" fill="#24292f">'
                         f'{_fmt_err(v)}</text>')
    axis_y = height - 6
    for exp in range(int(lo), int(hi) + 1, 3):
        x = label_w + (exp - lo) / (hi - lo) * plot_w
        parts.append(f'<text x="{x:.1f}" y="{axis_y}" font-size="9" fill="#57606a" text-anchor="middle">'
                     f'1e{exp}</text>')
    parts.append(f'<rect x="{width - 62}" y="2" width="8" height="8" fill="#fb8f44"/>'
                 f'<text x="{width - 51}" y="10" font-size="9">max abs</text>'
                 f'<rect x="{width - 62}" y="14" width="8" height="8" fill="#8250df"/>'
                 f'<text x="{width - 51}" y="22" font-size="9">rel L2</text>')
    parts.append("</svg>")
    return "".join(parts)


# -- page, JSON, terminal -------------------------------------------------------------------------------------


def _grid(cells: Sequence[dict]) -> tuple[list[str], list[dict]]:
    targets: list[str] = []
    rows: dict[tuple, dict] = {}
    for cell in cells:
        target = str(cell.get("target", ""))
        if target not in targets:
            targets.append(target)
        key = (cell.get("model", ""), cell.get("precision", ""), cell.get("profile_set", "default"))
        row = rows.setdefault(key, {"model": key[0], "precision": key[1], "profile_set": key[2], "cells": {}})
        row["cells"][target] = cell
    return targets, list(rows.values())


def render_report(cells: Sequence[dict], out_path: str | Path, *, title: str = "Engine matrix") -> Path:
    """Write the static HTML report for ``cells`` to ``out_path``; returns the path."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(str(Path(__file__).parent / "templates")),
                      autoescape=select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)
    targets, rows = _grid(cells)
    summaries = {id(c): cell_summary(c) for c in cells}
    for row in rows:
        row["views"] = {}
        for target, cell in row["cells"].items():
            s = summaries[id(cell)]
            fg, bg = STATUS_COLOURS.get(s["status"], _UNKNOWN_COLOUR)
            row["views"][target] = dict(s, fg=fg, bg=bg, hist=histogram_svg(s["samples_ms"]),
                                        bars=parity_bars_svg(s["outputs"]), p50=_fmt_ms(s["p50_ms"]),
                                        p95=_fmt_ms(s["p95_ms"]), worst=_fmt_err(s["worst_max_abs"]),
                                        spread=_fmt_spread(s["spread_pct"]),
                                        model=cell.get("model"), precision=cell.get("precision"),
                                        target=target, drift_bars=drift_bars_svg(s["drift"]),
                                        drift_text=drift_text(s["drift"]),
                                        memory=memory_text(s),
                                        task_text=(", ".join(f"{k} {v:.3g}" for k, v in s["task"].items())
                                                   + (f" ({s['task_case']})" if s["task"] and s["task_case"]
                                                      else "")))
    counts: dict[str, int] = {}
    for s in summaries.values():
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    page = env.get_template("report.html.j2").render(
        title=title, targets=targets, rows=rows, counts=counts, colours=STATUS_COLOURS,
        plots=model_plots(list(cells), summaries),
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, page.encode("utf-8"))
    return out


def _fmt_mib(value: float | None) -> str:
    return "" if value is None else f"{value:.1f} MiB"


def memory_text(s: dict) -> str:
    """``device 412.0 MiB at max (≤ 512) · engine 24.3 MiB · soak +0.4 MiB``: what the memory gate measured."""
    parts = []
    if s.get("device_memory_mib") is not None:
        parts.append(f"device {_fmt_mib(s['device_memory_mib'])}"
                     + (f" at {s['memory_shape']}" if s.get("memory_shape") else "")
                     + (f" (≤ {s['memory_threshold_mib']:g})" if s.get("memory_threshold_mib") is not None else ""))
    if s.get("engine_mib") is not None:
        parts.append(f"engine {_fmt_mib(s['engine_mib'])}")
    if s.get("soak_growth_mib") is not None:
        parts.append(f"soak {s['soak_growth_mib']:+.1f} MiB")
    return " · ".join(parts)


def drift_text(drift: dict | None) -> str:
    """One line: against which builder version, the worst cosine, the task metrics and the p50 change."""
    if not drift:
        return ""
    parts = [f"vs {drift['builder_version']}"]
    if drift.get("worst_cosine") is not None:
        parts.append(f"cosine {drift['worst_cosine']:.6g}")
    parts += [f"{k} {v:.3g}" for k, v in (drift.get("task") or {}).items()]
    if drift.get("change_pct") is not None:
        parts.append(f"p50 {drift['baseline_p50_ms']:.3g} → {drift['p50_ms']:.3g} ms ({drift['change_pct']:+.1f}%)")
    return ", ".join(parts)


def report_json(cells: Sequence[dict]) -> dict:
    """The report as JSON-ready data: the cells as given plus each one's summary and status counts."""
    summaries = []
    for cell in cells:
        s = cell_summary(cell)
        s.pop("samples_ms")
        summaries.append({**{k: cell.get(k) for k in ("address", "model", "precision", "profile_set", "target")},
                          **{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                             for k, v in s.items()}})
    counts: dict[str, int] = {}
    for s in summaries:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    return {"version": 1, "counts": counts, "summary": summaries, "cells": list(cells)}


def summary_table(cells: Iterable[dict]):
    """A ``rich.table.Table``: one line per cell with status, p50/p95 (and the blocks' spread), the worst parity
    error, the drift against the previous builder version and why a cell is not passed (its note or first
    reason). A measurement column no cell has a value in is left out, so a narrow terminal keeps room for the
    reasons. Every cell text is escaped: names and tool messages (``pip install 'trt-orchestrator[ort]'``) are
    not markup."""
    from rich.markup import escape
    from rich.table import Table

    columns: tuple[tuple[str, Literal["left", "right"], bool], ...] = (  # (name, justify, always shown)
        ("model", "left", True), ("precision", "left", True), ("profile set", "left", True),
        ("target", "left", True), ("status", "left", True), ("p50 ms", "right", False),
        ("p95 ms", "right", False), ("spread", "right", False), ("worst abs err", "right", False),
        ("memory", "left", False), ("drift", "left", False), ("why", "left", True))
    rows: list[tuple[str, ...]] = []
    for cell in cells:
        s = cell_summary(cell)
        fg = STATUS_COLOURS.get(s["status"], _UNKNOWN_COLOUR)[0]
        why = "" if s["status"] == "passed" and not s["note"] else (s["why"] or "")
        if not why and s["caveats"]:
            why = "caveat: " + s["caveats"][0]
        rows.append((escape(str(cell.get("model", ""))), escape(str(cell.get("precision", ""))),
                     escape(str(cell.get("profile_set", ""))), escape(str(cell.get("target", ""))),
                     f"[{fg}]{escape(s['status'])}[/]", _fmt_ms(s["p50_ms"]), _fmt_ms(s["p95_ms"]),
                     _fmt_spread(s["spread_pct"]) or "—",
                     _fmt_err(s["worst_max_abs"]) + (f" ({escape(str(s['worst_output']))})"
                                                    if s["worst_output"] else ""),
                     escape(memory_text(s)) or "—", escape(drift_text(s["drift"])) or "—", escape(str(why))))
    shown = [i for i, (_, _, always) in enumerate(columns)
             if always or any(row[i] not in ("—", "") for row in rows)]
    table = Table(title="Gate results")
    for i in shown:
        table.add_column(columns[i][0], justify=columns[i][1])
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    return table
