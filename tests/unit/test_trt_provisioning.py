"""Issue 23, Also: the NGC container table of ``toolchain: container``. It is the ``ngc-tensorrt`` rows of
``core.serving`` whose TensorRT NVIDIA itself publishes (confirmed) or pins next to the image (primary-proxy);
a release no such source backs is refused, saying so, never guessed."""

from __future__ import annotations

import pytest

from orchestrator.core.serving import STACKS
from trt_orchestrator_plugins._trt import provisioning
from trt_orchestrator_plugins._trt.provisioning import CONTAINERS, container_image


@pytest.mark.parametrize(("version", "image"), [
    ("10.0.1.6", "nvcr.io/nvidia/tensorrt:24.05-py3"),
    ("10.2.0.19", "nvcr.io/nvidia/tensorrt:24.07-py3"),
    ("10.3.0.26", "nvcr.io/nvidia/tensorrt:24.08-py3"),
    ("10.4.0.26", "nvcr.io/nvidia/tensorrt:24.09-py3"),
    ("10.7.0.23", "nvcr.io/nvidia/tensorrt:24.12-py3"),
    ("10.8.0.43", "nvcr.io/nvidia/tensorrt:25.01-py3"),  # 25.01 and 25.02 both: the earlier
    ("10.9.0.34", "nvcr.io/nvidia/tensorrt:25.04-py3"),  # 25.04 (NVIDIA's own repository) over 25.03 (a proxy)
])
def test_releases_with_an_nvidia_source_have_their_image(version, image):
    found, _cuda, source, missing = container_image(version)
    assert (found, missing) == (image, "")
    assert source.startswith(f"ngc-tensorrt:{image.split(':')[1].split('-')[0]} (")
    assert "https://" in source


def test_a_row_known_by_three_parts_serves_its_exact_release_and_says_the_shard_checks_it():
    image, _cuda, source, _ = container_image("10.15.1.29")
    assert image == "nvcr.io/nvidia/tensorrt:26.02-py3"
    assert "known only as 10.15.1: the shard's version check confirms the build number" in source
    assert container_image("10.15.0.1")[0] is None  # another patch release


@pytest.mark.parametrize("version", ["10.13.3.9", "10.13.0.35", "11.1.0.106", "11.2.1.2", "10.5.0.18"])
def test_a_release_no_nvidia_source_backs_is_refused_saying_so(version):
    image, _cuda, _source, missing = container_image(version)
    assert image is None
    assert missing.startswith(f"no NGC TensorRT container of TensorRT {version} is known to this tool: no NVIDIA "
                              "publication (release notes, a file in an NVIDIA repository) found names an image that "
                              "ships it, and an image is never guessed; nearest known: ")


def test_only_confirmed_and_primary_proxy_rows_are_used():
    assert {r.status for r in CONTAINERS} == {"confirmed", "primary-proxy"}
    secondary = [s for s in STACKS if s.kind == "ngc-tensorrt" and s.status == "secondary"]
    assert secondary and not set(secondary) & set(CONTAINERS)  # 23.01, 23.02, 23.04, 26.08: other projects only
    assert len(CONTAINERS) >= 11


def test_provisioning_hands_the_refusal_to_validate():
    prov = provisioning.provisioning("10.13.3.9", "trtexec")
    assert prov.container_image is None and "no NVIDIA publication" in prov.container_missing
    prov = provisioning.provisioning("10.3.0.26", "tensorrt")
    assert prov.container_image == "nvcr.io/nvidia/tensorrt:24.08-py3" and "DL4AGX/pull/110" in prov.container_source
