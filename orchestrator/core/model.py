"""The typed manifest: frozen dataclasses produced by ``manifest.load`` after validation.

Everything downstream (resolver, keys, planner, executor, plugins) reads these types, never raw YAML.
Paths in here are already resolved to absolute paths (relative ones are relative to the manifest file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

Precision = Literal["fp32", "fp16", "bf16", "int8", "fp8"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8", "fp8")
PrecisionVia = Literal["auto", "native", "transform"]
CalibrationMethod = Literal["entropy", "percentile", "minmax"]
HardwareCompat = Literal["none", "ampere_plus", "same_compute_capability"]
GpuMatch = Literal["sku", "cc"]
# Where an engine's weights live (docs/refit.md): inside it (``embedded``, TensorRT's default), in the model version's
# weights blob, refitted at deployment (``stripped``), or refittable with new weights (``refittable``).
WeightsMode = Literal["embedded", "stripped", "refittable"]
WEIGHTS_MODES: tuple[str, ...] = ("embedded", "stripped", "refittable")
# Which CPU a CPU engine's verdict holds for (docs/gates.md, "CPU instruction sets"): "any" (any CPU of the
# platform) or "isa" (only a CPU with the same kernel-selecting instruction-set features: the gate key records them)
CpuMatch = Literal["any", "isa"]
# How fleet CI provisions a target's exact builder version: the runner has it installed (its labels say so), the job
# runs in the container image of that release, or it installs pinned wheels into a cached virtual environment.
ToolchainKind = Literal["runner", "container", "pip"]
TOOLCHAIN_KINDS: tuple[str, ...] = ("runner", "container", "pip")
# Where engines of a target run: ``os/arch`` with an optional variant (the L4T release on Jetson), docker-style.
DEFAULT_PLATFORM = "linux/x86_64"


@dataclass(frozen=True)
class DimConstraint:
    """A constraint on a named symbolic dim, e.g. H divisible by 32."""

    dim: str
    multiple_of: int | None = None
    min: int | None = None
    max: int | None = None


@dataclass(frozen=True)
class ProfileShapes:
    """min/opt/max of one input in one named optimization profile."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


@dataclass(frozen=True)
class InputSpec:
    name: str
    # Declared shape: ints are fixed dims, strings are symbolic (dynamic) dims named for constraints.
    shape: tuple[int | str, ...]
    dtype: str = "float32"
    profiles: dict[str, ProfileShapes] = field(default_factory=dict)

    @property
    def is_dynamic(self) -> bool:
        return any(isinstance(d, str) for d in self.shape)


@dataclass(frozen=True)
class Preprocess:
    """Image-folder preprocessing for calibration/parity data."""

    resize: tuple[int, int] | None = None  # (H, W)
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    scale: float = 1.0 / 255.0
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    dtype: str = "float32"
    color: Literal["RGB", "BGR"] = "RGB"


# The files a DataSource folder may hold: arrays, or images (decoded with Pillow, the optional ``images`` extra).
ARRAY_SUFFIXES = (".npy", ".npz")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".webp")


@dataclass(frozen=True)
class DataSource:
    """npy/npz files, or an image folder with preprocessing; None path means seeded random tensors."""

    path: str | None = None
    preprocess: Preprocess | None = None
    samples: int = 8
    seed: int = 0
    # parity only: each image's expected answer (a file, or a folder of YOLO labels); task metrics against labels
    labels: str | None = None


@dataclass(frozen=True)
class Tolerance:
    """An override of the parity tolerance: each field that is None inherits from the layer below (the precision's
    default, then the model's override; docs/gates.md)."""

    atol: float | None = None
    rtol: float | None = None
    min_cosine: float | None = None
    max_rel_l2: float | None = None
    topk: int | None = None
    min_topk_agreement: float | None = None


@dataclass(frozen=True)
class TaskSpec:
    """``models[].task``: how the model's outputs are post-processed and judged by a task plugin
    (``orchestrator.contracts.task``): its kind, the output it reads (None: the model's only output) and the kind's
    own decode options (a ``charset`` path already absolute)."""

    kind: str
    output: str | None = None
    options: dict[str, str | int | float | bool] = field(default_factory=dict)


