"""plan_against / make_shards: literal graphs against literal registry indexes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.contracts.store import IndexEntry
from orchestrator.core.model import Tolerance
from orchestrator.core.plan import make_shards, plan_against, plan_from_json
from orchestrator.core.resolve import resolve
from orchestrator.errors import PlanError
from tests.unit.core_fixtures import capabilities, inputs_for, manifest, model, ort_target, rtx_target, target

A = "ocr-det/fp16/default@sm89+trt10.13"
ENGINE = "sha256:" + "e" * 64


def _graph(*manifests, **kw):
    return resolve(list(manifests), inputs_for(*manifests, **kw), capabilities)


def _published(cell, *, key_inputs=None, build_key=None, gate_key=None, gate_inputs=None) -> IndexEntry:
    return IndexEntry(address=cell.address, build_key=build_key or cell.build_key,
                      key_inputs=cell.key_inputs if key_inputs is None else key_inputs, model=cell.model,
                      version=cell.model_version, digest=ENGINE,
                      gate_key=cell.gate_key if gate_key is None else gate_key,
                      gate_inputs=cell.gate_inputs if gate_inputs is None else gate_inputs)


def test_nothing_published_everything_builds():
    g = _graph(manifest([model("ocr-det")], [target()]))
    p = plan_against(g, {}, "empty")
    (e,) = p.entries
    assert (e.address, e.status, e.reason, e.shard) == (A, "build", "not published", "self-hosted-sm89-trt10.13")
    assert p.summary() == "Plan: 1 to build, 0 to rebuild, 0 up to date, 0 blocked"
    assert p.has_changes


def test_up_to_date_when_the_published_key_matches():
    g = _graph(manifest([model("ocr-det")], [target()]))
    p = plan_against(g, {A: _published(g.cell(A))}, "state-1")
    (e,) = p.entries
    assert (e.status, e.reason, e.published_digest, e.shard) == ("up-to-date", "published sha256:eeeeeeeeeeee",
                                                                  ENGINE, None)
    assert p.shards == ()
    assert not p.has_changes
    assert p.summary() == "Plan: 0 to build, 0 to rebuild, 1 up to date, 0 blocked"


def test_a_damaged_published_record_plans_as_rebuild_with_its_reason():
    # issue 23.1: the newest record of an address is damaged -> not "up to date": build, gate and publish again
    g = _graph(manifest([model("ocr-det")], [target()]))
    damaged = replace(_published(g.cell(A)), damage="not JSON: Expecting value: line 1 column 1 (char 0)")
    p = plan_against(g, {A: damaged}, "state-1")
    (e,) = p.entries
    assert (e.status, e.reason, e.published_digest) == (
        "rebuild", "record damaged: not JSON: Expecting value: line 1 column 1 (char 0)", ENGINE)
    assert e.changes[1].startswith("build (a cache hit where the engine is still here), gate and publish again")
    assert e.shard is not None and p.has_changes


def test_the_registry_note_travels_with_the_plan():
    g = _graph(manifest([model("ocr-det")], [target()]))
    p = plan_against(g, {}, "empty", registry_note="the local store /x does not exist yet")
    assert p.to_json()["registry_note"] == "the local store /x does not exist yet"
    assert plan_from_json(p.to_json()).registry_note == p.registry_note
    assert plan_against(g, {}, "empty").to_json()["registry_note"] == ""


def test_a_new_model_version_of_a_current_engine_is_published_not_rebuilt():
    """Issue 22.1: same build key and gate key, another model version: ``+ publish``, the engine reused."""
    g = _graph(manifest([model("ocr-det")], [target()]))
    cell = g.cell(A)
    older = replace(_published(cell), version="0.9.0")
    p = plan_against(g, {A: older}, "state-1")
    (e,) = p.entries
    assert (e.status, e.reason, e.published_digest, e.published_version) == (
        "publish", "version 1.0.0, engine reused", ENGINE, "0.9.0")
    assert e.changes == ("model version: 0.9.0 -> 1.0.0 (engine sha256:eeeeeeeeeeee and its verdicts reused)",)
    assert p.has_changes and p.to_json()["summary"]["publish"] == 1
    assert p.summary() == "Plan: 0 to build, 0 to rebuild, 1 to publish (engine reused), 0 up to date, 0 blocked"
    assert plan_from_json(p.to_json()).entries == p.entries
    # the record of this very version is in the store, though not the newest at its address: up to date
    p = plan_against(g, {A: older}, "state-2", records={cell.record_key: "sha256:" + "d" * 64})
    (e,) = p.entries
    assert (e.status, e.published_digest) == ("up-to-date", "sha256:" + "d" * 64)
    # the record key holds the model version: another version is another record of the same engine
    other = replace(cell, model_version="0.9.0")
    assert len({cell.record_key, other.record_key, cell.build_key}) == 3


def test_a_new_recipe_version_rebuilds_and_the_plan_names_it():
    """Issue 23.21: a builder's or transform's recipe version is a build-key input; plan names the plugin."""
    m = manifest([model("ocr-det")], [target()])
    inputs = inputs_for(m)
    old = resolve([m], replace(inputs, recipes={"builder:tensorrt": "0.1.0"}), capabilities)
    new = resolve([m], replace(inputs, recipes={"builder:tensorrt": "0.2.0"}), capabilities)
    assert old.cell(A).key_inputs["builder"]["recipe"] == "0.1.0"
    assert old.cell(A).build_key != new.cell(A).build_key
    (e,) = plan_against(new, {A: _published(old.cell(A))}, "s").entries
    assert (e.status, e.changes) == ("rebuild", ("builder recipe: tensorrt 0.1.0 -> 0.2.0",))
    # a transform's recipe moves the keys of the cells built from its output (and that transform node's key)
    m16 = manifest([model("ocr-det", precs=("fp16",))], [rtx_target()])
    a16, b16 = (resolve([m16], replace(inputs_for(m16), recipes={"transform:fp16": r}), capabilities)
                for r in ("1", "2"))
    (cell,) = a16.cells
    assert cell.transform_node and b16.cells[0].build_key != cell.build_key
    (e,) = plan_against(b16, {cell.address: _published(cell)}, "s").entries
    assert e.changes == ("transform recipe: fp16 1 -> 2",)


def test_regate_changes_name_each_manifest_field_once():
    """Issue 22.7: one tolerance field moved: one line (not one per resolved copy, no ``source`` trail)."""
    m = manifest([model("ocr-det")], [target()])
    (mod,) = m.models
    looser = replace(mod.gate.parity, tolerances={"fp16": Tolerance(atol=0.02)},
                     per_output={"logits": Tolerance(min_cosine=0.5)})
    new = _graph(replace(m, models=(replace(mod, gate=replace(mod.gate, parity=looser)),)))
    (e,) = plan_against(new, {A: _published(_graph(m).cell(A))}, "s").entries
    assert e.changes == ("gate.parity.tolerances.fp16.atol: 0.01 -> 0.02",
                         "gate.parity.per_output.logits.min_cosine: 0.99 -> 0.5")


def _tightened(m):
    """``m``'s model with its fp16 parity tolerance tightened to exact equality (what the issue tried)."""
    (mod,) = m.models
    parity = replace(mod.gate.parity, tolerances={"fp16": Tolerance(atol=0.0, rtol=0.0, min_cosine=1.0)})
    return replace(m, models=(replace(mod, gate=replace(mod.gate, parity=parity)),))


