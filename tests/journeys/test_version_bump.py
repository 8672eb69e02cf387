"""Journey (issue 22, point 1): a model's `version:` bumped, same ONNX file.

A new user releases the orientation classifier as 0.0.12 without touching the model file. The version is part of
what is published: `plan` shows the cells as `+ publish (version 0.0.12, engine reused)`, `build` and `gate` have
nothing to do (the build key did not move), `publish` puts one new record per cell (the same engine bytes and
verdicts, the new version), its counts say exactly that, a second `publish` says nothing new landed, `ls` lists
both versions and `pull --version 0.0.12` writes the very engine 0.0.11 had.
"""

from __future__ import annotations

import hashlib
import json
import os

ORIENTATION_CELLS = 6  # 2 precisions x 3 targets
CPU_FP32 = "orientation/fp32/default@cpu+ort1.31"


def _bump(demo, old: str = '"0.0.11"', new: str = '"0.0.12"') -> None:
    text = demo.manifest.read_text()
    assert text.count(f"version: {old}") == 1
    demo.manifest.write_text(text.replace(f"version: {old}", f"version: {new}"))


def _sha(path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_version_bump_is_published_without_a_rebuild(published_copy, tmp_path):
    demo = published_copy
    before, _ = demo.run_json("ls", "--registry", str(demo.store), "--model", "orientation")
    old = {a["address"]: a for a in before["artifacts"] if a["version"] == "0.0.11"}
    assert len(old) == ORIENTATION_CELLS
    _bump(demo)

    # plan: the orientation cells are to be published as 0.0.12, with the engine reused; nothing else moves
    plan, proc = demo.run_json("plan", str(demo.manifest), "--detailed-exitcode", check=False)
    assert proc.returncode == 2, proc.stderr  # changes
    statuses = {c["address"]: c["status"] for c in plan["cells"]}
    assert {a for a, s in statuses.items() if s == "publish"} == set(old)
    assert plan["summary"]["publish"] == ORIENTATION_CELLS
    assert plan["summary"]["up_to_date"] == 18 - ORIENTATION_CELLS
    assert plan["summary"]["build"] == plan["summary"]["rebuild"] == plan["summary"]["regate"] == 0
    cpu = next(c for c in plan["cells"] if c["address"] == CPU_FP32)
    assert cpu["published_digest"] == old[CPU_FP32]["digest"]
    assert cpu["changes"] and "0.0.11 -> 0.0.12" in cpu["changes"][0]
    text = demo.run("plan", str(demo.manifest), env_extra={"COLUMNS": "200"}).stdout
    line = next(ln for ln in text.splitlines() if CPU_FP32 in ln)
    assert line.lstrip().startswith("+") and "publish" in line and "version 0.0.12, engine reused" in line
    assert "to publish (engine reused)" in text

    # build and gate have nothing to do: the engine is the published one
    build, _ = demo.run_json("build", str(demo.manifest))
    assert not [n for n in build["nodes"] if n["status"] == "done"], build["nodes"]
    gate, _ = demo.run_json("gate", str(demo.manifest))
    assert not [n for n in gate["nodes"] if n["status"] == "done"], gate["nodes"]

    # publish: one new record per cell, and the counts say so
    published, _ = demo.run_json("publish", str(demo.manifest))
    assert sorted(p["address"] for p in published["published"]) == sorted(old)
    assert all(p["version"] == "0.0.12" and p["reused_from"] == "0.0.11" for p in published["published"])
    assert published["already_published"] == [] and published["held_back"] == []
    assert {p["address"]: p["digest"] for p in published["published"]} == {a: o["digest"] for a, o in old.items()}
    line = demo.run("publish", str(demo.manifest)).stdout.strip().splitlines()[-1]
    assert line.startswith("publish ok: 0 published"), line  # the second run: nothing new, and it says so
    again, _ = demo.run_json("plan", str(demo.manifest))
    assert again["summary"]["up_to_date"] == 18 and again["summary"]["publish"] == 0

    # ls: both versions; the new record reuses the old engine and names where it came from
    after, _ = demo.run_json("ls", "--registry", str(demo.store), "--model", "orientation")
    versions = {}
    for a in after["artifacts"]:
        versions.setdefault(a["version"], set()).add(a["address"])
    assert versions == {"0.0.11": set(old), "0.0.12": set(old)}
    new = {a["address"]: a for a in after["artifacts"] if a["version"] == "0.0.12"}
    assert all(new[a]["digest"] == old[a]["digest"] and new[a]["record_key"] != old[a]["record_key"] for a in old)
    record = json.loads((demo.store / "meta" / f"{new[CPU_FP32]['record_key']}.json").read_text())
    assert record["reused_from"] == {"record_key": old[CPU_FP32]["record_key"], "model_version": "0.0.11"}
    assert record["gates"]["status"] == "passed"  # the verdicts travel with the engine

    # pull the new version: the engine 0.0.11 had, verified
    out = tmp_path / "orientation.onnx"
    pulled, _ = demo.run_json("pull", "orientation", "--version", "0.0.12", "--precision", "fp32", "--gpu", "none",
                              "--registry", str(demo.store), "-o", str(out))
    assert pulled["metadata"]["model"]["version"] == "0.0.12"
    assert pulled["metadata"]["reused_from"] == {"record_key": old[pulled["address"]]["record_key"],
                                                 "model_version": "0.0.11"}
    assert _sha(out) == old[pulled["address"]]["digest"]
    assert os.path.getsize(out) == old[pulled["address"]]["size"]


def test_going_back_to_a_published_version_is_up_to_date(published_copy):
    """0.0.12 published, then the manifest says 0.0.11 again: that record is in the store, though not the newest
    at its address: plan is up to date and publish puts nothing."""
    demo = published_copy
    _bump(demo)
    demo.run("publish", str(demo.manifest))
    _bump(demo, '"0.0.12"', '"0.0.11"')
    plan, _ = demo.run_json("plan", str(demo.manifest))
    assert plan["summary"]["up_to_date"] == 18, [c for c in plan["cells"] if c["status"] != "up-to-date"]
    published, _ = demo.run_json("publish", str(demo.manifest))
    assert published["published"] == [] and published["already_published"] == []