@dataclass(frozen=True)
class ParityGate:
    data: DataSource = field(default_factory=DataSource)
    # Overrides of the documented per-precision defaults; per_output overrides both.
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    per_output: dict[str, Tolerance] = field(default_factory=dict)
    enabled: bool = True
    # Task-metric thresholds (``min_<metric>`` / ``max_<metric>`` -> bound) for the model's ``task``; the
    # precision's entry of ``task_by_precision`` overrides them key by key.
    task: dict[str, float] = field(default_factory=dict)
    task_by_precision: dict[str, dict[str, float]] = field(default_factory=dict)
    # False: tensor tolerance failures are reported but do not fail the gate (the task metric is the contract)
    tensor: bool = True
    # where each override of a cell's gate came from when a target's or matrix rule's gate is merged over the model's:
    # "fp16" / "output:<name>" -> the layers that write it, e.g. "model:fp16 < target:cpu:fp16" (set by the manifest
    # loader from the gates as written; the tolerances' ``source`` says it); absent: the model's own ("model:fp16",
    # "output:<name>")
    layers: dict[str, str] = field(default_factory=dict)

    def task_thresholds(self, precision: str) -> dict[str, float]:
        """The task thresholds an engine of ``precision`` is judged with: the model's, then the precision's."""
        return dict(sorted({**self.task, **self.task_by_precision.get(precision, {})}.items()))


@dataclass(frozen=True)
class BenchmarkGate:
    warmup: int = 10
    iterations: int = 100
    time_budget_s: float | None = None
    shapes: tuple[Literal["min", "opt", "max"], ...] = ("opt",)
    max_p95_ms: float | None = None
    min_throughput: float | None = None
    max_regression_pct: float | None = None
    enabled: bool = True
    # the series is timed in blocks spread out in time; None: the gates' documented defaults (docs/gates.md)
    blocks: int | None = None
    block_gap_s: float | None = None
    max_spread_pct: float | None = None
    # stability of the gated shape's timed latencies: p99 / p50, and the coefficient of variation (stdev / mean, %)
    max_p99_p50_ratio: float | None = None
    max_cv_pct: float | None = None
    # memory: device memory at the profile's max shape (an out-of-memory there fails), and an optional soak run
    max_device_memory_mib: float | None = None
    soak_s: float | None = None
    max_memory_growth_mib: float | None = None
    # a refittable engine's p50 over the embedded engine's of the same cell on the same GPU model (docs/refit.md)
    max_refit_cost_pct: float | None = None


@dataclass(frozen=True)
class DriftGate:
    """``gate.drift``: each cell against its *drift baseline*, the newest published engine of the same model version,
    precision, profile set, device and compute capabilities, run by the same runtime, built by an earlier builder
    version (TensorRT 10.13 -> 11.x, onnxruntime 1.22 -> 1.31): the engine's outputs against the baseline's recorded
    outputs on the same inputs (tensor and task metrics) and its latency against the baseline's benchmark on the same
    GPU model. Without thresholds the comparison is reported, not gated (docs/gates.md, "Drift")."""

    enabled: bool = True
    max_latency_regression_pct: float | None = None
    min_cosine: float | None = None
    max_rel_l2: float | None = None
    max_abs_error: float | None = None
    # task metrics of this engine's post-processed outputs against the baseline's (``min_<metric>``/``max_<metric>``)
    task: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GateSettings:
    parity: ParityGate = field(default_factory=ParityGate)
    benchmark: BenchmarkGate = field(default_factory=BenchmarkGate)
    drift: DriftGate = field(default_factory=DriftGate)
    # Publishing an engine whose gates did not pass (or are pending) must be allowed explicitly; recorded.
    allow_ungated_publish: bool = False
    # reduced precisions whose GPU engines need a parity verdict given on a GPU before publishing (core.gpu_parity)
    require_gpu_parity: tuple[str, ...] = ()


@dataclass(frozen=True)
class PrecisionSpec:
    name: str  # one of PRECISIONS
    via: PrecisionVia = "auto"
    # fp16/bf16 conversion: keep model I/O in fp32 (cast at the boundary)
    keep_io_types: bool = True
    # ops kept in fp32 by the conversion (numerically sensitive ones by default)
    op_block_list: tuple[str, ...] | None = None
    calibration_method: CalibrationMethod = "entropy"
    # int8/fp8 Q/DQ transforms: the share of quantizable nodes that must come out quantized (None: the transform's
    # own default); a transform that quantized nothing fails whatever this says
    min_quantized_share: float | None = None


@dataclass(frozen=True)
class SourceModel:
    path: str  # absolute; for a ``url`` source, where the verified download lives (content-addressed)
    sha256: str | None = None
    url: str | None = None  # https://, s3://, gs://, hf://repo/file (fetched and checked against sha256)
    where: str = ""  # "manifests/x.yaml:12" of the source, for errors raised after loading (a bad download)


@dataclass(frozen=True)
class Model:
    name: str
    version: str
    source: SourceModel
    inputs: tuple[InputSpec, ...]
    constraints: tuple[DimConstraint, ...]
    precisions: tuple[PrecisionSpec, ...]
    # profile set name -> profile names in it (each a TRT optimization profile inside one engine).
    # Default: every profile name is its own one-profile set.
    profile_sets: dict[str, tuple[str, ...]]
    calibration: DataSource | None
    gate: GateSettings
    # classifier outputs for top-k agreement: output name -> k
    classifier_outputs: dict[str, int] = field(default_factory=dict)
    # the task metric the parity gate also judges (post-processed outputs), None: tensors only
    task: TaskSpec | None = None

    def profile_names(self) -> tuple[str, ...]:
        names: list[str] = []
        for spec in self.inputs:
            for p in spec.profiles:
                if p not in names:
                    names.append(p)
        return tuple(names)


