"""The ``onnx-copy-ort`` runtime: runs onnx-copy engines (plain ONNX files) on onnxruntime's CPU provider."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from onnx_copy_plugin.versions import family, onnxruntime_version, plugin_version
from orchestrator.contracts.runtime import RefitRequest, RefitResult, RuntimeOptions, Timing
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.core.select import Compat
from orchestrator.errors import GateError

PROVIDER = "CPUExecutionProvider"
RANK = 350  # core.select's convention: ONNX engines on the CPU rank 300-399


class OnnxCopyRuntime:
    name = "onnx-copy-ort"
    slug = "copyort"

    def probe(self) -> InstalledRuntime | None:
        # usable when onnxruntime is installed; its version is this package's (the builder's) version
        if onnxruntime_version() is None:
            return None
        return InstalledRuntime(plugin_version(), (PROVIDER,))

    def can_run(self, engine: EngineDescriptor, fingerprint: RunnerFingerprint) -> Compat:
        installed = fingerprint.runtime_version(self.name)
        if installed is None:
            return Compat.no("onnx-copy-ort is not installed on this runner (pip install onnx-copy-plugin "
                             "onnxruntime)")
        if engine.target.device != "cpu":
            return Compat.no(f"onnx-copy-ort runs CPU engines only, not device {engine.target.device!r}")
        if family(engine.builder_version) != family(installed):
            return Compat.no(f"built by onnx-copy {engine.builder_version}, this runner has onnx-copy-ort "
                             f"{installed} (major.minor must match)")
        return Compat.yes("onnx-copy engine on onnxruntime's CPU execution provider", RANK)

    def verify_engine(self, engine_path: Path, engine: EngineDescriptor) -> str | None:
        try:
            import onnx

            onnx.load(str(engine_path), load_external_data=False)
        except Exception as e:  # DecodeError, OSError, ...: the file is not an ONNX model
            return f"{Path(engine_path).name} is not a readable ONNX model: {type(e).__name__}: {e}"
        return None

    def load(self, engine_path: Path, engine: EngineDescriptor, options: RuntimeOptions) -> CopySession:
        return CopySession(Path(engine_path))

    def refit(self, request: RefitRequest) -> RefitResult:
        """New weights into a copy, by initializer name: every initializer of the engine takes the bytes of the
        blob's initializer of that name, which must have the same element type and dims (else nothing is written).
        The blob folder's ``model.onnx`` loads with its ``weights.bin`` (external data beside it)."""
        import onnx

        try:
            engine = onnx.load(str(request.engine_path))
            weights = {t.name: t for t in onnx.load(str(Path(request.weights) / "model.onnx")).graph.initializer}
        except Exception as e:  # DecodeError, a missing external data file
            raise GateError(f"onnx-copy-ort cannot read the engine or the weights to refit: {e}") from e
        replaced = 0
        for tensor in engine.graph.initializer:
            new = weights.get(tensor.name)
            if new is None or (new.data_type, list(new.dims)) != (tensor.data_type, list(tensor.dims)):
                raise GateError(f"{request.engine.address}: the weights have no initializer {tensor.name!r} of type "
                                f"{tensor.data_type} and dims {list(tensor.dims)}: not this engine's graph")
            if new.SerializeToString() != tensor.SerializeToString():
                tensor.CopyFrom(new)
                replaced += 1
        out = Path(request.out_path)
        tmp = out.with_name(out.name + ".tmp")
        onnx.save(engine, str(tmp))
        tmp.replace(out)
        return RefitResult(out, {"how": "initializers replaced by name", "replaced": replaced,
                                 "tensors": len(engine.graph.initializer)})


class CopySession:
    tf32 = False  # CPU fp32 math: parity uses the plain fp32 tolerances

    def __init__(self, path: Path):
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise GateError("onnxruntime is not installed", hint="pip install onnxruntime") from e
        try:
            self._session = ort.InferenceSession(str(path), providers=[PROVIDER])
        except Exception as e:  # onnxruntime's own exception families
            raise GateError(f"onnxruntime cannot load {path.name}: {e}") from e
        self.input_names = tuple(i.name for i in self._session.get_inputs())
        self.output_names = tuple(o.name for o in self._session.get_outputs())

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
        try:
            values = self._session.run(None, feeds)
        except Exception as e:
            raise GateError(f"onnxruntime run failed: {e}") from e
        return dict(zip(self.output_names, values))

    def benchmark(self, inputs: Mapping[str, np.ndarray], *, warmup: int, iterations: int,
                  time_budget_s: float | None) -> Timing:
        """``iterations`` timed runs, or as many as fit ``time_budget_s`` (at least one) when it is set."""
        feeds = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
        for _ in range(max(0, warmup)):
            self._session.run(None, feeds)
        deadline = time.perf_counter_ns() + int(time_budget_s * 1e9) if time_budget_s else None
        times: list[float] = []
        while True:
            t0 = time.perf_counter_ns()
            self._session.run(None, feeds)
            times.append((time.perf_counter_ns() - t0) / 1e6)
            if deadline is not None and time.perf_counter_ns() >= deadline:
                break
            if deadline is None and len(times) >= max(1, iterations):
                break
        return Timing(compute_ms=tuple(times), end_to_end_ms=tuple(times), clock="perf_counter_ns",
                      extra={"providers": list(self._session.get_providers())})

    def close(self) -> None:
        self._session = None
