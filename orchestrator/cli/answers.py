"""What a `plan` or no-op `build` read, told to the start-up fast path (``orchestrator.fastpath``) so that the same
invocation is answered from its saved result until one of those paths moves."""

from __future__ import annotations

import os
from typing import Any

from orchestrator import fastpath
from orchestrator.app.project import Project
from orchestrator.cli.common import recording
from orchestrator.contracts.store import IndexReader, StateWitness

# local times in `plan` (when a cell last ran here) are formatted with the system's time zone
_TIME_ZONE = "/etc/localtime"
# past this many cells no answer is kept: witnessing each cell's node folders costs what planning them costs
_MAX_CELLS = 50_000


def _node_reads(project: Project) -> list[str]:
    """The node folders `plan` reads each cell's last outcome here from (``app.outcomes``): under ``nodes/`` every
    folder (each kind's is listed) and file (a result names files whose sizes it checks)."""
    out = [str(project.workspace.root / "nodes")]
    for folder, _, files in os.walk(project.workspace.root / "nodes"):
        out.append(folder)
        out += [os.path.join(folder, f) for f in files]
    return out


def remember(project: Project, index: IndexReader, *, outcomes: bool, record: dict[str, Any] | None = None) -> None:
    """Tell the recorder (when this command is recorded) what the answer depends on. An index that names no
    files (a remote registry: ``StateWitness``) keeps no answer. ``outcomes``: the answer shows each cell's last
    outcome here (`plan`), so the cache folder's results are read too; ``record``: a no-op build's run summary."""
    recorder = recording()
    if recorder is None or not isinstance(index, StateWitness) or len(project.graph.cells) > _MAX_CELLS:
        return
    registry = index.witness()
    if not registry:
        return
    stat_paths = [*project.inputs, *registry, *fastpath.module_files(), _TIME_ZONE]
    if outcomes:
        stat_paths += _node_reads(project)
    recorder.note([m.file for m in project.manifests], stat_paths, record,
                  runs=str(project.workspace.root / "runs") if outcomes else None)
