"""How fleet CI gets an exact TensorRT release (``targets[].toolchain``): NVIDIA's NGC container of that release, or
pinned pip wheels from NVIDIA's index. Facts, each with its source; ``core.toolchain`` renders them into shards.

pip (read from the packages' own metadata on PyPI, https://pypi.org/project/tensorrt-cu12/#history and
https://pypi.org/project/tensorrt/#history, and from NVIDIA/TensorRT python/packaging/frontend_sdist/setup.py, which
pins ``<module>_libs==<version>`` and ``<module>_bindings==<version>`` and fetches them from NVIDIA's index):
- ``tensorrt-cuXX==X`` pins ``tensorrt_cuXX_libs==X`` and ``tensorrt_cuXX_bindings==X``; the libs wheels on PyPI are
  stubs that fetch from NVIDIA's index, so the shard needs ``https://pypi.nvidia.com`` as an extra index.
- PyPI versions are 3-part for 8.6.1 and 10.0-10.7 ("10.7.0"), 4-part from 10.8.0.43.
- ``tensorrt-cu12`` covers 10.0.1 ... 10.16.x and 11.x; ``tensorrt-cu13`` starts at 10.13.2.6; ``tensorrt-cu11`` ends
  at 10.13.0.35. 8.6.1 is the ``tensorrt==8.6.1`` sdist (CUDA 12 libs from NVIDIA's index).
- The wheels carry the Python bindings and libraries, not the ``trtexec`` binary: trtexec targets need a container
  or a runner with TensorRT installed.

Containers: ``CONTAINERS`` below; a release missing from it is refused at validate naming the nearest known ones
(give ``image:`` yourself). Every shard verifies the TensorRT version inside its image before building.
"""

from __future__ import annotations

from orchestrator.contracts.builder import Provisioning

NVIDIA_INDEX = "https://pypi.nvidia.com"
_CU13_SINCE = (10, 13, 2, 6)
_CU11_UNTIL = (10, 13, 0, 35)
_FOUR_PART_SINCE = (10, 8)
# every 11.x release on PyPI (https://pypi.org/project/tensorrt-cu12/#history); 10.x releases are not listed one by one
PYPI_11 = ("11.0.0.114", "11.1.0.106", "11.2.1.2", "11.3.0.99", "11.4.0.106")

# TensorRT release -> (NGC image, CUDA, source). NVIDIA's per-month TensorRT container release notes were not
# readable from here, so no row is confirmed from them; each row says what it rests on. Every shard still verifies
# the TensorRT version inside its image before building (`orchestrate ci verify-shard`), so a wrong row fails the
# job naming both versions instead of building with another release. docs/ci.md says how to add a row.
CONTAINERS: dict[str, tuple[str, str, str]] = {
    "10.8.0.43": ("nvcr.io/nvidia/tensorrt:25.01-py3", "12.8",
                  "secondary: three independent projects pin libnvinfer 10.8.0.43-1+cuda12.8 in this image, and "
                  "NVIDIA/TensorRT#4346 says 10.8 is in the 25.01 container; NVIDIA's Triton compatibility matrix "
                  "(triton-inference-server/server docs/introduction/compatibility.md) lists 10.8.0.43 / CUDA 12.8 "
                  "for the same month"),
    "10.9.0.34": ("nvcr.io/nvidia/tensorrt:25.03-py3", "12.8",
                  "secondary: a project tested with this image reports TensorRT 10.9, CUDA 12.8.1, Ubuntu 24.04; "
                  "NVIDIA's Triton compatibility matrix lists 10.9.0.34 / CUDA 12.8.1 for 25.03"),
}


def _parts(version: str) -> tuple[int, ...]:
    out = []
    for p in version.split("."):
        if not p.isdigit():
            break
        out.append(int(p))
    return tuple(out)


def _nearest(version: str, k: int = 3) -> list[str]:
    want = _parts(version)

    def distance(known: str) -> tuple[int, ...]:
        have = _parts(known)
        return tuple(abs(a - b) for a, b in zip(have + (0,) * 4, want + (0,) * 4, strict=False))

    return sorted(CONTAINERS, key=distance)[:k]


def container_image(version: str) -> tuple[str | None, str | None, str, str]:
    """(image, cuda, source, why-missing) of an exact TensorRT release. A 3-part version matches the one known
    4-part release that starts with it."""
    row = CONTAINERS.get(version)
    if row is None and len(_parts(version)) == 3:
        same = [v for v in CONTAINERS if v.startswith(version + ".")]
        row = CONTAINERS[same[0]] if len(same) == 1 else None
    if row is not None:
        return row[0], row[1], row[2], ""
    near = ", ".join(f"{v} ({CONTAINERS[v][0]})" for v in _nearest(version))
    return None, None, "", (f"no NGC TensorRT container of TensorRT {version} is known to this tool"
                            + (f"; nearest known: {near}" if near else ""))


def pip_requirements(version: str) -> tuple[dict[str, tuple[str, ...]], str]:
    """CUDA major -> the exact requirements of a TensorRT release (the first is the default), or why there are none."""
    v = _parts(version)
    if v[:3] == (8, 6, 1):
        return {"12": ("tensorrt==8.6.1",)}, ""
    if len(v) < 3 or v[0] not in (10, 11):
        return {}, (f"TensorRT {version} has no pip wheels (PyPI has 8.6.1, 10.0.1 to 10.16.x and 11.x; 8.6.3 "
                    "only ships in NGC containers)")
    if v[0] == 11 and version not in PYPI_11:
        same = [k for k in PYPI_11 if _parts(k)[:2] == v[:2]]
        return {}, (f"TensorRT {version} is not on PyPI" + (f" (that minor release is {same[0]})" if same else "")
                    + f"; the 11.x wheels are {', '.join(PYPI_11)}")
    pin = ".".join(str(p) for p in (v[:3] if v[:2] < _FOUR_PART_SINCE else v))
    cudas: dict[str, tuple[str, ...]] = {"12": (f"tensorrt-cu12=={pin}",)}
    if v >= _CU13_SINCE:
        cudas["13"] = (f"tensorrt-cu13=={pin}",)
    if v <= _CU11_UNTIL:
        cudas["11"] = (f"tensorrt-cu11=={pin}",)
    return cudas, ""


def provisioning(version: str, tool: str) -> Provisioning:
    image, cuda, source, missing = container_image(version)
    if tool == "trtexec":
        pins: dict[str, tuple[str, ...]] = {}
        pip_missing = ("the TensorRT pip wheels carry no trtexec binary: use toolchain: container, or runner with "
                       "TensorRT installed")
    else:
        pins, pip_missing = pip_requirements(version)
    return Provisioning(container_image=image, container_cuda=cuda, container_source=source,
                        container_missing=missing, pip_requirements=pins,
                        pip_index_url=NVIDIA_INDEX if pins else None, pip_missing=pip_missing)
