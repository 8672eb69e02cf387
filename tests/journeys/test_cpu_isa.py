"""Journey (issue 22.5): a CPU engine's verdict says which CPU instruction set it holds for, and a manifest can ask
that a verdict from another instruction set be re-gated.

On the published demo: every CPU record's verdict names this machine's kernel-selecting ISA features (read here from
/proc/cpuinfo independently of the tool), `show` and the report state them. Then the CPU target takes
``cpu_match: isa``: a re-gate (no rebuild), gated and published here, up to date. A runner with another instruction
set (declared through ``ORCHESTRATE_CPU_FEATURES``, the documented override) plans those cells as ``~ re-gate``,
naming each feature that differs, and ``explain`` shows the ISA in the gate key; under the default
``cpu_match: any`` the same runner finds them up to date.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.fingerprint import KERNEL_ISA_FEATURES

pytestmark = pytest.mark.integration

CPU_CELL = "orientation/fp32/default@cpu+ort1.31"


def _machine_isa() -> list[str]:
    """This machine's kernel-selecting features, straight from /proc/cpuinfo (the first processor's flags)."""
    text = Path("/proc/cpuinfo").read_text()
    flags: set[str] = set()
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags |= set(value.split())
    return [f for f in KERNEL_ISA_FEATURES if f in flags]


def _cpu_cells(plan: dict) -> dict[str, dict]:
    return {c["address"]: c for c in plan["cells"] if c["target"] == "cpu"}


def _other_isa(isa: list[str]) -> str:
    """A feature set that is not this machine's."""
    return "avx,fma,avx2" if isa != ["avx", "fma", "avx2"] else "avx"


@pytest.fixture
def linux_cpuinfo():
    if not Path("/proc/cpuinfo").is_file():
        pytest.skip("this machine has no /proc/cpuinfo (not Linux): its ISA is recorded as unknown")
    return _machine_isa()


def test_each_cpu_verdict_records_this_machines_instruction_set(published_copy, linux_cpuinfo):
    listing, _ = published_copy.run_json("ls", "--registry", str(published_copy.store))
    cpu_records = [a for a in listing["artifacts"] if a["address"].endswith("@cpu+ort1.31")]
    assert cpu_records
    for record in cpu_records:
        meta, _ = published_copy.run_json("show", record["record_key"], "--registry", str(published_copy.store))
        for kind in ("parity", "benchmark"):
            cpu = meta["gates"][kind]["runner"]["cpu"]
            assert (cpu["features"], cpu["source"]) == (linux_cpuinfo, "/proc/cpuinfo"), (record["address"], kind)
        assert meta["runner"]["cpu"]["features"] == linux_cpuinfo  # the builder's fingerprint too
    shown = published_copy.run("show", cpu_records[0]["record_key"], "--registry", str(published_copy.store),
                               env_extra={"COLUMNS": "250"}).stdout
    assert f"gated on  {meta['gates']['parity']['runner']['cpu']['model'] or 'CPU'}: {' '.join(linux_cpuinfo)}" \
           f"; cpu_match: any" in shown, shown
    # the report states it per CPU cell, and for no GPU cell
    report, _ = published_copy.run_json("report", str(published_copy.manifest), "--out",
                                        str(published_copy.root / "report.html"))
    summaries = {s["address"]: s for s in report["summary"]}
    assert all(summaries[a]["cpu"].endswith(": " + " ".join(linux_cpuinfo)) for a in summaries if "@cpu+" in a)
    assert all(summaries[a]["cpu"] is None for a in summaries if "@cpu+" not in a)
    assert "gated on " in (published_copy.root / "report.html").read_text()