def test_a_tightened_tolerance_re_gates_without_rebuilding_and_names_the_setting():
    m = manifest([model("ocr-det")], [target()])
    old = _graph(m).cell(A)
    new = _graph(_tightened(m))
    assert new.cell(A).build_key == old.build_key and new.cell(A).gate_key != old.gate_key
    p = plan_against(new, {A: _published(old)}, "s")
    (e,) = p.entries
    assert e.status == "regate" and e.published_digest == ENGINE
    # each changed setting once, named as the manifest field (not per resolved copy, no `source` trail)
    assert e.changes == ("gate.parity.tolerances.fp16.atol: 0.01 -> 0.0",
                         "gate.parity.tolerances.fp16.min_cosine: 0.99 -> 1.0",
                         "gate.parity.tolerances.fp16.rtol: 0.01 -> 0.0")
    assert p.summary() == "Plan: 0 to build, 0 to rebuild, 1 to re-gate, 0 up to date, 0 blocked"
    assert p.has_changes and [s.addresses for s in p.shards] == [(A,)]  # a runner must gate it again
    # the gate nodes' keys moved with it (a cached verdict under the old settings is never found)
    assert new.nodes[f"gate:parity:{A}"].key != _graph(m).nodes[f"gate:parity:{A}"].key
    assert new.nodes[f"build:{A}"].key == old.build_key


def test_a_record_published_before_gate_keys_re_gates_saying_so():
    g = _graph(manifest([model("ocr-det")], [target()]))
    (e,) = plan_against(g, {A: _published(g.cell(A), gate_key="", gate_inputs={})}, "s").entries
    assert (e.status, e.reason) == ("regate", "its verdicts were published without a gate key (their settings "
                                              "are unknown)")


