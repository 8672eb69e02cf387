"""Journey (issue 22, point 9): overriding one parity tolerance field.

docs/gates.md: overrides per model and precision and per output, "each field inheriting from the layer below when
not given". A new user sets only `atol` for the orientation classifier's fp16 engines (and only `rtol` for its
output): the manifest is valid, the plan re-gates exactly those cells naming that one change, the gate judges with
the given `atol` and the inherited `rtol`, and the re-gated engine is published.
"""

from __future__ import annotations

import json

from tests.journeys.test_plan_readable import CHANGE, ORIENTATION_FP16, loosen_fp16_atol

CPU_FP16 = "orientation/fp16/default@cpu+ort1.31"


def test_one_field_overrides_and_the_rest_inherit(published_copy):
    demo = published_copy
    loosen_fp16_atol(demo, "{atol: 0.02}")
    text = demo.manifest.read_text()
    demo.manifest.write_text(text.replace("{fp16: {atol: 0.02}}}}", "{fp16: {atol: 0.02}}, "
                                                                   "per_output: {fetch_name_0: {rtol: 0.05}}}}"))
    demo.run("validate", str(demo.manifest))

    plan, _ = demo.run_json("plan", str(demo.manifest))
    regate = {c["address"]: c for c in plan["cells"] if c["status"] == "regate"}
    assert set(regate) >= ORIENTATION_FP16
    assert regate[CPU_FP16]["changes"][0] == CHANGE
    explained, _ = demo.run_json("explain", CPU_FP16, str(demo.manifest))
    tolerances = explained["gate_inputs"]["parity"]["tolerances"]
    engine, output = tolerances["engine"], tolerances["per_output"]["fetch_name_0"]
    assert (engine["atol"], engine["rtol"], engine["min_cosine"]) == (0.02, 0.01, 0.99)  # rtol, cosine: fp16 default
    assert (output["atol"], output["rtol"]) == (0.02, 0.05)  # atol from the model's layer

    # gated with those tolerances, then published
    demo.run("gate", str(demo.manifest), "--only", CPU_FP16)
    published, _ = demo.run_json("publish", str(demo.manifest), "--only", CPU_FP16)
    assert [p["address"] for p in published["published"]] == [CPU_FP16]
    listing, _ = demo.run_json("ls", "--registry", str(demo.store), "--model", "orientation")
    record_key = next(a["record_key"] for a in listing["artifacts"] if a["address"] == CPU_FP16)  # newest first
    record = json.loads((demo.store / "meta" / f"{record_key}.json").read_text())
    verdict = record["gates"]["parity"]["profiles"]["default"]
    judged = {(o["name"], o["tolerance"]["atol"], o["tolerance"]["rtol"])
              for case in verdict["cases"] for o in case["outputs"]}
    assert judged == {("fetch_name_0", 0.02, 0.05)}
