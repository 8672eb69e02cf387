"""Loading a project: manifests (with the installed plugins' answers), model digests, the resolved build graph,
the work directory. Everything the pipeline verbs share."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator import hardware, plugins
from orchestrator.app import sources
from orchestrator.core.capabilities import BuilderCapabilities
from orchestrator.core.graph import BuildGraph, Cell
from orchestrator.core.model import Manifest, Model, RegistryConfig
from orchestrator.core.resolve import CapabilitiesFn, ResolveInputs, resolve
from orchestrator.digests import DigestCache, hash_file
from orchestrator.errors import UsageError
from orchestrator.manifest import load_manifests as load_manifest_files
from orchestrator.run.workspace import Workspace


def default_workspace(cache_dir: str | os.PathLike[str] | None = None) -> Workspace:
    root = cache_dir or os.environ.get("ORCHESTRATE_CACHE") or ".orchestrate"
    return Workspace(Path(root).absolute())


@dataclass(frozen=True)
class Project:
    manifests: tuple[Manifest, ...]
    graph: BuildGraph
    workspace: Workspace
    manifest_digests: dict[str, str]
    # every other path loading it read or looked for (model files and their external data, data files and
    # folders, data paths that are absent): what the start-up fast path witnesses (``orchestrator.fastpath``)
    inputs: tuple[str, ...] = ()
    # files that stand for content they do not hash to, by path -> the digest keyed (``project_of``'s ``known``):
    # a model version's ONNX fetched from the registry for ``pull --build-on-miss`` (``app.heal``)
    stand_ins: Mapping[str, str] = field(default_factory=dict)

    @property
    def models(self) -> dict[str, Model]:
        return {m.name: m for man in self.manifests for m in man.models}

    @property
    def registry(self) -> RegistryConfig:
        return self.manifests[0].registry

    def model_of(self, cell: Cell) -> Model:
        """The cell's model with the cell's gate settings (its target's ``gate:`` over the model's, when given)."""
        model = self.models[cell.model]
        return model if cell.gate is None else replace(model, gate=cell.gate)

    def manifest_of(self, cell: Cell) -> Manifest:
        return next(m for m in self.manifests if m.file == cell.manifest)


def display_path(path: str) -> str:
    """Relative to the working directory when inside it: plans move between runners with other checkouts."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def load_manifests(paths: Sequence[str | os.PathLike[str]],
                   capabilities: CapabilitiesFn | None = None, *, absent_files_ok: bool = False
                   ) -> tuple[Manifest, ...]:
    """The manifests, checked against what the installed builder plugins can do (or ``capabilities``);
    ``absent_files_ok``: a deployment's manifest, whose model and data files need not be here."""
    if not paths:
        raise UsageError("no manifest given", hint="orchestrate plan manifests/demo.yaml")
    return load_manifest_files([str(p) for p in paths],
                               capabilities=capabilities or plugins.builder_capabilities,
                               builder_names=plugins.names(plugins.BUILDERS), builder_slug=plugins.builder_slug,
                               store_names=plugins.names(plugins.STORES), absent_files_ok=absent_files_ok)


def registry_of(paths: Sequence[str | os.PathLike[str]]) -> RegistryConfig:
    return load_manifests(paths)[0].registry


def load_project(paths: Sequence[str | os.PathLike[str]], *, cache_dir: str | os.PathLike[str] | None = None,
                 capabilities: CapabilitiesFn | None = None) -> Project:
    manifests = load_manifests(paths, capabilities)
    ws = default_workspace(cache_dir)
    # url sources: keyed by their pin, their path is where build/gate put the verified download (plan fetches none)
    return project_of(sources.localize(manifests, ws.root), ws, capabilities)


def project_of(manifests: tuple[Manifest, ...], ws: Workspace, capabilities: CapabilitiesFn | None = None,
               known: Mapping[str, str] | None = None) -> Project:
    """Manifests already loaded (and localized) as a project: model and data digests, the resolved graph. The
    upgrade rehearsal resolves manifests whose targets it re-targeted this way. ``known``: path -> digest for files
    keyed by a digest established elsewhere, never hashed here (build-on-miss: the model version's ONNX fetched from
    the registry stands for the model its records were built from; data a deployment does not have)."""
    known = dict(known or {})
    registries = {m.registry for m in manifests}
    if len(registries) > 1:
        raise UsageError("the manifests name different registries; plan them separately",
                         hint="give every manifest planned together the same `registry:`")
    cache = DigestCache.open(ws.root / "digests.json")
    model_digests = {}
    data_digests = {}
    probed: set[str] = set()
    for man in manifests:
        for model in man.models:
            model_digests[model.source.path] = known.get(model.source.path) or sources.model_digest(model, cache)
            # calibration data reaches build keys, parity data gate keys: both by content, never by path
            for data in (model.calibration, model.gate.parity.data):
                for path in (data.path, data.labels) if data else ():
                    probed.add(path or "")
                    if path and path not in data_digests and (path in known or os.path.exists(path)):
                        data_digests[path] = known.get(path) or cache.data_digest(path)
        for _, gate in (*man.cell_gates, *man.rule_gates):  # a target's or a matrix rule's parity data (and labels)
            for path in (gate.parity.data.path, gate.parity.data.labels):
                probed.add(path or "")
                if path and path not in data_digests and (path in known or os.path.exists(path)):
                    data_digests[path] = known.get(path) or cache.data_digest(path)
    # refittable targets plan ``~ refit`` from each model's graph and initializer digests (core.weights)
    structures = {m.source.path: cache.model_structure(m.source.path, model_digests[m.source.path])
                  for man in manifests if any(t.weights == "refittable" for t in man.targets)
                  for m in man.models if m.source.url is None or os.path.exists(m.source.path)}
    cache.save()
    caps: CapabilitiesFn = capabilities or plugins.builder_capabilities
    problems = plugins.transform_problems()
    graph = resolve(manifests, ResolveInputs(model_digests=model_digests, data_digests=data_digests,
                                             transforms=frozenset(k for k, why in problems.items() if not why),
                                             transform_problems={k: why for k, why in problems.items() if why},
                                             recipes=plugins.recipes(), model_structures=structures,
                                             cpu_isa=_cpu_isa(manifests)),
                    caps)
    digests = {display_path(m.file): _file_sha256(m.file) for m in manifests}
    return Project(manifests, graph, ws, digests, tuple(sorted((probed - {""}) | cache.touched)), known)


def _cpu_isa(manifests: Sequence[Manifest]) -> tuple[str, ...] | None:
    """This runner's kernel-selecting CPU features, read only when a `cpu_match: isa` CPU target needs them (its
    gate key names the ISA its verdicts hold for); None: no such target, or the ISA is unknown here."""
    if not any(t.device == "cpu" and t.cpu_match == "isa" for m in manifests for t in m.targets):
        return None
    cpu = hardware.cpu_info()
    return cpu.features if cpu.known else None


def _file_sha256(path: str) -> str:
    return hash_file(path)[0].split(":", 1)[1]


__all__ = ["BuilderCapabilities", "Project", "default_workspace", "display_path", "load_manifests",
           "load_project", "project_of", "registry_of"]
