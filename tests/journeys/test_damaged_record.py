"""Journey (issue 23.1): one record of the published demo is damaged (the first byte of its metadata flipped, as the
issue did). The damage stays with that record: ``ls`` lists the other 17 and flags it, ``pull`` still serves the
other engines, ``plan`` asks for that cell again with the reason (CI notices: ``--detailed-exitcode`` 2), ``store
check`` lists it, and the build, gate and publish of that one cell replace it (the damaged file kept aside), after
which the store checks clean and the demo plans up to date."""

from __future__ import annotations

import json


def _damage_one(demo) -> tuple[str, str]:
    """Flip the first byte of an onnxruntime (CPU) cell's record: (its address, its record file)."""
    index = json.loads((demo.store / "index.json").read_text())
    key, rec = next((k, r) for k, r in sorted(index["artifacts"].items())
                    if r["address"].startswith("orientation/fp16/") and "+ort" in r["address"])
    path = demo.store / "meta" / f"{key}.json"
    raw = bytearray(path.read_bytes())
    raw[0] ^= 0xFF
    path.write_bytes(bytes(raw))
    return rec["address"], str(path)


def test_a_damaged_record_stays_with_its_record_and_publish_repairs_it(published_copy, tmp_path):
    demo = published_copy
    address, record = _damage_one(demo)
    registry = ("--registry", str(demo.store))

    listing, proc = demo.run_json("ls", *registry)
    assert proc.returncode == 0
    assert len(listing["artifacts"]) == 17 and address not in {a["address"] for a in listing["artifacts"]}
    [flagged] = listing["damaged"]
    assert (flagged["address"], flagged["location"]) == (address, record)

    pulled, proc = demo.run_json("pull", "ocr-det", "--precision", "fp32", "-o", str(tmp_path / "det.onnx"),
                                 *registry)
    assert proc.returncode == 0 and (tmp_path / "det.onnx").is_file(), proc.stderr

    plan, _ = demo.run_json("plan", str(demo.manifest))
    cells = {c["address"]: c for c in plan["cells"]}
    assert cells[address]["status"] == "rebuild" and cells[address]["reason"].startswith("record damaged: not JSON")
    assert plan["summary"]["up_to_date"] == 17 and plan["summary"]["rebuild"] == 1
    assert demo.run("plan", str(demo.manifest), "--detailed-exitcode", check=False).returncode == 2

    check, proc = demo.run_json("store", "check", *registry, check=False)
    assert proc.returncode == 1 and [d["address"] for d in check["damaged"]] == [address]

    for verb in ("build", "gate", "publish"):  # the cell alone: its engine and verdicts come from this machine
        demo.run(verb, str(demo.manifest), "--only", address)
    check, proc = demo.run_json("store", "check", *registry)
    assert proc.returncode == 0 and check["damaged"] == []
    kept = list((demo.store / "quarantine").glob("*/*.json"))
    assert any(p.name == record.rsplit("/", 1)[1] for p in kept)  # the damaged file, moved aside, not deleted
    plan, _ = demo.run_json("plan", str(demo.manifest))
    assert plan["summary"]["up_to_date"] == 18
    listing, _ = demo.run_json("ls", *registry)
    assert len(listing["artifacts"]) == 18 and listing["damaged"] == []
