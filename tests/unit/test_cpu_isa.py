"""The CPU's instruction set in the fingerprint, the verdict and the gate key (issue 22.5).

An onnxruntime CPU engine's numbers follow the kernels onnxruntime picks for the CPU's instruction set (int8 most of
all: doc-det's int8 cosine was 0.904 on one x86-64 machine and 0.238 on an AMD EPYC with avx512_vnni). So the runner
fingerprint reads the kernel-selecting ISA features (``/proc/cpuinfo``, or the ``ORCHESTRATE_CPU_FEATURES``
declaration), and a ``cpu_match: isa`` CPU target's gate key names them: a verdict given on another ISA plans as
``~ re-gate`` naming both feature sets, while ``cpu_match: any`` (the default) and GPU targets keep their keys.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator import hardware
from orchestrator.contracts.store import IndexEntry
from orchestrator.core.fingerprint import KERNEL_ISA_FEATURES, CpuInfo, RunnerFingerprint, kernel_features
from orchestrator.core.plan import plan_against
from orchestrator.core.resolve import resolve
from orchestrator.errors import ManifestError, UsageError
from orchestrator.manifest import load_manifest
from tests.unit.core_fixtures import capabilities, inputs_for, manifest, model, ort_target, target

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse sse2 sse4_1 sse4_2 avx f16c fma avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 \
avx512vbmi avx512_vnni avx512_bitalg

processor\t: 1
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse
"""
GRAVITON = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop \
sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU part\t: 0xd40
"""


def _root(tmp_path: Path, text: str | None) -> Path:
    if text is not None:
        (tmp_path / "proc").mkdir(parents=True)
        (tmp_path / "proc" / "cpuinfo").write_text(text)
    return tmp_path


def test_x86_features_are_read_from_the_first_processor_in_mlas_order(tmp_path):
    cpu = hardware.cpu_info(_root(tmp_path, EPYC), env={})
    assert cpu == CpuInfo("AMD EPYC 9R14 96-Core Processor",
                          ("sse4_1", "avx", "fma", "avx2", "avx512f", "avx512bw", "avx512dq", "avx512vl",
                           "avx512_vnni", "avx512_bf16"), "/proc/cpuinfo")
    assert cpu.isa == list(cpu.features) and cpu.describe().startswith("AMD EPYC 9R14 96-Core Processor: sse4_1 avx")


def test_arm_features_come_from_the_features_line(tmp_path):
    cpu = hardware.cpu_info(_root(tmp_path, GRAVITON), env={})
    assert cpu.features == ("asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "svei8mm")
    assert cpu.source == "/proc/cpuinfo"


def test_no_cpuinfo_is_an_unknown_isa_not_an_empty_one(tmp_path):
    cpu = hardware.cpu_info(_root(tmp_path, None), env={})
    assert not cpu.known and cpu.isa is None and cpu.describe() == "CPU: ISA unknown"


def test_the_environment_declares_the_features_and_is_recorded_as_declared(tmp_path):
    cpu = hardware.cpu_info(_root(tmp_path, EPYC), env={hardware.CPU_FEATURES_ENV: "AVX2, fma"})
    assert (cpu.features, cpu.source) == (("fma", "avx2"), "ORCHESTRATE_CPU_FEATURES")
    assert cpu.model == "AMD EPYC 9R14 96-Core Processor"  # the model is still the machine's
    none = hardware.cpu_info(_root(tmp_path / "b", None), env={hardware.CPU_FEATURES_ENV: "none"})
    assert none.known and none.features == () and none.isa == []
    with pytest.raises(UsageError) as bad:
        hardware.cpu_info(_root(tmp_path / "c", None), env={hardware.CPU_FEATURES_ENV: "avx2,avx513"})
    assert "ORCHESTRATE_CPU_FEATURES names avx513" in str(bad.value) and "avx512_vnni" in bad.value.hint


def test_the_fingerprint_carries_the_cpu_through_json():
    fp = RunnerFingerprint(os="linux", arch="x86_64", cpu=CpuInfo("AMD EPYC", ("avx2", "avx512_vnni"), "/proc/cpuinfo"))
    data = fp.to_json()
    assert data["cpu"] == {"model": "AMD EPYC", "features": ["avx2", "avx512_vnni"], "source": "/proc/cpuinfo"}
    assert RunnerFingerprint.from_json(data) == fp
    old = {k: v for k, v in data.items() if k != "cpu"}  # a record from before the CPU was recorded
    assert RunnerFingerprint.from_json(old).cpu is None and "cpu" not in RunnerFingerprint.from_json(old).to_json()


def test_kernel_features_keep_only_the_kernel_selecting_ones():
    assert kernel_features(["SSE2", "avx512_vnni", "amx_int8", "amx_tile", "rdrand"]) == ("avx512_vnni", "amx_tile",
                                                                                           "amx_int8")
    assert set(kernel_features(KERNEL_ISA_FEATURES)) == set(KERNEL_ISA_FEATURES)


# --- the gate key and the plan ----------------------------------------------------------------------------------

AVX512 = ("avx", "fma", "avx2", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni")
AVX2 = ("avx", "fma", "avx2")
CPU = "ocr-det/fp32/default@cpu+ort1.23"
GPU = "ocr-det/fp32/default@sm89+trt10.13"


def _graph(cpu_match: str, isa: tuple[str, ...] | None):
    m = manifest([model("ocr-det", precs=("fp32",))], [ort_target(cpu_match=cpu_match), target()])
    return resolve([m], replace(inputs_for(m), cpu_isa=isa), capabilities)


def _published(cell) -> IndexEntry:
    return IndexEntry(address=cell.address, build_key=cell.build_key, key_inputs=cell.key_inputs, model=cell.model,
                      version=cell.model_version, digest="sha256:" + "e" * 64, gate_key=cell.gate_key,
                      gate_inputs=cell.gate_inputs)


def test_under_isa_a_verdict_from_another_instruction_set_plans_as_a_re_gate_naming_both():
    there, here = _graph("isa", AVX512), _graph("isa", AVX2)
    published = {a: _published(there.cell(a)) for a in (CPU, GPU)}
    entries = {e.address: e for e in plan_against(here, published, "s").entries}
    assert entries[CPU].status == "regate" and entries[CPU].build_key == there.cell(CPU).build_key
    # each feature that differs is named
    assert set(entries[CPU].changes) == {f"gate: deploy.cpu_isa.{f}: true -> (absent)" for f in set(AVX512) - set(AVX2)}
    assert here.cell(CPU).gate_inputs["deploy"] == {"gpu_match": "cc", "cpu_match": "isa",
                                                    "cpu_isa": {f: True for f in AVX2}}
    assert entries[GPU].status == "up-to-date"  # a GPU engine's verdict does not depend on the CPU
    again = {e.address: e.status for e in plan_against(there, published, "s").entries}
    assert again == {CPU: "up-to-date", GPU: "up-to-date"}  # the same ISA: the verdict stands


def test_under_any_the_instruction_set_is_not_in_the_key_and_the_verdict_stands():
    there, here = _graph("any", AVX512), _graph("any", AVX2)
    assert here.cell(CPU).gate_key == there.cell(CPU).gate_key
    assert here.cell(CPU).gate_inputs["deploy"] == {"gpu_match": "cc"}  # the keys of existing manifests stay
    published = {a: _published(there.cell(a)) for a in (CPU, GPU)}
    assert {e.status for e in plan_against(here, published, "s").entries} == {"up-to-date"}


def test_choosing_isa_is_itself_a_re_gate_not_a_rebuild():
    before, after = _graph("any", AVX2), _graph("isa", AVX2)
    entry = next(e for e in plan_against(after, {CPU: _published(before.cell(CPU))}, "s").entries
                 if e.address == CPU)
    assert entry.status == "regate" and any("deploy.cpu_match" in c for c in entry.changes)


def test_cpu_match_on_a_gpu_target_is_refused_with_its_place(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"")
    path = tmp_path / "m.yaml"
    path.write_text("""manifest_version: 1
models:
  - {name: m, version: "1", source: {path: m.onnx}, inputs: {x: {shape: [1, 4]}}}
targets:
  - {name: l4, builder: tensorrt, builder_version: "10.13.3.9", compute_capability: "8.9", cpu_match: isa}
""")
    with pytest.raises(ManifestError) as bad:
        load_manifest(path, capabilities=capabilities)
    text = str(bad.value)
    assert "m.yaml:" in text and "targets[0].cpu_match" in text
    assert "cpu_match is for CPU targets (device: cpu) only" in text


def test_doctor_prints_the_cpu_and_where_its_features_came_from():
    from rich.console import Console

    from orchestrator.cli.render.doctor import render_doctor

    fp = RunnerFingerprint(os="linux", arch="x86_64",
                           cpu=CpuInfo("AMD EPYC [bold]", ("avx2", "avx512_vnni"), "ORCHESTRATE_CPU_FEATURES"))
    console = Console(record=True, width=200)
    render_doctor({"fingerprint": fp.to_json(), "builders": [], "runtimes": []}, console)
    text = console.export_text()
    assert "CPU: AMD EPYC [bold]  ISA avx2 avx512_vnni (from ORCHESTRATE_CPU_FEATURES)" in text
