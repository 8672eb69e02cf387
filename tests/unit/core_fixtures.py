"""Builders of literal Manifest dataclasses (and the inputs resolve needs) for pure-core tests.

No YAML, no files: every value is written out, so a test reads as its own spec. Other test modules may import
these; keep the defaults boring and stable (tests assert exact addresses and keys derived from them).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

# orchestrator.manifest first: its package imports builders, and builders imports manifest.model back
import orchestrator.manifest  # noqa: F401  (import order, see above)
from orchestrator.contracts.builder import BuilderCapabilities
from orchestrator.core.model import (
    BuilderOptions,
    DataSource,
    GateSettings,
    InputSpec,
    Manifest,
    MatrixRule,
    Model,
    PrecisionSpec,
    ProfileShapes,
    RegistryConfig,
    RunnerLabels,
    RunnerPool,
    SourceModel,
    Target,
)
from orchestrator.core.resolve import ResolveInputs

MANIFEST_FILE = "/repo/manifests/vision.yaml"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
CALIB_DIGEST = "sha256:" + "c" * 64


def shapes(min_: tuple[int, ...], opt: tuple[int, ...], max_: tuple[int, ...]) -> ProfileShapes:
    return ProfileShapes(min=tuple(min_), opt=tuple(opt), max=tuple(max_))


def image_input(name: str = "x", profiles: dict[str, ProfileShapes] | None = None) -> InputSpec:
    if profiles is None:
        profiles = {"default": shapes((1, 3, 320, 320), (1, 3, 640, 640), (4, 3, 1280, 1280))}
    return InputSpec(name=name, shape=("N", 3, "H", "W"), profiles=dict(profiles))


def precisions(*names: str, **overrides) -> tuple[PrecisionSpec, ...]:
    return tuple(PrecisionSpec(name=n, **overrides) for n in names)


def model(name: str = "ocr-det", *, version: str = "1.0.0", path: str | None = None,
          precs: tuple[str, ...] | tuple[PrecisionSpec, ...] = ("fp16",),
          inputs: tuple[InputSpec, ...] | None = None,
          profile_sets: dict[str, tuple[str, ...]] | None = None,
          calibration: str | None = None, parity: bool = True, benchmark: bool = True) -> Model:
    inputs = inputs if inputs is not None else (image_input(),)
    if profile_sets is None:
        names: list[str] = []
        for spec in inputs:
            names.extend(p for p in spec.profiles if p not in names)
        profile_sets = {n: (n,) for n in names}
    specs = tuple(p if isinstance(p, PrecisionSpec) else PrecisionSpec(name=p) for p in precs)
    gate = GateSettings()
    gate = replace(gate, parity=replace(gate.parity, enabled=parity),
                   benchmark=replace(gate.benchmark, enabled=benchmark))
    return Model(name=name, version=version, source=SourceModel(path=path or f"/models/{name}.onnx"),
                 inputs=tuple(inputs), constraints=(), precisions=specs, profile_sets=dict(profile_sets),
                 calibration=DataSource(path=calibration) if calibration else None, gate=gate)


def target(name: str = "l4-trt", *, builder: str = "tensorrt", version: str = "10.13.3.9",
           ccs: tuple[str, ...] = ("8.9",), build: tuple[str, ...] = ("self-hosted", "sm89", "trt10.13"),
           gate: tuple[str, ...] = (), options: BuilderOptions | None = None, **kw) -> Target:
    kw.setdefault("builder_slug", SLUGS.get(builder, builder))
    return Target(name=name, builder=builder, builder_version=version, compute_capabilities=tuple(ccs),
                  runners=RunnerLabels(build=tuple(build), gate=tuple(gate)),
                  options=options or BuilderOptions(), **kw)


# The slugs the first-party builder plugins declare (the manifest loader fills Target.builder_slug from them);
# core tests use literal targets, so they say it themselves.
SLUGS = {"tensorrt": "trt", "trtexec": "trtexec", "tensorrt-rtx": "rtx", "onnxruntime": "ort"}


def rtx_target(name: str = "rtx", *, version: str = "1.2.0.54", ccs: tuple[str, ...] = ("8.6", "8.9"),
               build: tuple[str, ...] = ("self-hosted", "cpu"), gate: tuple[str, ...] = ("self-hosted", "rtx"),
               **kw) -> Target:
    return target(name, builder="tensorrt-rtx", version=version, ccs=ccs, build=build, gate=gate, **kw)


def ort_target(name: str = "ort-cpu", *, version: str = "1.23.2", build: tuple[str, ...] = ("ubuntu-latest",),
               **kw) -> Target:
    return target(name, builder="onnxruntime", version=version, ccs=(), build=build, device="cpu", **kw)


def manifest(models: tuple[Model, ...] | list[Model], targets: tuple[Target, ...] | list[Target], *,
             include: tuple[MatrixRule, ...] = (), exclude: tuple[MatrixRule, ...] = (),
             runner_pools: tuple[RunnerPool, ...] = (), salt: str = "", file: str = MANIFEST_FILE,
             project: str = "vision") -> Manifest:
    return Manifest(file=file, project=project, models=tuple(models), targets=tuple(targets),
                    include=tuple(include), exclude=tuple(exclude), registry=RegistryConfig(),
                    runner_pools=tuple(runner_pools), salt=salt)


def path_digest(path: str) -> str:
    """The stand-in model digest of a path: stable, distinct per path, independent of declaration order."""
    return "sha256:" + hashlib.sha256(path.encode()).hexdigest()


def inputs_for(*manifests: Manifest, digests: dict[str, str] | None = None,
               data: dict[str, str] | None = None, tools: dict[str, str] | None = None,
               plugin_libraries: dict[str, str] | None = None) -> ResolveInputs:
    """ResolveInputs with a distinct literal digest per model path (``path_digest``), whatever the order."""
    found: dict[str, str] = {}
    for m in manifests:
        for mod in m.models:
            found.setdefault(mod.source.path, path_digest(mod.source.path))
    found.update(digests or {})
    calib: dict[str, str] = {}
    for m in manifests:
        for mod in m.models:
            if mod.calibration and mod.calibration.path:
                calib.setdefault(mod.calibration.path, CALIB_DIGEST)
    calib.update(data or {})
    return ResolveInputs(model_digests=found, data_digests=calib,
                         tool_versions=tools if tools is not None else {"onnxconverter-common": "1.14.0"},
                         plugin_libraries=plugin_libraries or {})


_ALL = frozenset({"fp16", "bf16", "int8", "fp8"})


def capabilities(builder: str, version: str) -> BuilderCapabilities | None:
    """A literal capabilities function in the shape the builder plugins give (facts: DESIGN builders table)."""
    major = int(version.split(".")[0])
    if builder in ("tensorrt", "trtexec"):
        if major >= 11:  # 11.0 removed BuilderFlag.FP16/INT8: strongly typed + Q/DQ only
            return BuilderCapabilities(native=frozenset(), via_transform=_ALL,
                                       target_kinds=frozenset({"compute_capability"}), needs_gpu=True,
                                       runs_on="same CC, same TensorRT")
        # fp8 has no calibrator: explicit Q/DQ only, so not native
        return BuilderCapabilities(native=frozenset({"fp16", "bf16", "int8"}), via_transform=_ALL,
                                   target_kinds=frozenset({"compute_capability", "hardware_compatible"}),
                                   needs_gpu=True, runs_on="same CC, same TensorRT", supports_calibrator=True,
                                   calibration_family="tensorrt")
    if builder == "tensorrt-rtx":
        return BuilderCapabilities(native=frozenset(), via_transform=_ALL,
                                   target_kinds=frozenset({"compute_capability_list"}), needs_gpu=False,
                                   runs_on="RTX/Ampere+ GPUs of the listed CCs", platform_specific=False,
                                   reads_options=frozenset({"optimization_level", "tiling_level", "workspace_mib"}))
    if builder == "onnxruntime":
        return BuilderCapabilities(native=frozenset(), via_transform=frozenset({"fp16", "int8"}),
                                   target_kinds=frozenset({"cpu", "cuda"}), needs_gpu=False, runs_on="anywhere",
                                   engine_suffix=".onnx", reads_options=frozenset({"ort_optimization"}))
    return None
