"""When the benchmark's noise, not the engine, would decide a verdict (issue 11 and 24; docs/gates.md, "Benchmark
noise"). Pure functions over the timed figures; ``gates.run`` applies them.

The noise of a series is its **spread**: the relative range of its blocks' p50s, ``(max - min) / median`` in
percent (``stats.spread_pct``). Three rules:

1. **A device-timed series that spreads past ``max_spread_pct`` is not a measurement.** With the launches replayed
   as a CUDA graph, a quiet GPU repeats an engine's device p50 within ~1 % block to block and run to run (lent
   H100/H200, bench/NOTES-gpu.md); eager launches of a launch-bound engine spread 15-57 %. Such a verdict is
   ``noisy`` whatever the thresholds, near or far (the figure would otherwise be published and become the next
   run's regression baseline). Host-clock series (CPU runners, usually shared) are judged by rule 2 only.
2. **Blocks that disagree.** Past the spread limit, a threshold that more blocks disagree on than
   :func:`allowed_dissent` tolerates is ``noisy``; one disturbed block of five is outvoted by the medians.
3. **A regression or drift threshold below the measured noise.** A change of 5 % cannot be told from noise that
   moves the figure by 8 %: where the threshold is below the larger of this run's and the baseline's spread, the
   check is ``noisy`` when the change lies within that noise of the threshold, and stands (with a note saying the
   threshold is below the noise) when it lies beyond. ``validate`` refuses the static case, a threshold below the
   spread the gate accepts (``manifest.checks``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from orchestrator.contracts.runtime import DEVICE_CLOCKS
from orchestrator.gates.verdict import BenchmarkVerdict, GatedSeries, ShapeBenchmark


def allowed_dissent(blocks: int) -> int:
    """How many blocks may disagree with the medians' verdict before a wide spread makes it noisy: one in five
    (a single disturbed block of the default five is outvoted; two are not)."""
    return blocks // 5


@dataclass(frozen=True)
class Baseline:
    """One shape of a baseline verdict: what a regression check compares with."""

    p50_ms: float
    input_shapes: Mapping[str, tuple[int, ...]]
    series: GatedSeries
    spread_pct: float
    clock: str = ""  # "": not known (compared as it is)


def baselines(baseline: BenchmarkVerdict | Mapping | None) -> dict[str, Baseline]:
    """label -> the gated series' p50, input shapes, series name and spread of a baseline verdict (object or JSON)."""
    if baseline is None:
        return {}
    verdict = baseline if isinstance(baseline, BenchmarkVerdict) else BenchmarkVerdict.from_json(dict(baseline))
    return {s.label: Baseline(s.gated.p50_ms, s.input_shapes, s.gated_name, s.gated.spread_pct, s.clock)
            for s in verdict.shapes}


def _per_block(shape: ShapeBenchmark) -> str:
    text = f"p50 per block: {', '.join(f'{x:.3f}' for x in shape.gated.block_p50_ms)} ms"
    if shape.conditions:
        text += "; GPU per block: " + "; ".join(c.text() for c in shape.conditions)
    return text


def spread_noisy(shape: ShapeBenchmark, max_spread_pct: float) -> str | None:
    """Rule 1: why ``shape`` has no verdict, or None."""
    stats = shape.gated
    if shape.clock not in DEVICE_CLOCKS or shape.gated_name != "compute" or stats.spread_pct <= max_spread_pct:
        return None
    how = "CUDA-graph replays" if shape.clock == "cuda_graph" else "eager launches (no CUDA graph)"
    return (f"{shape.label}: the device series ({how}) spread {stats.spread_pct:.1f}% over its {stats.blocks} "
            f"blocks > max_spread_pct {max_spread_pct:g}%: not a measurement of the engine ({_per_block(shape)})")


Kind = Literal["noisy", "note"]


def threshold_noise(label: str, name: str, change_pct: float, threshold: float, noise_pct: float,
                    where: str) -> tuple[Kind, str] | None:
    """Rule 3 for a change against a baseline: None when ``threshold`` is not below ``noise_pct``; else ("noisy",
    why) when the change is within the noise of the threshold, ("note", why it stands) when beyond."""
    if threshold >= noise_pct:
        return None
    head = (f"{label}: {name}: {threshold:g}% is below the measured noise {noise_pct:.1f}% ({where}); the change is "
            f"{change_pct:+.1f}%")
    if abs(change_pct - threshold) <= noise_pct:
        return "noisy", head + ", within the noise of the threshold: no verdict"
    return "note", head + ", beyond the noise: the verdict stands"


def regression_noise(shape: ShapeBenchmark, base: Baseline, threshold: float, name: str) -> tuple[Kind, str] | None:
    """Rule 3 for ``max_regression_pct`` (and the drift latency threshold): the noise is the larger of this run's
    spread and the baseline's."""
    if shape.regression_pct is None:
        return None
    noise = max(shape.gated.spread_pct, base.spread_pct)
    where = f"this run's blocks spread {shape.gated.spread_pct:.1f}%, the baseline's {base.spread_pct:.1f}%"
    return threshold_noise(shape.label, name, shape.regression_pct, threshold, noise, where)
