"""Jetson detection without NVML (issue 12): the module's own files under a fake root (``/etc/nv_tegra_release``,
``/proc/device-tree/{model,compatible}``, ``/proc/meminfo``) give the L4T release and the integrated GPU; any other
machine's tree gives neither."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import hardware
from orchestrator.hardware import detect, l4t_release, read_tegra

ORIN_RELEASE = ("# R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic, EABI: aarch64, DATE: Fri Sep 13 "
                "04:36:44 UTC 2024\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\n"
                "TARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n")
MEMINFO = "MemTotal:       64335836 kB\nMemFree:        60123456 kB\nMemAvailable:   61234567 kB\n"


def tree(root: Path, *, release: str | None = None, model: str | None = None, compatible: tuple[str, ...] = (),
         meminfo: str | None = MEMINFO) -> Path:
    """A fake machine: the files as the kernel writes them (device-tree strings NUL-terminated)."""
    if release is not None:
        (root / "etc").mkdir(parents=True)
        (root / "etc" / "nv_tegra_release").write_text(release)
    dt = root / "proc" / "device-tree"
    dt.mkdir(parents=True)
    if model is not None:
        (dt / "model").write_bytes(model.encode() + b"\0")
    if compatible:
        (dt / "compatible").write_bytes(b"".join(c.encode() + b"\0" for c in compatible))
    if meminfo is not None:
        (root / "proc" / "meminfo").write_text(meminfo)
    return root


def test_agx_orin_is_cc_8_7_on_l4t_36_4(tmp_path):
    root = tree(tmp_path, release=ORIN_RELEASE, model="NVIDIA Jetson AGX Orin Developer Kit",
                compatible=("nvidia,p3737-0000+p3701-0005", "nvidia,p3701-0005", "nvidia,tegra234"))
    found = read_tegra(root)
    assert found.l4t == "36.4"
    assert found.gpu is not None
    assert (found.gpu.name, found.gpu.compute_capability) == ("NVIDIA Jetson AGX Orin Developer Kit", "8.7")
    assert found.gpu.memory_mib == 64335836 // 1024  # shared with the CPU: MemTotal


@pytest.mark.parametrize("release,model,compatible,l4t,cc", [
    # "Orin Nano" is an Orin, not a (Maxwell) Nano; no `compatible` file: the model's words decide
    ("# R36 (release), REVISION: 3.0, GCID: 1, BOARD: generic, EABI: aarch64, DATE: x",
     "NVIDIA Jetson Orin Nano Developer Kit", (), "36.3", "8.7"),
    ("# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: x",
     "NVIDIA Jetson Xavier NX Developer Kit", ("nvidia,p3509-0000+p3668-0001", "nvidia,tegra194"), "35.4.1", "7.2"),
    ("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64, DATE: x",
     "NVIDIA Jetson Nano Developer Kit", ("nvidia,p3450-0000", "nvidia,jetson-nano", "nvidia,tegra210"), "32.7.1",
     "5.3"),
    # a TX2 whose device-tree model is its board code name: the SoC in `compatible` decides
    ("# R32 (release), REVISION: 7.4, GCID: 1, BOARD: t186ref, EABI: aarch64, DATE: x", "quill",
     ("nvidia,p2771-0000-500", "nvidia,quill", "nvidia,tegra186"), "32.7.4", "6.2"),
    # Thor: CUDA 13 (JetPack 7) names it sm_110
    ("# R38 (release), REVISION: 2.0, GCID: 1, BOARD: generic, EABI: aarch64, DATE: x",
     "NVIDIA Jetson AGX Thor Developer Kit", ("nvidia,p3971-0000+p3834-0008", "nvidia,tegra264"), "38.2", "11.0"),
])
def test_jetson_modules(tmp_path, release, model, compatible, l4t, cc):
    found = read_tegra(tree(tmp_path, release=release, model=model, compatible=compatible))
    assert found.l4t == l4t
    assert found.gpu is not None and found.gpu.compute_capability == cc and found.gpu.name == model


@pytest.mark.parametrize("model,compatible", [
    (None, ()),  # an SBSA server (GH200, Ampere Altra): no device tree model, no L4T
    ("Raspberry Pi 4 Model B Rev 1.4", ("raspberrypi,4-model-b", "brcm,bcm2711")),
])
def test_a_non_jetson_aarch64_tree_has_no_gpu_and_no_l4t(tmp_path, model, compatible):
    found = read_tegra(tree(tmp_path, model=model, compatible=compatible))
    assert found.l4t is None and found.gpu is None


def test_an_empty_root_is_no_jetson(tmp_path):
    assert read_tegra(tmp_path) == hardware.Tegra()


def test_memory_is_zero_without_meminfo(tmp_path):
    found = read_tegra(tree(tmp_path, release=ORIN_RELEASE, model="NVIDIA Jetson AGX Orin Developer Kit",
                            compatible=("nvidia,tegra234",), meminfo=None))
    assert found.gpu is not None and found.gpu.memory_mib == 0


@pytest.mark.parametrize("text,l4t", [
    ("# R36 (release), REVISION: 4.0, GCID: 1", "36.4"),
    ("# R36 (release), REVISION: 4.3, GCID: 1", "36.4.3"),
    ("# R35 (release), REVISION: 0.0, GCID: 1", "35.0"),
    ("not a release file", None),
    ("", None),
])
def test_l4t_release_line(text, l4t):
    assert l4t_release(text) == l4t


def test_detect_reads_the_jetson_tree_and_keeps_nvml_first(tmp_path):
    root = tree(tmp_path, release=ORIN_RELEASE, model="NVIDIA Jetson AGX Orin Developer Kit",
                compatible=("nvidia,tegra234",))
    fp = detect(root=root)
    assert fp.l4t == "36.4"
    nvml = hardware.nvml_gpus()[0]
    # where NVML reports GPUs (a lent GPU machine) they win; where it reports none, the Jetson's own GPU
    assert fp.gpus == (nvml or (read_tegra(root).gpu,))
    assert fp.to_json()["l4t"] == "36.4"
