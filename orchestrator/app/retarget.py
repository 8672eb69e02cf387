"""The upgrade rehearsal's rebuild set: the targets whose engines stop loading, re-targeted at the new stack's exact
builder version and resolved like any manifest (``app.project.project_of``), so each cell's build key is the one
``plan`` computes for a manifest that declares the new stack; the manifest checks say what the new builder version
refuses in a re-targeted target; each cell's build time is predicted from the registry's records
(``core.upgrade.estimate_build``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator import plugins
from orchestrator.app.project import Project, project_of
from orchestrator.contracts.store import Store
from orchestrator.core.graph import Cell
from orchestrator.core.model import Manifest, Target, target_slug
from orchestrator.core.plan import PlanEntry
from orchestrator.core.upgrade import BuildEstimate, BuildRecord, estimate_build, place_of, retarget
from orchestrator.manifest.checks import CheckInput, check


@dataclass(frozen=True)
class Rebuild:
    """A cell of the rebuild set: the engine that stops loading (``replaces``) and the re-targeted cell's plan
    entry against the registry (its address and build key are what ``plan`` says for a manifest declaring the new
    stack), with its predicted build time."""

    replaces: str
    entry: PlanEntry
    estimate: BuildEstimate
    problem: str | None = None  # what the new builder version refuses in the re-targeted target (manifest checks)

    def to_json(self) -> dict[str, Any]:
        return {"replaces": self.replaces, **self.entry.to_json(), "problem": self.problem,
                "predicted_build": self.estimate.to_json()}


def _check_input(manifest: Manifest) -> CheckInput:
    return CheckInput(manifest.models, manifest.targets, [m.name for m in manifest.models],
                      [t.name for t in manifest.targets], manifest.include, manifest.exclude)


def _new_problems(before: Manifest, after: Manifest, moved: set[str]) -> dict[str, str]:
    """target name -> the first thing the manifest checks refuse in its re-targeted form that they did not refuse
    before (an option the new builder version does not apply, a toolchain it has no image for, ...)."""
    def findings(m: Manifest) -> list[tuple[tuple[Any, ...], str]]:
        return [(tuple(f.path), f.message) for f in check(_check_input(m), capabilities=plugins.builder_capabilities,
                                                          builder_names=plugins.names(plugins.BUILDERS))]

    old = set(findings(before))
    out: dict[str, str] = {}
    for path, message in findings(after):
        if (path, message) in old or len(path) < 2 or path[0] != "targets":
            continue
        name = after.targets[int(path[1])].name
        if name in moved:
            out.setdefault(name, ".".join(str(p) for p in path) + f": {message}")
    return out


@dataclass(frozen=True)
class Retargeted:
    project: Project
    # (manifest file, target name) -> the target whose cells the rebuild uses: itself re-targeted, or another
    # target of that manifest that already declares the new stack for the same place (its address)
    targets: dict[tuple[str, str], str]
    problems: dict[tuple[str, str], str]


def retargeted_project(project: Project, moved: set[tuple[str, str]], version: str, serve: str | None,
                       platform: str | None = None) -> Retargeted:
    """The project with the ``moved`` targets (manifest file, target name) built by builder ``version`` for the
    serving stack ``serve`` (None: a runtime release) and ``platform`` (None: theirs), resolved like any
    manifest."""
    manifests = []
    names: dict[tuple[str, str], str] = {}
    problems: dict[tuple[str, str], str] = {}
    for manifest in project.manifests:
        slugs = {target_slug(t): t.name for t in manifest.targets if (manifest.file, t.name) not in moved}
        targets: list[Target] = []
        for t in manifest.targets:
            if (manifest.file, t.name) not in moved:
                targets.append(t)
                continue
            new_target = retarget(t, version, serve, platform)
            same = slugs.get(target_slug(new_target))
            if same is not None:  # the manifest already declares this place on the new stack: that target's cells
                names[(manifest.file, t.name)] = same
                targets.append(t)
            else:
                names[(manifest.file, t.name)] = t.name
                targets.append(new_target)
        after = replace(manifest, targets=tuple(targets))
        for name, why in _new_problems(manifest, after, {n for (f, n) in moved if f == manifest.file}).items():
            problems[(manifest.file, name)] = why
        manifests.append(after)
    return Retargeted(project_of(tuple(manifests), project.workspace), names, problems)


def build_records(store: Store) -> list[BuildRecord]:
    """Every record's build duration, with what it was built by and for (records without one are passed over)."""
    out = []
    for art in store.records():
        m = art.metadata
        seconds = (m.get("timings") or {}).get("build_seconds")
        target = m.get("target") or {}
        if not isinstance(seconds, (int, float)) or seconds <= 0:
            continue
        out.append(BuildRecord(str(m["model"]["name"]), str(m.get("precision")), str(m.get("profile_set")),
                               str(m["builder"]["name"]), str(m["builder"]["version"]),
                               place_of(target.get("compute_capabilities") or (),
                                        str(target.get("hardware_compatibility") or "none"),
                                        str(target.get("device") or "gpu")),
                               float(seconds)))
    return out


def estimate(cell: Cell, records: Sequence[BuildRecord]) -> BuildEstimate:
    t = cell.target
    return estimate_build(cell.model, cell.precision.name, cell.profile_set, t.builder,
                          place_of(t.compute_capabilities, t.hardware_compatibility, t.device), records)