def test_under_cpu_match_isa_a_verdict_from_another_instruction_set_is_re_gated(published_copy, linux_cpuinfo):
    manifest = published_copy.manifest
    text = manifest.read_text()
    strict = text.replace("    device: cpu\n", "    device: cpu\n    cpu_match: isa\n")
    assert strict != text
    manifest.write_text(strict)

    # choosing the policy is a re-gate of the CPU cells (the engines stand), named
    plan, _ = published_copy.run_json("plan", str(manifest))
    cpu = _cpu_cells(plan)
    assert cpu and {c["status"] for c in cpu.values()} == {"regate"}
    assert all(any("deploy.cpu_match: (absent) -> isa" in ch for ch in c["changes"]) for c in cpu.values())
    assert {c["status"] for c in plan["cells"] if c["target"] != "cpu"} == {"up-to-date"}
    # one cell gated and published here (one is enough to show it; each gate takes a while): up to date here
    for verb in ("build", "gate", "publish"):
        published_copy.run(verb, str(manifest), "--only", CPU_CELL)
    plan, _ = published_copy.run_json("plan", str(manifest))
    statuses = {a: c["status"] for a, c in _cpu_cells(plan).items()}
    assert statuses.pop(CPU_CELL) == "up-to-date" and set(statuses.values()) == {"regate"}

    # a runner with another instruction set: the verdict published here does not hold there
    other = _other_isa(linux_cpuinfo)
    env = {"ORCHESTRATE_CPU_FEATURES": other}
    plan, _ = published_copy.run_json("plan", str(manifest), env_extra=env)
    cpu = _cpu_cells(plan)
    assert {c["status"] for c in cpu.values()} == {"regate"}
    missing = sorted(set(linux_cpuinfo) - set(other.split(",")))
    assert missing
    assert {f"gate.deploy.cpu_isa.{f}: true -> (absent)" for f in missing} <= set(cpu[CPU_CELL]["changes"])
    assert "gate.deploy.cpu_match: (absent) -> isa" not in cpu[CPU_CELL]["changes"]  # only the ISA differs
    assert {c["status"] for c in plan["cells"] if c["target"] != "cpu"} == {"up-to-date"}
    explained, _ = published_copy.run_json("explain", CPU_CELL, str(manifest), env_extra=env)
    assert explained["gate_inputs"]["deploy"] == {"gpu_match": "cc", "cpu_match": "isa",
                                                  "cpu_isa": {f: True for f in other.split(",")}}
    assert explained["plan"]["status"] == "regate"
    lines = published_copy.run("explain", CPU_CELL, str(manifest), env_extra={**env, "COLUMNS": "250"}).stdout
    assert "cpu_isa" in lines

    # back to the default policy: the same plan whatever instruction set the planning runner has: the ISA is no
    # part of the key; nothing rebuilds
    manifest.write_text(text)
    elsewhere, _ = published_copy.run_json("plan", str(manifest), env_extra=env)
    here, _ = published_copy.run_json("plan", str(manifest))
    assert [(c["address"], c["status"], c["changes"]) for c in elsewhere["cells"]] == \
        [(c["address"], c["status"], c["changes"]) for c in here["cells"]]
    # the cell's own default-policy record (the demo's) is still in the store: this very record is published,
    # newest at its address or not, so nothing is asked for; a re-gate would only publish it again
    statuses = {c["address"]: c["status"] for c in here["cells"]}
    assert set(statuses.values()) == {"up-to-date"}
    assert _cpu_cells(here)[CPU_CELL]["reason"].startswith("published sha256:")


def test_a_misspelt_declared_feature_is_a_usage_error(published_copy):
    proc = published_copy.run("plan", str(published_copy.manifest), check=False,
                              env_extra={"ORCHESTRATE_CPU_FEATURES": "avx2,avx512-vnni"})
    # `any` targets never read the ISA to plan: nothing to refuse
    assert proc.returncode == 0, proc.stderr
    text = published_copy.manifest.read_text().replace("    device: cpu\n", "    device: cpu\n    cpu_match: isa\n")
    published_copy.manifest.write_text(text)
    proc = published_copy.run("plan", str(published_copy.manifest), check=False,
                              env_extra={"ORCHESTRATE_CPU_FEATURES": "avx2,avx512-vnni"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "ORCHESTRATE_CPU_FEATURES names avx512-vnni" in proc.stderr and "avx512_vnni" in proc.stderr
    assert "Traceback" not in proc.stderr
