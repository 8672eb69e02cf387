"""The public Python API: load a project, plan it, build, gate, publish, pull.

Each function takes loaded data and returns data; the CLI renders what they return. This module is the edge that
wires the pure core (resolve, plan) to disk, plugins and the executor.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable, Sequence

from orchestrator import plugins
from orchestrator.atomic import write_json_atomic  # noqa: F401 - the CLI writes plans and run summaries with it
from orchestrator.digests import DigestCache
from orchestrator.errors import PlanError, PluginError, UsageError
from orchestrator.run.executor import Executor, RunSummary, StepOutcome, Workspace
from orchestrator.core.graph import BuildGraph, Cell, Node
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.hardware import detect
from orchestrator.manifest import load_manifests
from orchestrator.core.model import Manifest, Model, RegistryConfig
from orchestrator.core.plan import Plan, plan_against
from orchestrator.contracts.store import EmptyIndex, IndexReader
from orchestrator.core.resolve import ResolveInputs, resolve

# Versions of the code that performs transforms (our plugins, the libraries they call) change their output, so
# they are part of transform keys.
_TRANSFORM_TOOLS = ("trt-orchestrator", "onnxconverter-common", "onnxruntime", "onnx")


def default_workspace(cache_dir: str | os.PathLike | None = None) -> Workspace:
    root = cache_dir or os.environ.get("ORCHESTRATE_CACHE") or ".orchestrate"
    return Workspace(Path(root).absolute())


@dataclass(frozen=True)
class Project:
    manifests: tuple[Manifest, ...]
    graph: BuildGraph
    workspace: Workspace
    manifest_digests: dict[str, str]

    @property
    def models(self) -> dict[str, Model]:
        return {m.name: m for man in self.manifests for m in man.models}

    @property
    def registry(self) -> RegistryConfig:
        return self.manifests[0].registry

    def manifest_of(self, cell: Cell) -> Manifest:
        return next(m for m in self.manifests if m.file == cell.manifest)


def display_path(path: str) -> str:
    """Relative to the working directory when inside it: plans move between runners with other checkouts."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _tool_versions() -> dict[str, str]:
    out = {}
    for name in _TRANSFORM_TOOLS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def load_project(paths: Sequence[str | os.PathLike], *, cache_dir: str | os.PathLike | None = None,
                 capabilities: Callable | None = None) -> Project:
    if not paths:
        raise UsageError("no manifest given", hint="orchestrate plan manifests/demo.yaml")
    manifests = load_manifests([str(p) for p in paths])
    registries = {m.registry for m in manifests}
    if len(registries) > 1:
        raise UsageError("the manifests name different registries; plan them separately",
                         hint="give every manifest planned together the same `registry:`")
    ws = default_workspace(cache_dir)
    cache = DigestCache.open(ws.root / "digests.json")
    model_digests = {}
    data_digests = {}
    for man in manifests:
        for model in man.models:
            model_digests[model.source.path] = cache.model_digest(model.source.path)
            if model.calibration and model.calibration.path and os.path.exists(model.calibration.path):
                data_digests[model.calibration.path] = cache.data_digest(model.calibration.path)
    cache.save()
    graph = resolve(manifests, ResolveInputs(model_digests=model_digests, data_digests=data_digests,
                                             tool_versions=_tool_versions(),
                                             transforms=frozenset(plugins.names(plugins.TRANSFORMS))),
                    capabilities or plugins.builder_capabilities)
    digests = {display_path(m.file): hashlib.sha256(Path(m.file).read_bytes()).hexdigest() for m in manifests}
    return Project(manifests, graph, ws, digests)


def open_store(config: RegistryConfig):
    factory = plugins.store_factory(config.store)
    return factory(config)


def registry_index(config: RegistryConfig) -> IndexReader:
    """The local store with no directory yet is an empty registry: every cell plans as ``+ build``."""
    if config.store == "local" and (config.path is None or not Path(config.path).exists()):
        return EmptyIndex()
    return open_store(config).index()


def plan(project: Project, index: IndexReader | None = None) -> Plan:
    return plan_against_index(project, index or registry_index(project.registry))


def plan_against_index(project: Project, index: IndexReader, *, max_cells_per_shard: int = 0) -> Plan:
    return plan_against(project.graph, index.latest_by_address(), index.state_token(), project.manifest_digests,
                        max_cells_per_shard=max_cells_per_shard)