@dataclass(frozen=True)
class RunnerLabels:
    build: tuple[str, ...]
    gate: tuple[str, ...]  # defaults to build labels when not given


@dataclass(frozen=True)
class BuilderOptions:
    optimization_level: int | None = None  # 0-5, TRT default 3
    tiling_level: Literal["none", "fast", "moderate", "full"] | None = None
    workspace_mib: int | None = None
    strongly_typed: bool | None = None  # TRT 10.x opt-in; forced on 11.x and RTX
    version_compatible: bool = False
    exclude_lean_runtime: bool = False
    timing_cache: bool = True
    # build with the published timing cache of this (GPU, builder version) and fail on a miss where the builder
    # supports it (reproducible rebuilds); needs timing_cache
    timing_cache_pin: bool = False
    # onnxruntime builder: graph optimization level
    ort_optimization: Literal["basic", "extended", "all"] = "all"
    # builder-specific settings: each builder declares the keys it applies (``BuilderCapabilities.extra_options``)
    extra: dict[str, str | int | float | bool] = field(default_factory=dict)

    def to_key(self, read: frozenset[str] | None = None) -> dict[str, Any]:
        """What changes an engine goes into the build key: of the options the builder reads (``read``, from its
        capabilities; None: all of them). Options a builder ignores must not rebuild its engines."""
        every: dict[str, Any] = {
            "optimization_level": self.optimization_level,
            "tiling_level": self.tiling_level,
            "workspace_mib": self.workspace_mib,
            "strongly_typed": self.strongly_typed,
            "version_compatible": self.version_compatible,
            "exclude_lean_runtime": self.exclude_lean_runtime,
            "ort_optimization": self.ort_optimization,
            "timing_cache_pin": self.timing_cache_pin,
            "extra": dict(sorted(self.extra.items())),
        }
        if read is None:
            return every
        return {k: v for k, v in every.items() if k in read}


@dataclass(frozen=True)
class Toolchain:
    """``targets[].toolchain``: how CI gets this target's exact builder version (``core.toolchain`` resolves it)."""

    kind: ToolchainKind = "runner"
    image: str | None = None  # container: an explicit image (a tag, or pinned @sha256:...); None: the known one
    index_url: str | None = None  # pip: the extra index the wheels come from; None: the builder's own default
    cuda: str | None = None  # pip: the CUDA major of "-cuXX" wheels ("12", "13"); None: the builder's default


@dataclass(frozen=True)
class Target:
    name: str
    builder: str  # builder plugin name
    builder_version: str  # exact where engines demand it ("10.13.3.9", "1.7.1.116"); "1.23" for ort
    # Exactly one of: one CC, a list of CCs (RTX AOT), a compatibility level, a device (ort: cpu/cuda).
    compute_capabilities: tuple[str, ...] = ()  # "8.9", "12.0"
    hardware_compatibility: HardwareCompat = "none"
    device: Literal["gpu", "cpu", "cuda"] = "gpu"
    runners: RunnerLabels = field(default_factory=lambda: RunnerLabels((), ()))
    options: BuilderOptions = field(default_factory=BuilderOptions)
    # The builder's own short name in addresses (``trt`` in ``sm89+trt10.13``); the builder plugin declares it
    # and the manifest loader fills it in. Empty: the builder's name.
    builder_slug: str = ""
    # Version-compatible engines may run on newer runtimes; that range is checked at pull time.
    # Where its engines run (os/arch[/variant]); a build key input for builders whose engines are platform-specific.
    platform: str = DEFAULT_PLATFORM
    # How `pull` matches GPUs: "cc" (any GPU of the compute capability; the one it was built on ranks first) or
    # "sku" (only the GPU model it was built on).
    gpu_match: GpuMatch = "cc"
    # device cpu only: whether a verdict given on another CPU instruction set stands ("any") or is re-gated ("isa")
    cpu_match: CpuMatch = "any"
    toolchain: Toolchain = field(default_factory=Toolchain)
    # The serving stack its engines are deployed on (``triton:25.01``): builder_version is the TensorRT it ships.
    serve: str | None = None
    # where its engines' weights live (``WeightsMode``); "embedded" keys and builds as before the field existed
    weights: WeightsMode = "embedded"

    @property
    def version_family(self) -> str:
        """major.minor, e.g. 10.13 or 1.7."""
        parts = self.builder_version.split(".")
        return ".".join(parts[:2])

    @property
    def slug(self) -> str:
        """The ``sm89+trt10.13`` part of a cell address."""
        return target_slug(self)


