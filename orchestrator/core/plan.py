"""BuildGraph x registry index -> Plan (pure), shards, and the plan file format.

Status per cell, Terraform-like: ``+ build`` (nothing published at that address), ``~ rebuild`` (published,
but the build key differs: the changed inputs are named), ``~ refit`` (a ``refittable`` engine whose model has new
weights in an unchanged graph: ``weights changed: N of M initializers``; the published engine is refitted with them,
``core.weights.refit_change``), ``~ re-gate`` (the published engine is current but its
verdicts were given under other gate settings: the changed settings are named; gate again, no rebuild),
``+ publish`` (engine and verdicts are current but published under another model version: the same engine is
published again as this version, no rebuild, no gate), ``= up to date``, ``! blocked`` (with the reason).
A cell whose newest published record is damaged plans as ``~ rebuild`` with the reason ``record damaged: …``: its
metadata (gate verdicts, the builder's fingerprint) cannot be trusted, so the cell goes through build (a cache hit
where this machine still holds the engine), gate and publish again, and publish replaces the damaged record.
A saved plan records the manifests' digests and the registry state it was made against, so
``build --plan`` can refuse a plan whose world has moved.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from orchestrator.core.artifact import IndexEntry
from orchestrator.core.gatekeys import gate_changes
from orchestrator.core.graph import BuildGraph, Cell
from orchestrator.core.keys import changed_inputs
from orchestrator.core.model import Target, cc_slug
from orchestrator.core.toolchain import RUNNER, ResolvedToolchain
from orchestrator.core.weights import refit_change
from orchestrator.errors import PlanError

PLAN_FORMAT_VERSION = 1
Status = Literal["build", "rebuild", "refit", "regate", "publish", "up-to-date", "blocked"]
SYMBOL = {"build": "+", "rebuild": "~", "refit": "~", "regate": "~", "publish": "+", "up-to-date": "=", "blocked": "!"}
# what a status means for the pipeline verbs: these cells need work (build/gate/publish), in this order
CHANGED: tuple[str, ...] = ("build", "rebuild", "refit", "regate", "publish")
# the cells a runner has work for (build, gate): a ``publish`` cell's engine and verdicts come from the store
RUNNER_WORK: tuple[str, ...] = ("build", "rebuild", "refit", "regate")


@dataclass(frozen=True)
class PlanEntry:
    address: str
    status: Status
    build_key: str
    target: str
    model: str
    precision: str
    profile_set: str
    reason: str = ""
    changes: tuple[str, ...] = ()
    published_digest: str | None = None
    shard: str | None = None
    gate_key: str = ""
    published_version: str | None = None  # the model version of the published record it is compared with

    @classmethod
    def trusted(cls, **values: Any) -> PlanEntry:
        """``PlanEntry(**values)`` given every field, without the generated ``__init__`` (see ``Cell.trusted``)."""
        entry = object.__new__(cls)
        entry.__dict__.update(values)
        return entry

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address, "status": self.status, "symbol": SYMBOL[self.status],
            "build_key": self.build_key, "gate_key": self.gate_key, "model": self.model,
            "precision": self.precision,
            "profile_set": self.profile_set, "target": self.target, "reason": self.reason,
            "changes": list(self.changes), "published_digest": self.published_digest,
            "published_version": self.published_version, "shard": self.shard,
        }


@dataclass(frozen=True)
class Shard:
    """The work of one runner label set (split in chunks only when one set alone is very large)."""

    id: str
    build_labels: tuple[str, ...]
    gate_labels: tuple[str, ...]
    targets: tuple[str, ...]
    addresses: tuple[str, ...]
    toolchain: ResolvedToolchain = RUNNER  # every cell of a shard has this one
    # (builder, exact version, CCs or device) of its targets: keys the CI cache of timing/calibration caches
    cache_key: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "build_labels": list(self.build_labels), "gate_labels": list(self.gate_labels),
                "targets": list(self.targets), "addresses": list(self.addresses),
                "toolchain": self.toolchain.to_json(), "cache_key": self.cache_key}


@dataclass(frozen=True)
class Plan:
    entries: tuple[PlanEntry, ...]
    shards: tuple[Shard, ...]
    registry_state: str
    manifests: dict[str, str] = field(default_factory=dict)  # path -> sha256 of its bytes
    models: dict[str, str] = field(default_factory=dict)  # "name@version" -> model digest the keys were made from
    registry_note: str = ""  # what the registry said about itself (e.g. a local store that does not exist yet)

    def counts(self) -> Counter[str]:
        return Counter(e.status for e in self.entries)

    @property
    def has_changes(self) -> bool:
        c = self.counts()
        return any(c[s] for s in CHANGED)

    def summary(self) -> str:
        c = self.counts()
        regate = f"{c['refit']} to refit, " if c["refit"] else ""
        regate += f"{c['regate']} to re-gate, " if c["regate"] else ""
        publish = f"{c['publish']} to publish (engine reused), " if c["publish"] else ""
        return (f"Plan: {c['build']} to build, {c['rebuild']} to rebuild, {regate}{publish}{c['up-to-date']} up to "
                f"date, {c['blocked']} blocked")

    def to_json(self) -> dict[str, Any]:
        c = self.counts()
        return {
            "format_version": PLAN_FORMAT_VERSION,
            "registry_state": self.registry_state,
            "manifests": dict(self.manifests),
            "models": dict(self.models),
            "registry_note": self.registry_note,
            "summary": {"build": c["build"], "rebuild": c["rebuild"], "refit": c["refit"], "regate": c["regate"],
                        "publish": c["publish"], "up_to_date": c["up-to-date"],
                        "blocked": c["blocked"], "text": self.summary()},
            "cells": [e.to_json() for e in self.entries],
            "shards": [s.to_json() for s in self.shards],
        }

    def shard(self, shard_id: str) -> Shard:
        for s in self.shards:
            if s.id == shard_id:
                return s
        known = ", ".join(s.id for s in self.shards) or "none"
        raise PlanError(f"unknown shard {shard_id!r}", hint=f"shards in this plan: {known}")


# what the plan says of one cell: status, reason, changes, the published digest and version it is compared with
_Verdict = tuple[Status, str, tuple[str, ...], "str | None", "str | None"]


def _verdict(cell: Cell, published: IndexEntry | None, records: Mapping[str, str]) -> _Verdict:
    if cell.blocked:
        return "blocked", cell.blocked, (), None, None
    mine = records.get(cell.record_key)
    # a damaged newest record is asked for again, also when it is this cell's own record (the record-key listing
    # holds it too: only reading it finds the damage)
    own_damaged = published is not None and bool(published.damage) and (
        mine is None or (published.record_key or published.build_key) == cell.record_key)
    if mine is not None and not own_damaged:
        # this very record (engine, verdicts, version) is published, newest at its address or not
        return "up-to-date", f"published {mine[:19]}", (), mine, None
    if published is None:
        return "build", "not published", (), None, None
    if published.damage:
        damaged = (f"record damaged: {published.damage}",
                   "build (a cache hit where the engine is still here), gate and publish again: publish replaces it")
        return "rebuild", damaged[0], damaged, published.digest or None, None
    if published.build_key == cell.build_key:
        if published.gate_key == cell.gate_key:
            if published.version == cell.model_version:
                return "up-to-date", f"published {published.digest[:19]}", (), published.digest, None
            # a version bump of an unchanged model: the engine and its verdicts are current; the release is not
            return ("publish", f"version {cell.model_version}, engine reused",
                    (f"model version: {published.version} -> {cell.model_version} (engine "
                     f"{published.digest[:19]} and its verdicts reused)",), published.digest, published.version)
        if not published.gate_key:
            changed: tuple[str, ...] = ("its verdicts were published without a gate key (their settings are "
                                        "unknown)",)
        else:
            changed = tuple(gate_changes(published.gate_inputs, cell.gate_inputs, cell.precision.name))
        changed = changed or ("gate key changed",)
        return "regate", changed[0], changed, published.digest, None
    changes = tuple(changed_inputs(published.key_inputs, cell.key_inputs)) or ("build key changed",)
    weights_only = refit_change(published.key_inputs, cell.key_inputs)
    if weights_only is not None:  # a refittable engine, same graph, new weights (core.weights): refit, not rebuild
        return ("refit", weights_only.reason,
                (weights_only.reason,) + tuple(c for c in changes if not c.startswith("weights.")),
                published.digest, None)
    return "rebuild", changes[0], changes, published.digest, None


def _entry(cell: Cell, verdict: _Verdict, shard: str | None) -> PlanEntry:
    status, reason, changes, digest, version = verdict
    return PlanEntry.trusted(address=cell.address, status=status, build_key=cell.build_key, target=cell.target.name,
                             model=cell.model, precision=cell.precision.name, profile_set=cell.profile_set,
                             reason=reason, changes=changes, published_digest=digest, shard=shard,
                             gate_key=cell.gate_key, published_version=version)


def _slug(labels: tuple[str, ...]) -> str:
    text = "-".join(labels) or "any"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60]


def cache_key(cells: list[Cell]) -> str:
    """What the timing and calibration caches of these cells depend on: builder, exact version, CCs (or device).
    Readable for one target kind, else a digest of them all."""
    targets = {id(c.target): c.target for c in cells}.values()
    parts = sorted({f"{t.builder}-{t.builder_version}-"
                    + ("_".join(cc_slug(cc) for cc in t.compute_capabilities) or t.device) for t in targets})
    text = re.sub(r"[^A-Za-z0-9_.-]+", "_", parts[0] if len(parts) == 1 else "")
    if not text or len(text) > 80:
        text = "mixed-" + hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:16]
    return text


def make_shards(cells: tuple[Cell, ...], *, only_changed: set[str] | None = None,
                max_shards: int | None = None, max_cells_per_shard: int = 0) -> tuple[Shard, ...]:
    """Group cells by their build label set (+ gate labels) and toolchain. Chunks split a big group only while the
    total stays within ``max_shards`` (the CI emitter's limit, e.g. one GitHub matrix; None: no limit)."""
    groups: dict[tuple[tuple[str, ...], tuple[str, ...], ResolvedToolchain], list[Cell]] = {}
    # cells of one target share its labels and toolchain: the group is looked up once per target
    by_target: dict[int, tuple[Target, ResolvedToolchain, list[Cell]]] = {}
    for cell in cells:
        if cell.blocked or (only_changed is not None and cell.address not in only_changed):
            continue
        found = by_target.get(id(cell.target))
        if found is None or found[1] is not cell.toolchain:
            members = groups.setdefault((cell.build_labels, cell.gate_labels, cell.toolchain), [])
            found = by_target[id(cell.target)] = (cell.target, cell.toolchain, members)
        found[2].append(cell)
    if max_shards is not None and len(groups) > max_shards:
        raise PlanError(
            f"the plan needs {len(groups)} distinct runner label sets, more than the {max_shards} jobs the CI "
            "emitter can run in one workflow",
            hint="give targets that run on the same machines the same runner labels, or split the manifests "
                 "into several workflows (one `orchestrate ci ...` per manifest group)")
    shards = []
    budget = (max_shards - len(groups)) if max_shards is not None else len(cells)
    used: set[str] = set()
    for (build, gate, toolchain), members in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                                   kv[0][2].digest())):
        base = _slug(build)
        if toolchain.kind != "runner":  # e.g. self-hosted-gpu-l4@tensorrt-25.01-py3, gpu@pip-6f1c2a9e
            label = toolchain.image.rsplit("/", 1)[-1].split("@", 1)[0] if toolchain.kind == "container" else ""
            base += "@" + (_slug((label,))[:40] if label else f"{toolchain.kind}-{toolchain.digest()[:8]}")
        chunks = 1
        if max_cells_per_shard and len(members) > max_cells_per_shard:
            want = -(-len(members) // max_cells_per_shard)
            chunks = max(1, min(want, budget + 1))
            budget -= chunks - 1
        members = sorted(members, key=attrgetter("address"))
        size = -(-len(members) // chunks)
        for i in range(chunks):
            part = members[i * size:(i + 1) * size]
            if not part:
                continue
            sid = base if chunks == 1 else f"{base}.{i + 1}"
            if gate != build:
                sid += "~" + _slug(gate)[:30]
            if sid in used:  # slugs are truncated and sanitized: two label sets can slug alike
                sid += "-" + hashlib.sha256(repr((build, gate, toolchain.digest(), i)).encode()).hexdigest()[:8]
            used.add(sid)
            shards.append(Shard(id=sid, build_labels=build, gate_labels=gate,
                                targets=tuple(sorted({t.name for t in {id(c.target): c.target
                                                                       for c in part}.values()})),
                                addresses=tuple([c.address for c in part]), toolchain=toolchain,
                                cache_key=cache_key(part)))
    return tuple(shards)


def plan_against(graph: BuildGraph, published: Mapping[str, IndexEntry], registry_state: str,
                 manifests: Mapping[str, str] | None = None, *, max_shards: int | None = None,
                 max_cells_per_shard: int = 0, records: Mapping[str, str] | None = None,
                 registry_note: str = "") -> Plan:
    """Every cell against the registry: ``published`` is the newest record per address, ``records`` every record
    key the registry holds -> its engine digest (None: the store cannot list them; the newest record decides)."""
    records = records or {}
    verdicts = [_verdict(cell, published.get(cell.address), records) for cell in graph.cells]
    changed = tuple([cell for cell, v in zip(graph.cells, verdicts) if v[0] in CHANGED])
    shards = make_shards(changed, max_shards=max_shards, max_cells_per_shard=max_cells_per_shard)
    shard_of = {a: s.id for s in shards for a in s.addresses}
    entries = [_entry(cell, v, shard_of.get(cell.address)) for cell, v in zip(graph.cells, verdicts)]
    return Plan(entries=tuple(entries), shards=shards, registry_state=registry_state,
                manifests=dict(manifests or {}), models=model_digests(graph), registry_note=registry_note)


def model_digests(graph: BuildGraph) -> dict[str, str]:
    """``name@version`` -> the model digest the graph's keys were made from (its prepare nodes' keys)."""
    return {node.id.split(":", 1)[1]: node.key for node in graph.shared_nodes.values() if node.kind == "prepare"}


def plan_from_json(data: dict[str, Any]) -> Plan:
    if not isinstance(data, dict) or data.get("format_version") != PLAN_FORMAT_VERSION:
        got = data.get("format_version") if isinstance(data, dict) else None
        raise PlanError(f"unsupported plan format_version {got!r} (this orchestrate reads {PLAN_FORMAT_VERSION})",
                        hint="re-run `orchestrate plan --out FILE` with this version")
    try:
        entries = tuple(PlanEntry(address=c["address"], status=c["status"], build_key=c["build_key"],
                                  target=c["target"], model=c["model"], precision=c["precision"],
                                  profile_set=c["profile_set"], reason=c.get("reason", ""),
                                  changes=tuple(c.get("changes", ())), published_digest=c.get("published_digest"),
                                  shard=c.get("shard"), gate_key=c.get("gate_key", ""),
                                  published_version=c.get("published_version")) for c in data["cells"])
        shards = tuple(Shard(id=s["id"], build_labels=tuple(s["build_labels"]), gate_labels=tuple(s["gate_labels"]),
                             targets=tuple(s["targets"]), addresses=tuple(s["addresses"]),
                             toolchain=ResolvedToolchain.from_json(s.get("toolchain")),
                             cache_key=str(s.get("cache_key", ""))) for s in data["shards"])
        return Plan(entries=entries, shards=shards, registry_state=data["registry_state"],
                    manifests=dict(data.get("manifests", {})), models=dict(data.get("models", {})),
                    registry_note=str(data.get("registry_note") or ""))
    except (KeyError, TypeError) as e:
        raise PlanError(f"plan file is malformed: missing {e}",
                        hint="re-create it with `orchestrate plan --out`") from e
