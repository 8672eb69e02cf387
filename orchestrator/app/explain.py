"""``orchestrate explain ADDR``: everything a cell's keys are made of, and how it stands against the registry.

The build key's inputs (model digest, transform, calibration, precision route, profiles, builder, target incl.
platform, the options its builder applies, plugin libraries, salt), the calibration cache's key, each gate
node's key and the gate inputs (resolved tolerances, data, benchmark settings, runtime, deploy policy), and the
plan entry against the registry with every changed field named (``core.keys.changed_inputs``). Which manifest
field reaches which key is ``core.keyspec``'s table.
"""

from __future__ import annotations

import difflib
from typing import Any

from orchestrator.app.pipeline import plan
from orchestrator.app.project import Project
from orchestrator.contracts.store import IndexReader
from orchestrator.errors import UsageError


def explain(project: Project, address: str, index: IndexReader | None = None) -> dict[str, Any]:
    """The key inputs of ``address`` as data (``--json`` prints it as is), with its plan entry."""
    known = {c.address for c in project.graph.cells}
    if address not in known:
        close = difflib.get_close_matches(address, sorted(known), n=1)
        raise UsageError(f"unknown cell address {address!r}",
                         hint=f"did you mean {close[0]!r}?" if close else "see `orchestrate plan` for the cells")
    cell = project.graph.cell(address)
    entry = next(e for e in plan(project, index).entries if e.address == address)
    nodes = {n.id: {"kind": n.kind, "key": n.key, "deps": list(n.deps)} for n in project.graph.nodes_of(address)}
    for extra in (cell.calibrate_node, cell.transform_node):
        node = project.graph.nodes.get(extra or "")
        if node is not None:
            nodes[node.id] = {"kind": node.kind, "key": node.key, "deps": list(node.deps)}
    return {
        "address": address,
        "plan": {"status": entry.status, "reason": entry.reason, "changes": list(entry.changes),
                 "published_digest": entry.published_digest},
        "blocked": cell.blocked,
        "build_key": cell.build_key,
        "build_inputs": cell.key_inputs,
        "gate_key": cell.gate_key,
        "gate_inputs": cell.gate_inputs,
        "nodes": nodes,
    }