def cc_slug(cc: str) -> str:
    major, _, minor = cc.partition(".")
    return f"sm{major}{minor or '0'}"


def target_slug(t: Target) -> str:
    if t.hardware_compatibility == "ampere_plus":
        where = "ampere-plus"  # '+' separates place from builder in an address
    elif t.device in ("cpu", "cuda") and not t.compute_capabilities:
        where = t.device
    else:
        where = "-".join(cc_slug(c) for c in t.compute_capabilities) or "any"
        if t.hardware_compatibility == "same_compute_capability":
            where += "-samecc"
    if t.platform != DEFAULT_PLATFORM:  # another platform's engines are other cells (default: the old addresses)
        where += "-" + t.platform.replace("/", "-")
    builder = t.builder_slug or t.builder
    slug = f"{where}+{builder}{t.version_family}"
    if t.options.version_compatible:
        slug += "-vc"
    return slug


@dataclass(frozen=True)
class MatrixRule:
    """include/exclude rule; None fields match anything."""

    model: str | None = None
    precision: str | None = None
    profile_set: str | None = None
    target: str | None = None


@dataclass(frozen=True)
class RegistryCredentials:
    """Names of the CI secrets holding a registry login (never the values): the publish job reads them into the
    environment variables the OCI store reads."""

    username_secret: str  # push: the publish job only
    password_secret: str
    read_username_secret: str | None = None  # pull (plan, build, gate jobs read the index and caches); None: anonymous
    read_password_secret: str | None = None


@dataclass(frozen=True)
class SigningConfig:
    """``registry.signing``: who signs each artifact's provenance at publish, and what deployments require."""

    signer: str = "ed25519"  # a signer plugin (``trt_orchestrator.signers``)
    key: str | None = None  # the private key at publish: ``env:NAME`` or ``file:PATH`` (None: keyless)
    require: str | None = None  # pull / export triton default for --require-signature (a key, env:, an identity)


@dataclass(frozen=True)
class RegistryConfig:
    store: str | None = None  # store plugin name; None: the default store (``orchestrator.plugins``)
    path: str | None = None  # local store directory (absolute)
    url: str | None = None  # oci: host[:port]/repository-prefix
    insecure: bool = False
    credentials: RegistryCredentials | None = None
    signing: SigningConfig | None = None  # None: artifacts are published unsigned
    # publish each model version's ONNX once beside its engines (a weights record of the model as given,
    # ``core.weights``): what ``pull --build-on-miss`` builds from where no published engine fits
    publish_onnx: bool = False


@dataclass(frozen=True)
class RunnerPool:
    """A label set the team actually has, with what its machines are. Used to mark cells blocked."""

    labels: tuple[str, ...]
    compute_capability: str | None = None  # None: no GPU
    gpu: str | None = None
    tensorrt: str | None = None
    tensorrt_rtx: str | None = None


@dataclass(frozen=True)
class Manifest:
    file: str  # absolute path of the YAML file
    project: str
    models: tuple[Model, ...]
    targets: tuple[Target, ...]
    include: tuple[MatrixRule, ...]
    exclude: tuple[MatrixRule, ...]
    registry: RegistryConfig
    runner_pools: tuple[RunnerPool, ...]  # empty: labels are not checked
    salt: str = ""
    # distribution -> version ("1.16" or "1.16.0") the precision transforms run with: build-key inputs, checked
    # against what a runner has installed before it transforms
    transform_tools: tuple[tuple[str, str], ...] = ()
    # (model name, target name) -> the gate of those cells where the target overrides it (``targets[].gate`` over
    # the model's over ``defaults.gate``, key by key); absent: the model's own gate
    cell_gates: tuple[tuple[tuple[str, str], GateSettings], ...] = ()
    # (model, precision, profile set, target) -> the gate of that cell where `matrix.include` rules with `gate:` name
    # it (the rules' gates, in manifest order, over the target's over the model's, key by key)
    rule_gates: tuple[tuple[tuple[str, str, str, str], GateSettings], ...] = ()

    def gate_for(self, model: Model, target: Target, precision: str | None = None,
                 profile_set: str | None = None) -> GateSettings:
        """The gate settings of ``model``'s cells on ``target`` (of ``precision`` and ``profile_set`` when given):
        docs/manifest.md, "Gates per target"."""
        if precision is not None and profile_set is not None:
            gate = self._gates.get((model.name, precision, profile_set, target.name))
            if gate is not None:
                return gate
        return self._gates.get((model.name, target.name), model.gate)

    @cached_property
    def _gates(self) -> dict[tuple[str, ...], GateSettings]:
        return {**dict(self.cell_gates), **dict(self.rule_gates)}
