"""core.serving: serving stacks -> the exact TensorRT release they ship (literal values, each row with its source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.serving import NO_TENSORRT_11, STACKS, is_serving, releases, resolve_serving
from orchestrator.errors import UsageError
from scripts import serving_table


@pytest.mark.parametrize(("text", "tensorrt", "cuda"), [
    ("triton:24.05", "10.0.1.6", "12.3.2.001"),
    ("triton:25.01", "10.8.0.43", "12.8.0.038"),
    ("triton:25.02", "10.8.0.43", "12.8.0.038"),
    ("triton:25.05", "10.9.0.34", "12.8.1.012"),
    ("triton:25.11", "10.13.3.9", "13.0.2.006"),
    ("triton:26.02", "10.13.3.9", "13.0.2.006"),
    ("triton:26.07", "10.14.1.48", "13.1.0.036"),
])
def test_triton_rows_are_the_trtllm_image(text, tensorrt, cuda):
    stack = resolve_serving(text)
    release = text.split(":")[1]
    assert (stack.kind, stack.release, stack.tensorrt, stack.cuda, stack.status) == (
        "triton", release, tensorrt, cuda, "confirmed")
    assert stack.image == f"nvcr.io/nvidia/tritonserver:{release}-trtllm-python-py3"
    assert "trtllm-python-py3 image's TensorRT" in stack.note
    assert f"plain tritonserver:{release}-py3 image's TensorRT could not be read" in stack.note
    assert "compatibility.md" in stack.source
    assert stack.runtime == f"trt{tensorrt}"


@pytest.mark.parametrize(("text", "tensorrt"), [
    ("ngc-tensorrt:23.04", "8.6.1"), ("ngc-tensorrt:26.08", "11.2.1.2"),
    ("jetpack:6.2", "10.3.0.30"), ("jetpack:5.1.3", "8.5.2.2"), ("jetpack:7.1", "10.13.3.9"),
])
def test_ngc_and_jetpack_rows_of_other_projects_are_secondary(text, tensorrt):
    stack = resolve_serving(text)
    assert stack.tensorrt == tensorrt
    assert stack.status == "secondary"
    assert stack.source


# Issue 23, Also: the NGC TensorRT images whose TensorRT NVIDIA's own publications name (confirmed) or pin next to the
# image (primary-proxy: Triton's Windows build of the month), each citing that source.
@pytest.mark.parametrize(("release", "tensorrt", "status", "cited"), [
    ("24.02", "8.6.3", "confirmed", "https://github.com/triton-inference-server/server/issues/6959"),
    ("24.05", "10.0.1.6", "confirmed", "https://docs.nvidia.com/deeplearning/frameworks/mxnet-release-notes/"
                                       "rel-24-05.html"),
    ("24.07", "10.2.0.19", "primary-proxy", "commit/2bb9020d7da96818f411aef0b0d2bf53c2663a86"),
    ("24.08", "10.3.0.26", "confirmed", "https://github.com/NVIDIA/DL4AGX/pull/110"),
    ("24.09", "10.4.0.26", "primary-proxy", "commit/8cfb3b00c98783959ec417b7ca8098d984e68c36"),
    ("24.12", "10.7.0.23", "primary-proxy", "commit/38520f6d04795363a8c76288863f4fabd59a58d1"),
    ("25.01", "10.8.0.43", "primary-proxy", "https://github.com/NVIDIA/TensorRT/issues/4346"),
    ("25.02", "10.8.0.43", "primary-proxy", "commit/ababbeb64be57417e96af69f572c570357b681f8"),
    ("25.03", "10.9.0.34", "primary-proxy", "NVIDIA/TensorRT-LLM/blob/0237cabd8564e20bf7790db5df17bb631412011c"),
    ("25.04", "10.9.0.34", "confirmed", "https://github.com/NVIDIA/DL4AGX/pull/110"),
    ("26.02", "10.15.1", "confirmed", "https://github.com/NVIDIA/Model-Optimizer/pull/1112"),
])
def test_ngc_rows_with_an_nvidia_source(release, tensorrt, status, cited):
    stack = resolve_serving(f"ngc-tensorrt:{release}")
    assert (stack.tensorrt, stack.status, stack.image) == (tensorrt, status, f"nvcr.io/nvidia/tensorrt:{release}-py3")
    assert cited in stack.source


def test_ngc_image_and_spelling():
    stack = resolve_serving(" NGC-TensorRT:25.01 ")
    assert stack.image == "nvcr.io/nvidia/tensorrt:25.01-py3"
    assert stack.cuda == "12.8"
    assert resolve_serving("jetpack:6.2").image is None


def test_unverified_ngc_months_are_left_out():
    # no source (24.11, 25.05), only a 2-part version from NVIDIA staff (23.11), only CUDA known (25.08, 25.12), the
    # 2023 8.6.1 months whose NVIDIA pin (8.6.1.6) disagrees with the images' dpkg (8.6.1.2): refused, never guessed
    for release in ("24.11", "25.05", "23.11", "25.08", "25.12", "23.07", "23.12"):
        assert release not in releases("ngc-tensorrt")
        with pytest.raises(UsageError) as exc:
            resolve_serving(f"ngc-tensorrt:{release}")
        assert ("known ngc-tensorrt releases: 23.01, 23.02, 23.04, 24.02, 24.05, 24.07, 24.08, 24.09, 24.12, 25.01, "
                "25.02, 25.03, 25.04, 26.02, 26.08") in exc.value.hint
        assert "no public source names, or whose sources disagree, is left out: this tool does not guess" in \
            exc.value.hint


def test_tensorrt_8_6_10_and_11_rows_each_with_a_source():
    by_major = {}
    for stack in STACKS:
        assert stack.source and stack.status in ("confirmed", "primary-proxy", "secondary")
        by_major.setdefault(stack.tensorrt.split(".")[0], []).append(stack.name)
    assert {"8", "10", "11"} <= set(by_major)
    assert resolve_serving("triton:23.05").tensorrt == "8.6.1.2"
    assert resolve_serving("triton:23.05").image == "nvcr.io/nvidia/tritonserver:23.05-py3"  # the plain image
    assert resolve_serving("triton:24.02").tensorrt == "8.6.3"
    eleven = resolve_serving("ngc-tensorrt:26.08")
    assert (eleven.tensorrt, eleven.cuda, eleven.status) == ("11.2.1.2", "13.3", "secondary")
    assert by_major["11"] == ["ngc-tensorrt:26.08"]  # no Triton or JetPack row: none is known


def test_conflicting_sources_are_noted():
    assert "earlier revision of the matrix (docs/compatibility.md @01bbc523) said 8.6.3" in \
        resolve_serving("triton:24.04").note
    assert "server#7374" in resolve_serving("triton:24.05").note


def test_a_newer_release_is_refused_not_guessed():
    with pytest.raises(UsageError) as exc:
        resolve_serving("triton:27.01")
    assert exc.value.message == (f"unknown triton release '27.01': no TensorRT version is known for it "
                                 f"({NO_TENSORRT_11}; a newer release is not assumed to carry any particular one)")
    assert exc.value.hint.startswith("known triton releases: 23.05, 24.02, 24.04, 24.05,")
    assert "26.07" in exc.value.hint


def test_unknown_kind_and_older_release():
    with pytest.raises(UsageError, match="unknown serving stack 'tgi:2.0'") as exc:
        resolve_serving("tgi:2.0")
    assert "triton, ngc-tensorrt, jetpack" in exc.value.hint
    with pytest.raises(UsageError) as exc:
        resolve_serving("triton:23.08")  # no source for the 23.08-py3 image's TensorRT was found
    assert "TensorRT 11" not in exc.value.message


def test_is_serving():
    assert is_serving("triton:25.01") and is_serving("jetpack:6.2")
    assert not is_serving("trt10.13") and not is_serving("ort1.31") and not is_serving("foo:1")


def test_docs_deploy_holds_the_generated_table():
    """docs/deploy.md's table is what scripts/serving_table.py renders from STACKS (regenerate with --write)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    assert serving_table.current(text) == serving_table.block(), "run: python scripts/serving_table.py --write"
    for stack in STACKS:
        assert f"| `{stack.name}` | {stack.tensorrt} | {stack.cuda or '—'} | {stack.status} |" in text, stack.name
