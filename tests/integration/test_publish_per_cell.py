"""Per-cell publishing (issue 14): the demo built and gated for real with one cell that fails its parity gate
for real (orientation fp16: atol 0, rtol 0, min_cosine 1.0), then published the way the CI publish job does —
a fresh cache holding only the ``nodes/`` the build jobs uploaded, ``publish --plan plan.json --summary FILE``
— into a real OCI registry (CNCF distribution). Every other cell lands in the registry; the failing cell and the
fp16 RTX engines built from the same failed ONNX are held back with their reason; the run exits non-zero; the
markdown summary lists both groups. A second case drops a whole shard's build artifact (the shard never
uploaded): its cells are held back as "not built here", the rest are still published.

Benchmarks are off and parity uses one sample to keep the gate step short: what is tested is publishing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import orchestrate, run_json, write_demo_copy
from .registry_server import registry  # noqa: F401 - the real registry server fixture

pytestmark = pytest.mark.integration

FAILING = "orientation/fp16/default@cpu+ort1.31"
# the RTX fp16 orientation engines are built from the very fp16 ONNX that failed parity: not published ungated
SAME_ONNX = ("orientation/fp16/default@sm86+rtx1.7", "orientation/fp16/default@sm89-sm120+rtx1.7")
MISSING_SHARD_TARGET = "sm89-sm120+rtx1.7"


def _variant(host: str, prefix: str):
    def edit(text: str) -> str:
        text = text.replace(
            "    classifier_outputs: {fetch_name_0: 1}   # 4 orientations: gate on top-1 agreement\n",
            "    classifier_outputs: {fetch_name_0: 1}   # 4 orientations: gate on top-1 agreement\n"
            "    gate:\n      parity:\n        tolerances:\n          fp16: {atol: 0, rtol: 0, min_cosine: 1.0}\n")
        text = text.replace("data: {samples: 2, seed: 0}", "data: {samples: 1, seed: 0}")
        text = text.replace("benchmark: {warmup: 3, iterations: 20, shapes: [opt]}", "benchmark: {enabled: false}")
        head, _, _ = text.partition("registry:\n  store: local")
        assert head != text, "the demo manifest's registry block moved"
        return head + f'registry: {{store: oci, url: "{host}/{prefix}", insecure: true}}\n'

    return edit


def _prepare(root: Path, cache: Path, host: str, prefix: str) -> tuple[Path, dict]:
    """A manifest variant publishing to ``prefix``, planned, built (from the shared cache) and gated."""
    manifest = write_demo_copy(root, text_edit=_variant(host, prefix))
    plan, _ = run_json("plan", str(manifest), "--out", str(root / "plan.json"), cache=cache, cwd=root)
    assert plan["summary"]["build"] == 18 and plan["summary"]["blocked"] == 0
    build, _ = run_json("build", "--plan", "plan.json", cache=cache, cwd=root)
    gate, proc = run_json("gate", "--plan", "plan.json", cache=cache, cwd=root, check=False)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # the one real gate failure
    failed = [n["node"] for n in gate["nodes"] if n.get("data", {}).get("status") == "failed"]
    assert failed == [f"gate:parity:{FAILING}"]
    return root / "plan.json", build


def _ci_publish_cache(build_cache: Path, dest: Path, drop: list[Path] = ()) -> Path:
    """What the publish job has: the uploaded ``nodes/`` only (no run summaries), minus what never arrived."""
    shutil.copytree(build_cache / "nodes", dest / "nodes")
    for node_dir in drop:
        shutil.rmtree(dest / node_dir.relative_to(build_cache))
    return dest


def _stored(host: str, prefix: str, cwd: Path) -> dict[str, str]:
    listing, _ = run_json("ls", "--registry", f"oci://{host}/{prefix}", cache=cwd / "ls-cache", cwd=cwd)
    return {a["address"]: a["digest"] for a in listing["artifacts"]}


@pytest.fixture(scope="module")
def built(tmp_path_factory, demo_build, registry):  # noqa: F811
    """One build cache for both cases (copied from the session's demo build: same build keys, nothing rebuilt)."""
    root = tmp_path_factory.mktemp("percell")
    cache = root / "build-cache"
    shutil.copytree(demo_build[1] / "nodes", cache / "nodes")
    return root, cache, registry


def test_a_failed_gate_holds_back_only_its_cells(built):
    root, cache, server = built
    work = root / "gate-failed"
    plan_file, _ = _prepare(work, cache, server.host, "gatefail")
    addresses = {c["address"] for c in json.loads(plan_file.read_text())["cells"]}
    publish_cache = _ci_publish_cache(cache, work / "publish-cache")
    summary = work / "s.md"
    summary.write_text("## an earlier step's summary\n")  # appended to, never overwritten

    proc = orchestrate("publish", "--plan", "plan.json", "--summary", str(summary), cache=publish_cache, cwd=work,
                       check=False)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # only gate failures held back
    assert "Traceback" not in proc.stderr + proc.stdout
    held = {FAILING, *SAME_ONNX}
    stored = _stored(server.host, "gatefail", work)
    assert set(stored) == addresses - held  # every other cell is in the registry
    assert "publish FAILED: 15 published, 3 held back" in proc.stdout
    # each record carries the engine's I/O as its ONNX declares it (what `export triton` writes config.pbtxt from)
    record, _ = run_json("show", "ocr-rec/fp32/default@cpu+ort1.31", "--registry", f"oci://{server.host}/gatefail",
                         cache=work / "ls-cache", cwd=work)
    assert record["io"] == {"inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 3, -1, -1]}],
                            "outputs": [{"name": "softmax_11.tmp_0", "dtype": "float32", "shape": [-1, -1, 6625]}]}
    record, _ = run_json("show", "ocr-det/fp16/default@sm86+rtx1.7", "--registry", f"oci://{server.host}/gatefail",
                         cache=work / "ls-cache", cwd=work)
    assert [t["name"] for t in record["io"]["inputs"]] == ["x"] and record["io"]["outputs"][0]["shape"][:2] == [-1, 1]
    line = next(x for x in proc.stderr.splitlines() if x.startswith(f"held back {FAILING} — "))
    assert line.startswith(f"held back {FAILING} — gate failed: parity: min/fetch_name_0: ") and \
        "violate |a-b| <= 0 + 0*|b|" in line

    text = summary.read_text()
    assert text.startswith("## an earlier step's summary\n### publish FAILED\\: 15 published, 3 held back")
    published_part, _, held_part = text.partition("#### Held back")
    for address in addresses - held:
        row = next(line for line in published_part.splitlines() if line.startswith(f"| `{address}` |"))
        assert stored[address].replace(":", "\\:") in row  # its digest, escaped
        assert f"{server.host}/gatefail/".replace(":", "\\:") in row  # and its store reference
    rows = {line.split(" | ")[0].removeprefix("| `").removesuffix("`"): line for line in held_part.splitlines()
            if line.startswith("| `")}
    assert set(rows) == held
    assert "| gate failed\\: parity\\: min/fetch\\_name\\_0\\: " in rows[FAILING]
    assert "&lt;= 0 \\+ 0\\*\\|b\\|" in rows[FAILING]  # markdown and HTML in the reason are escaped
    escaped = FAILING.replace("+", "\\+")
    for address in SAME_ONNX:
        assert f"gate failed\\: the fp16 ONNX it was built from failed parity on {escaped}" in rows[address]

    # --json lists both groups too (a second run: the registry moved, so re-plan first)
    orchestrate("plan", "demo.yaml", "--out", "plan.json", cache=publish_cache, cwd=work)
    data, proc = run_json("publish", "--plan", "plan.json", cache=publish_cache, cwd=work, check=False)
    assert proc.returncode == 3 and data["exit_code"] == 3
    assert data["published"] == [] and len(data["up_to_date"]) == 15
    assert {h["address"]: h["why"] for h in data["held_back"]} == dict.fromkeys(held, "gate failed")


def test_a_shard_whose_artifact_never_arrived_is_held_back_and_the_rest_published(built):
    root, cache, server = built
    work = root / "missing-shard"
    plan_file, build = _prepare(work, cache, server.host, "noshard")
    addresses = {c["address"] for c in json.loads(plan_file.read_text())["cells"]}
    missing = {a for a in addresses if a.endswith(MISSING_SHARD_TARGET)}
    assert len(missing) == 6
    dropped = [Path(n["dir"]) for n in build["nodes"] if n["node"].removeprefix("build:") in missing]
    assert len(dropped) == 6
    publish_cache = _ci_publish_cache(cache, work / "publish-cache", dropped)
    summary = work / "s.md"

    proc = orchestrate("publish", "--plan", "plan.json", "--summary", str(summary), cache=publish_cache, cwd=work,
                       check=False)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # held back for more than a gate
    assert "Traceback" not in proc.stderr + proc.stdout
    held = missing | {FAILING, SAME_ONNX[0]}
    assert set(_stored(server.host, "noshard", work)) == addresses - held
    text = summary.read_text()
    held_part = text.partition("#### Held back")[2]
    for address in missing:
        assert (f"| `{address}` | not built here\\: no build result in the cache \\(the shard's build artifact "
                "did not arrive, or the cell was never built\\) |") in held_part
    assert f"| `{FAILING}` | gate failed\\: parity\\: " in held_part
    assert "publish FAILED\\: 10 published, 8 held back" in text