def check_plan_current(project: Project, saved: Plan, index: IndexReader | None = None) -> None:
    """Refuse a saved plan whose manifests or registry state have moved since it was made."""
    for path, digest in saved.manifests.items():
        now = project.manifest_digests.get(path)
        if now is None:
            raise PlanError(f"the plan was made from {path}, which is not loaded now",
                            hint="pass the same manifests as when planning, or re-plan")
        if now != digest:
            raise PlanError(f"{path} changed since the plan was made", hint="re-run `orchestrate plan --out`")
    index = index or registry_index(project.registry)
    if index.state_token() != saved.registry_state:
        raise PlanError("the registry changed since the plan was made (another publish landed)",
                        hint="re-run `orchestrate plan --out` and build from the new plan")


def cells_in_scope(project: Project, the_plan: Plan, *, shard: str | None = None,
                   only: Iterable[str] = (), statuses=("build", "rebuild")) -> list[Cell]:
    wanted = {e.address for e in the_plan.entries if e.status in statuses}
    if shard:
        wanted &= set(the_plan.shard(shard).addresses)
    only = list(only)
    if only:
        known = {c.address for c in project.graph.cells}
        unknown = [a for a in only if a not in known]
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], list(known), n=1)
            raise UsageError(f"unknown cell address {unknown[0]!r}",
                             hint=f"did you mean {close[0]!r}?" if close else "see `orchestrate plan`")
        # naming a cell builds it whatever its plan status (e.g. to rebuild an up-to-date one locally)
        wanted = set(only) & set(the_plan.shard(shard).addresses) if shard else set(only)
    return [c for c in project.graph.cells if c.address in wanted and not c.blocked]


