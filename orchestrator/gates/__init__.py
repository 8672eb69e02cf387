"""Accuracy-parity and benchmark gates.

Pure core: ``metrics`` (parity numbers), ``tolerances`` (defaults per precision, override resolution),
``stats`` (latency percentiles), ``noise`` (when the benchmark's noise would decide a verdict), ``verdict``
(dataclasses + JSON). Edge: ``inputs`` (random tensors and dataset files), ``conditions`` (the GPU's clock and
temperature per benchmark block, through NVML) and ``run`` (drives injected ``Session`` objects). No runtime is
imported here.
"""

from orchestrator.gates.inputs import InputCase, benchmark_inputs, gate_cases, random_cases, random_shapes
from orchestrator.gates.metrics import compare_output, cosine_similarity, relative_l2, topk_agreement, violation_mask
from orchestrator.gates.run import run_benchmark, run_parity
from orchestrator.gates.stats import LatencyStats, latency_stats, percentile_linear, percentile_trtexec
from orchestrator.gates.tolerances import (
    DEFAULT_TOLERANCES,
    ResolvedTolerance,
    default_tolerance_table,
    resolve_tolerance,
)
from orchestrator.gates.verdict import (
    BenchmarkVerdict,
    CaseVerdict,
    OutputVerdict,
    ParityVerdict,
    ShapeBenchmark,
    TaskVerdict,
    WorstElement,
)

__all__ = [
    "InputCase", "benchmark_inputs", "gate_cases", "random_cases", "random_shapes",
    "compare_output", "cosine_similarity", "relative_l2", "topk_agreement", "violation_mask",
    "run_benchmark", "run_parity",
    "LatencyStats", "latency_stats", "percentile_linear", "percentile_trtexec",
    "DEFAULT_TOLERANCES", "ResolvedTolerance", "default_tolerance_table", "resolve_tolerance",
    "BenchmarkVerdict", "CaseVerdict", "OutputVerdict", "ParityVerdict", "ShapeBenchmark", "TaskVerdict",
    "WorstElement",
]
