"""``~ refit`` in the pure core (issue 25.4): a refittable cell whose model keeps its graph digest and changes only
initializer values plans ``refit`` naming "weights changed: N of M initializers"; any other difference, a graph change,
a calibrated cell or an engine that is not refittable is a rebuild. Literal graphs and key inputs."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.contracts.store import IndexEntry
from orchestrator.core.plan import plan_against
from orchestrator.core.resolve import resolve
from orchestrator.core.weights import refit_change, refit_inputs
from tests.unit.core_fixtures import capabilities, inputs_for, manifest, model, target

GRAPH = "sha256:" + "a" * 64
WEIGHTS = {"conv.w": "1" * 64, "conv.b": "2" * 64, "fc.w": "3" * 64}
ENGINE = "sha256:" + "e" * 64


def _graph(m, *, digest: str, graph: str = GRAPH, weights: dict[str, str] = WEIGHTS):
    path = m.models[0].source.path
    inputs = replace(inputs_for(m, digests={path: digest}), model_structures={path: (graph, weights)})
    return resolve([m], inputs, capabilities)


def _published(cell) -> IndexEntry:
    return IndexEntry(address=cell.address, build_key=cell.build_key, key_inputs=cell.key_inputs, model=cell.model,
                      version=cell.model_version, digest=ENGINE, gate_key=cell.gate_key, gate_inputs=cell.gate_inputs)


def _cell(**kw):
    return next(iter(_graph(**kw).cells))


def test_a_weights_only_change_of_a_refittable_cell_plans_refit():
    m = manifest([model("det", precs=("fp32",))], [target(weights="refittable")])
    before = _cell(m=m, digest="sha256:" + "1" * 64)
    new = {**WEIGHTS, "fc.w": "9" * 64}
    after = _graph(m, digest="sha256:" + "2" * 64, weights=new)
    plan = plan_against(after, {before.address: _published(before)}, "state")
    (entry,) = plan.entries
    assert (entry.status, entry.reason) == ("refit", "weights changed: 1 of 3 initializers")
    assert entry.changes[0] == entry.reason and entry.published_digest == ENGINE
    assert any(c.startswith("model.digest:") for c in entry.changes)
    assert plan.summary() == "Plan: 0 to build, 0 to rebuild, 1 to refit, 0 up to date, 0 blocked"
    assert plan.to_json()["summary"]["refit"] == 1 and plan.has_changes and plan.shards


def test_a_graph_change_or_another_input_rebuilds():
    m = manifest([model("det", precs=("fp32",))], [target(weights="refittable")])
    before = _cell(m=m, digest="sha256:" + "1" * 64)
    other_graph = next(iter(_graph(m, digest="sha256:" + "2" * 64, graph="sha256:" + "b" * 64).cells))
    assert refit_change(before.key_inputs, other_graph.key_inputs) is None
    renamed = {**{k: v for k, v in WEIGHTS.items() if k != "fc.w"}, "fc.weight": "3" * 64}
    assert refit_change(before.key_inputs, refit_weights(before.key_inputs, renamed)) is None
    newer_builder = {**before.key_inputs, "builder": {"name": "tensorrt", "version": "10.14.1.48"},
                     "model": {"digest": "sha256:" + "2" * 64}}
    assert refit_change(before.key_inputs, newer_builder) is None
    plan = plan_against(_graph(m, digest="sha256:" + "2" * 64, graph="sha256:" + "b" * 64),
                        {before.address: _published(before)}, "state")
    assert plan.entries[0].status == "rebuild" and plan.entries[0].reason.startswith("model.digest")


def refit_weights(key_inputs: dict, weights: dict[str, str]) -> dict:
    return {**key_inputs, "model": {"digest": "sha256:" + "2" * 64}, "weights": refit_inputs(GRAPH, weights)}


def test_only_refittable_engines_refit_and_never_a_calibrated_cell():
    for weights in ("embedded", "stripped"):
        m = manifest([model("det", precs=("fp32",))], [target(weights=weights)])
        before = _cell(m=m, digest="sha256:" + "1" * 64)
        after = _graph(m, digest="sha256:" + "2" * 64, weights={**WEIGHTS, "fc.w": "9" * 64})
        assert plan_against(after, {before.address: _published(before)}, "s").entries[0].status == "rebuild"
    base = {"model": {"digest": "x"}, "weights": refit_inputs(GRAPH, WEIGHTS)}
    calibrated = {**base, "calibration": {"kind": "calibrate", "model": "x"}}
    assert refit_change(calibrated, {**calibrated, "model": {"digest": "y"}}) is None
    change = refit_change(base, {**base, "model": {"digest": "y"}})  # the model file changed, no value moved
    assert change is not None and (change.changed, change.total) == (0, 3)
    # a refittable cell whose model structure is unknown (a url source not fetched) is never refitted
    assert refit_change({"weights": {"mode": "refittable"}}, {"weights": {"mode": "refittable"}}) is None


def test_a_transformed_cell_refits_when_only_what_derives_from_the_weights_moved():
    old = {"model": {"digest": "m1"}, "weights": refit_inputs(GRAPH, WEIGHTS),
           "transform": {"kind": "fp16", "model": "m1", "settings": {"keep_io_types": True}, "calibration": None}}
    new = {**old, "model": {"digest": "m2"}, "weights": refit_inputs(GRAPH, {**WEIGHTS, "conv.w": "7" * 64}),
           "transform": {**old["transform"], "model": "m2"}}
    change = refit_change(old, new)
    assert change is not None and (change.changed, change.total) == (1, 3)
    other_settings = {**new, "transform": {**new["transform"], "settings": {"keep_io_types": False}}}
    assert refit_change(old, other_settings) is None


def test_a_weights_key_part_is_spliced_as_its_plain_definition_and_embedded_keys_do_not_move():
    """resolve() adds ``weights`` to the cached JSON of the other key parts (issue 24's splicing): for stripped and
    refittable targets the key is the digest of the key inputs, byte for byte; an embedded target has no such field,
    so its key is the one it had before weights modes."""
    from orchestrator.core.keys import build_key

    def cells(mode: str) -> dict:
        m = manifest([model("det", precs=("fp32", "fp16"))], [target("a", ccs=("8.6",), weights=mode),
                                                              target("b", ccs=("8.9",), weights="refittable")])
        return {c.address: c for c in _graph(m, digest="sha256:" + "1" * 64).cells}

    embedded, stripped = cells("embedded"), cells("stripped")
    assert len(embedded) == 4
    for address, c in stripped.items():
        assert c.build_key == build_key(c.key_inputs)
        if "@sm86" in address:
            assert "weights" not in embedded[address].key_inputs
            assert c.key_inputs == {**embedded[address].key_inputs, "weights": "stripped"}
            assert c.build_key != embedded[address].build_key
        else:
            assert c.key_inputs["weights"] == refit_inputs(GRAPH, WEIGHTS)