def _closure(graph: BuildGraph, roots: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        nid = stack.pop()
        if nid in seen or nid not in graph.nodes:
            continue
        seen.add(nid)
        stack.extend(graph.nodes[nid].deps)
    return seen


def _payload_factory(project: Project, fingerprint: RunnerFingerprint):
    from orchestrator.run.steps import CellPayload

    models = project.models

    def payload(node: Node):
        cell = project.graph.cell(node.address) if node.address else None
        model = models[node.model]
        return CellPayload(model=model, cell=cell, fingerprint=fingerprint, caches=project.workspace.caches,
                           registry=project.registry, manifest_file=display_path(cell.manifest) if cell else "")

    return payload


def _builder_reason(cell: Cell, fingerprint: RunnerFingerprint) -> str | None:
    try:
        builder = plugins.builder(cell.target.builder)
    except PluginError as e:
        return str(e)
    return builder.available(fingerprint, cell.target)


def _needs_gpu(project: Project) -> Callable[[Node], bool]:
    def needs(node: Node) -> bool:
        if node.kind != "build":
            return False
        cell = project.graph.cell(node.address)
        try:
            caps = plugins.builder(cell.target.builder).capabilities(cell.target.builder_version)
        except PluginError:
            return False
        return caps.needs_gpu

    return needs


def build(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = (),
          jobs: int | None = None, keep_going: bool = False, fingerprint: RunnerFingerprint | None = None,
          on_event=None, in_process: bool = False) -> RunSummary:
    from orchestrator.run.steps import step_build, step_prepare, step_transform

    fingerprint = fingerprint or detect()
    cells = cells_in_scope(project, the_plan, shard=shard, only=only)
    roots = [f"build:{c.address}" for c in cells]
    selected = _closure(project.graph, roots)
    payload = _payload_factory(project, fingerprint)

    def prepare_task(node: Node):
        if node.kind == "build":
            reason = _builder_reason(project.graph.cell(node.address), fingerprint)
            if reason:
                return None, StepOutcome(status="skipped", reason=reason)
        return payload(node), None

    executor = Executor(
        workspace=project.workspace,
        steps={"prepare": step_prepare, "transform": step_transform, "build": step_build},
        prepare_task=prepare_task, jobs=jobs or max(1, os.cpu_count() or 1), keep_going=keep_going,
        needs_gpu=_needs_gpu(project), on_event=on_event or (lambda *a: None), in_process=in_process)
    return executor.run(project.graph.nodes, project.graph.order, selected)


def verify_shard_runner(project: Project, the_plan: Plan, shard_id: str, fingerprint: RunnerFingerprint, *,
                        role: str = "build") -> None:
    """A shard's runner checks itself before doing anything: a wrong GPU or TensorRT fails the job clearly
    instead of building (or gating) a wrong engine."""
    from orchestrator.errors import RunnerMismatchError

    shard = the_plan.shard(shard_id)
    problems = []
    for address in shard.addresses:
        cell = project.graph.cell(address)
        if role == "build":
            reason = _builder_reason(cell, fingerprint)
        else:
            reason = runtime_reason(cell_metadata_probe(cell), fingerprint)
        if reason:
            problems.append(f"{cell.target.name} ({address}): {reason}")
    if problems:
        gpu = (f"{fingerprint.gpus[0].name} (CC {fingerprint.compute_capability})" if fingerprint.gpus
               else "no GPU")
        raise RunnerMismatchError(
            f"this runner ({gpu}, tensorrt {fingerprint.tensorrt or 'absent'}, tensorrt-rtx "
            f"{fingerprint.tensorrt_rtx or 'absent'}) cannot {role} shard {shard_id!r}:\n  "
            + "\n  ".join(problems[:20]) + (f"\n  … and {len(problems) - 20} more" if len(problems) > 20 else ""),
            hint=f"run this shard on a runner with labels [{', '.join(shard.build_labels if role == 'build' else shard.gate_labels)}] "
                 "whose hardware matches the targets")


def cell_metadata_probe(cell: Cell) -> dict:
    """The metadata shape runtimes and compat read, for a cell not yet built."""
    t = cell.target
    return {"address": cell.address, "precision": cell.precision.name,
            "builder": {"name": t.builder, "version": t.builder_version},
            "target": {"name": t.name, "compute_capabilities": list(t.compute_capabilities),
                       "hardware_compatibility": t.hardware_compatibility, "device": t.device,
                       "version_compatible": t.options.version_compatible}}


_RUNTIME_OF_BUILDER = {"trtexec": "tensorrt"}


def runtime_name(builder: str) -> str:
    return _RUNTIME_OF_BUILDER.get(builder, builder)


def runtime_reason(metadata: dict, fingerprint: RunnerFingerprint) -> str | None:
    try:
        runtime = plugins.runtime(runtime_name(metadata["builder"]["name"]))
    except PluginError as e:
        return str(e)
    return runtime.can_run(metadata, fingerprint)


def _gate_nodes(project: Project, cells: Iterable[Cell]) -> list[str]:
    return [nid for c in cells for nid in (f"gate:parity:{c.address}", f"gate:benchmark:{c.address}")
            if nid in project.graph.nodes]


def _baseline(project: Project, cell: Cell, model: Model):
    """The benchmark verdict of the last published engine at this address, when a regression bound is set."""
    if model.gate.benchmark.max_regression_pct is None:
        return None
    index = registry_index(project.registry)
    if cell.address not in index.latest_by_address():
        return None
    found = open_store(project.registry).find(address=cell.address)
    for artifact in found:
        bench = (artifact.metadata.get("gates") or {}).get("benchmark")
        if bench and bench.get("verdict"):
            return bench["verdict"]
    return None


def gate(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = (),
         jobs: int | None = None, fingerprint: RunnerFingerprint | None = None, on_event=None,
         in_process: bool = False) -> RunSummary:
    """Parity and benchmark gates for the built engines in scope. An engine this runner cannot run is
    ``pending`` (e.g. RTX AOT engines on a machine without an RTX/Ampere+ GPU), never run wrong."""
    from dataclasses import replace

    from orchestrator.run.gate import step_benchmark, step_parity

    fingerprint = fingerprint or detect()
    cells = cells_in_scope(project, the_plan, shard=shard, only=only)
    selected = set(_gate_nodes(project, cells))
    base_payload = _payload_factory(project, fingerprint)

    def prepare_task(node: Node):
        cell = project.graph.cell(node.address)
        reason = runtime_reason(cell_metadata_probe(cell), fingerprint)
        if reason:
            return None, StepOutcome(status="pending", reason=f"gate pending: {reason}")
        payload = base_payload(node)
        if node.kind == "gate:benchmark":
            payload = replace(payload, extra=(_baseline(project, cell, payload.model),))
        return payload, None

    def needs_gpu(node: Node) -> bool:
        return project.graph.cell(node.address).target.device != "cpu"

    # Gates time engines: by default one at a time, so a benchmark never shares the CPU with other work.
    executor = Executor(workspace=project.workspace,
                        steps={"gate:parity": step_parity, "gate:benchmark": step_benchmark},
                        prepare_task=prepare_task, jobs=jobs or 1, keep_going=True, needs_gpu=needs_gpu,
                        on_event=on_event or (lambda *a: None), in_process=in_process)
    return executor.run(project.graph.nodes, project.graph.order, selected)


def gate_reports(project: Project, cell: Cell) -> tuple[dict | None, dict | None]:
    """The parity and benchmark reports on disk for a cell (None where not gated here)."""
    from orchestrator.run.executor import read_result
    from orchestrator.run.gate import read_gate_report

    out = []
    for kind, name in (("parity", "parity.json"), ("benchmark", "benchmark.json")):
        node = project.graph.nodes.get(f"gate:{kind}:{cell.address}")
        d = project.workspace.node_dir(node) if node else None
        out.append(read_gate_report(d, name) if d and read_result(d) is not None else None)
    return out[0], out[1]


def publish(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = (),
            force: bool = False, on_event=None, in_process: bool = False) -> RunSummary:
    """Publish built engines whose gates passed (or are pending where the manifest allows ungated publish)."""
    from dataclasses import replace

    from orchestrator.run.publish import PublishOptions, step_publish

    fingerprint = detect()
    cells = cells_in_scope(project, the_plan, shard=shard, only=only)
    base_payload = _payload_factory(project, fingerprint)
    nodes = dict(project.graph.nodes)
    selected = set()
    gate_dirs: dict[str, tuple[str | None, str | None]] = {}
    for cell in cells:
        pub = f"publish:{cell.address}"
        # the step reads the gates' verdicts itself: pending gates are a decision for it, not a missing input
        nodes[pub] = replace(nodes[pub], deps=(f"build:{cell.address}",))
        selected.add(pub)
        dirs = []
        for kind in ("parity", "benchmark"):
            gnode = project.graph.nodes.get(f"gate:{kind}:{cell.address}")
            dirs.append(str(project.workspace.node_dir(gnode)) if gnode else None)
        gate_dirs[cell.address] = (dirs[0], dirs[1])

    def prepare_task(node: Node):
        payload = base_payload(node)
        return replace(payload, extra=(PublishOptions(gate_dirs=gate_dirs[node.address], force=force),)), None

    registry_id = project.registry.url or project.registry.path or ""
    executor = Executor(workspace=project.workspace, steps={"publish": step_publish}, prepare_task=prepare_task,
                        jobs=1, keep_going=True, on_event=on_event or (lambda *a: None), in_process=in_process,
                        dir_salt=lambda node: registry_id if node.kind == "publish" else "",
                        always_run=lambda node: node.kind == "publish")
    order = [n for n in project.graph.order if n in selected]
    return executor.run(nodes, order, selected)


def _published_gates(project: Project, cell: Cell, index: dict) -> tuple[dict | None, dict | None] | None:
    """The gate reports recorded with the published artifact of this exact build key, if any."""
    entry = index.get(cell.address)
    if entry is None or entry.build_key != cell.build_key:
        return None
    for artifact in open_store(project.registry).find(address=cell.address):
        if artifact.metadata["build_key"] == cell.build_key:
            gates = artifact.metadata.get("gates") or {}
            return gates.get("parity"), gates.get("benchmark")
    return None


def report_cells(project: Project) -> list[dict]:
    """One dict per matrix cell for ``orchestrator.cli.render.report``: gate status and verdicts found on this machine."""
    from orchestrator.run.executor import read_result

    fingerprint = detect()
    published_index = registry_index(project.registry).latest_by_address()
    cells = []
    for cell in project.graph.cells:
        entry = {"address": cell.address, "model": cell.model, "precision": cell.precision.name,
                 "profile_set": cell.profile_set, "target": cell.target.slug, "parity": None, "benchmark": None}
        if cell.blocked:
            cells.append({**entry, "status": "blocked", "note": cell.blocked})
            continue
        build_node = project.graph.nodes[f"build:{cell.address}"]
        if read_result(project.workspace.node_dir(build_node)) is None:
            published = _published_gates(project, cell, published_index)
            if published is None:
                cells.append({**entry, "status": "skipped", "note": "not built on this machine"})
                continue
            parity, bench = published
            entry["note"] = "from the registry"
        else:
            parity, bench = gate_reports(project, cell)
        if parity:
            first = next(iter(parity["profiles"].values()), None)
            entry["parity"] = first
        if bench:
            entry["benchmark"] = bench["verdict"]
        model = project.models[cell.model]
        wanted = [r for r, on in ((parity, model.gate.parity.enabled), (bench, model.gate.benchmark.enabled)) if on]
        if any(r and r["status"] == "failed" for r in wanted):
            status = "failed"
        elif all(r is not None for r in wanted):
            status = "passed"
        else:
            reason = runtime_reason(cell_metadata_probe(cell), fingerprint)
            status, entry["note"] = "pending", (f"gate pending: {reason}" if reason else "not gated yet")
        cells.append({**entry, "status": status})
    return cells


from orchestrator.app.deploy import PullResult, pull  # noqa: E402,F401 - re-exported: the deployment half of the public API