def test_rebuild_names_the_changed_builder_version():
    old = _graph(manifest([model("ocr-det")], [target(version="10.13.2.6")])).cell(A)
    new = _graph(manifest([model("ocr-det")], [target(version="10.13.3.9")]))
    (e,) = plan_against(new, {A: _published(old)}, "s").entries
    assert e.status == "rebuild"
    assert e.changes == ("builder.version: 10.13.2.6 -> 10.13.3.9",)
    assert e.reason == "builder.version: 10.13.2.6 -> 10.13.3.9"
    assert e.published_digest == ENGINE


def test_rebuild_names_every_changed_input_shortened():
    m = manifest([model("ocr-det")], [target()])
    old = _graph(m, digests={"/models/ocr-det.onnx": "sha256:" + "a" * 64}).cell(A)
    m2 = manifest([model("ocr-det")], [target(options=target().options.__class__(optimization_level=5))])
    new = _graph(m2, digests={"/models/ocr-det.onnx": "sha256:" + "b" * 64})
    (e,) = plan_against(new, {A: _published(old)}, "s").entries
    assert e.changes == ("model.digest: sha256:aaaaaaaaaaaa -> sha256:bbbbbbbbbbbb",
                         "options.optimization_level: null -> 5")


def test_rebuild_of_an_entry_without_key_inputs_still_says_why():
    g = _graph(manifest([model("ocr-det")], [target()]))
    cell = g.cell(A)
    (e,) = plan_against(g, {A: _published(cell, key_inputs=cell.key_inputs, build_key="0" * 64)}, "s").entries
    assert (e.status, e.changes, e.reason) == ("rebuild", ("build key changed",), "build key changed")
    (e,) = plan_against(g, {A: _published(cell, key_inputs={}, build_key="0" * 64)}, "s").entries
    assert "builder.version: (absent) -> 10.13.3.9" in e.changes


def test_blocked_cells_are_reported_and_never_sharded():
    g = _graph(manifest([model("m", precs=("fp16", "fp8"))], [target("a10", ccs=("8.6",))]))
    p = plan_against(g, {}, "s")
    by = {e.address: e for e in p.entries}
    assert by["m/fp8/default@sm86+trt10.13"].status == "blocked"
    assert by["m/fp8/default@sm86+trt10.13"].reason == "fp8 needs compute capability >= 8.9; target has sm86"
    assert by["m/fp8/default@sm86+trt10.13"].shard is None
    assert [s.addresses for s in p.shards] == [("m/fp16/default@sm86+trt10.13",)]
    assert p.summary() == "Plan: 1 to build, 0 to rebuild, 0 up to date, 1 blocked"


def test_entries_follow_cell_order_and_the_plan_is_deterministic():
    m = manifest([model("b"), model("a", precs=("fp32", "fp16"))], [target(), rtx_target(), ort_target()])
    p1, p2 = plan_against(_graph(m), {}, "s"), plan_against(_graph(m), {}, "s")
    assert [e.address for e in p1.entries] == sorted(e.address for e in p1.entries)
    assert p1 == p2
    assert p1.to_json() == p2.to_json()


def test_shards_group_by_build_and_gate_label_sets():
    m = manifest([model("det"), model("rec")],
                 [target("l4", build=("self-hosted", "sm89")), target("l4-b", ccs=("8.9",), version="10.8.0.43",
                                                                      build=("self-hosted", "sm89")),
                  rtx_target("rtx", ccs=("8.6", "8.9"), build=("self-hosted", "cpu"), gate=("self-hosted", "rtx")),
                  ort_target("ort", build=("ubuntu-latest",))])
    g = _graph(m)
    published = {"det/fp16/default@sm89+trt10.13": _published(g.cell("det/fp16/default@sm89+trt10.13"))}
    p = plan_against(g, published, "s")
    assert [(s.id, s.build_labels, s.gate_labels, s.targets, s.addresses) for s in p.shards] == [
        ("self-hosted-cpu~self-hosted-rtx", ("self-hosted", "cpu"), ("self-hosted", "rtx"), ("rtx",),
         ("det/fp16/default@sm86-sm89+rtx1.2", "rec/fp16/default@sm86-sm89+rtx1.2")),
        ("self-hosted-sm89", ("self-hosted", "sm89"), ("self-hosted", "sm89"), ("l4", "l4-b"),
         ("det/fp16/default@sm89+trt10.8", "rec/fp16/default@sm89+trt10.13", "rec/fp16/default@sm89+trt10.8")),
        ("ubuntu-latest", ("ubuntu-latest",), ("ubuntu-latest",), ("ort",),
         ("det/fp16/default@cpu+ort1.23", "rec/fp16/default@cpu+ort1.23")),
    ]
    shard_of = {e.address: e.shard for e in p.entries}
    assert shard_of["det/fp16/default@sm89+trt10.13"] is None  # up to date: no work
    assert shard_of["rec/fp16/default@sm89+trt10.8"] == "self-hosted-sm89"
    assert p.shard("ubuntu-latest").targets == ("ort",)


def test_big_label_set_is_chunked_within_the_matrix_budget():
    m = manifest([model(f"m{i}") for i in range(5)], [target()])
    shards = make_shards(_graph(m).cells, max_cells_per_shard=2)
    assert [(s.id, len(s.addresses)) for s in shards] == [
        ("self-hosted-sm89-trt10.13.1", 2), ("self-hosted-sm89-trt10.13.2", 2), ("self-hosted-sm89-trt10.13.3", 1)]
    assert [a for s in shards for a in s.addresses] == sorted(c.address for c in _graph(m).cells)
    # no budget left: one shard per label set regardless of its size
    assert len(make_shards(_graph(m).cells, max_cells_per_shard=2, max_shards=1)) == 1


def _label_set_graph(n: int):
    return _graph(manifest([model("m", precs=("fp32",))],
                           [target(f"t{i}", ccs=("8.9",), version=f"10.{i}.0.1", build=("self-hosted", f"pool-{i}"))
                            for i in range(n)]))


def test_256_label_sets_fit_a_limit_of_256():
    assert len(make_shards(_label_set_graph(256).cells, max_shards=256)) == 256


def test_more_label_sets_than_the_emitters_limit_is_a_plan_error():
    g = _label_set_graph(257)
    with pytest.raises(PlanError) as e:
        plan_against(g, {}, "s", max_shards=256)
    assert e.value.message == ("the plan needs 257 distinct runner label sets, more than the 256 jobs the CI "
                               "emitter can run in one workflow")
    assert e.value.hint.startswith("give targets that run on the same machines the same runner labels")
    # only cells with work count: with one up to date, the rest fits
    first = g.cells[0]
    assert len(plan_against(g, {first.address: _published(first)}, "s", max_shards=256).shards) == 256


def test_without_an_emitter_limit_any_number_of_label_sets_plans():
    # plan, build and Kubernetes users are not bound by GitHub's matrix size
    assert len(plan_against(_label_set_graph(300), {}, "s").shards) == 300


def test_shard_ids_are_unique_even_when_label_slugs_collide():
    long = ("self-hosted", "linux", "x64", "gpu", "nvidia-l4-24gb", "sm89", "tensorrt")  # > 60 chars: truncated
    m = manifest([model("m", precs=("fp32",))],
                 [target("a", build=long + ("10.13.2.6",)),
                  target("b", version="10.8.0.43", build=long + ("10.8.0.43",)),
                  target("c", version="10.9.0.34", build=("gpu a",)),
                  target("d", version="10.10.0.31", build=("gpu/a",))])
    shards = plan_against(_graph(m), {}, "s").shards
    ids = [s.id for s in shards]
    assert len(set(ids)) == len(ids) == 4, ids
    assert all(len(i) <= 80 for i in ids)


def test_unknown_shard_is_a_plan_error_listing_the_known_ones():
    p = plan_against(_graph(manifest([model()], [target()])), {}, "s")
    with pytest.raises(PlanError) as e:
        p.shard("nope")
    assert (e.value.message, e.value.hint) == ("unknown shard 'nope'", "shards in this plan: self-hosted-sm89-trt10.13")


def test_plan_json_round_trips():
    m = manifest([model("det"), model("m", precs=("fp8",))], [target("a10", ccs=("8.6",)), ort_target()])
    g = _graph(m)
    p = plan_against(g, {"det/fp16/default@cpu+ort1.23": _published(g.cell("det/fp16/default@cpu+ort1.23"))},
                     "state-7", {"/repo/manifests/vision.yaml": "ab" * 32})
    data = p.to_json()
    assert data["format_version"] == 1
    assert data["summary"] == {"build": 1, "rebuild": 0, "refit": 0, "regate": 0, "publish": 0, "up_to_date": 1,
                               "blocked": 2, "text": "Plan: 1 to build, 0 to rebuild, 1 up to date, 2 blocked"}
    assert data["cells"][0]["symbol"] == "="
    assert plan_from_json(data) == p


def test_plan_from_json_refuses_other_format_versions():
    with pytest.raises(PlanError) as e:
        plan_from_json({"format_version": 2})
    assert e.value.message == "unsupported plan format_version 2 (this orchestrate reads 1)"
    with pytest.raises(PlanError) as e:
        plan_from_json({"format_version": 1, "cells": []})
    assert e.value.message == "plan file is malformed: missing 'shards'"
