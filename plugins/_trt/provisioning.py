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

Containers: ``CONTAINERS`` below, the NGC TensorRT images whose release NVIDIA's own publications name
(``core.serving``'s ``ngc-tensorrt`` rows, each with its source); a release missing from it is refused at validate,
saying that no such source names an image for it, with the nearest known ones (give ``image:`` yourself). Every
shard verifies the TensorRT version inside its image before building.
"""

from __future__ import annotations

from orchestrator.contracts.builder import Provisioning
from orchestrator.core.serving import STACKS, ServingStack

NVIDIA_INDEX = "https://pypi.nvidia.com"
_CU13_SINCE = (10, 13, 2, 6)
_CU11_UNTIL = (10, 13, 0, 35)
_FOUR_PART_SINCE = (10, 8)
# every 11.x release on PyPI (https://pypi.org/project/tensorrt-cu12/#history); 10.x releases are not listed one by one
PYPI_11 = ("11.0.0.114", "11.1.0.106", "11.2.1.2", "11.3.0.99", "11.4.0.106")

# The NGC TensorRT images a ``container`` toolchain may use: the ``ngc-tensorrt`` rows of ``core.serving`` whose
# TensorRT version NVIDIA itself publishes (status confirmed) or pins next to the image (primary-proxy: Triton's
# Windows build of that month). Secondary rows (other projects' pins) and months no source names are not used: a
# release without such a row is refused at validate, saying so (give image: yourself). Where two months ship one
# release, the better-sourced, then the earlier, image is taken. Every shard still verifies the TensorRT version
# inside its image before building (`orchestrate ci verify-shard`), so a wrong row fails the job naming both versions
# instead of building with another release. docs/ci.md says how to add a row.
_USABLE: tuple[str, ...] = ("confirmed", "primary-proxy")


def _container_rows() -> tuple[ServingStack, ...]:
    rows = [s for s in STACKS if s.kind == "ngc-tensorrt" and s.status in _USABLE and s.image]
    return tuple(sorted(rows, key=lambda s: (_USABLE.index(s.status), _parts(s.release))))


def _parts(version: str) -> tuple[int, ...]:
    out = []
    for p in version.split("."):
        if not p.isdigit():
            break
        out.append(int(p))
    return tuple(out)


CONTAINERS: tuple[ServingStack, ...] = _container_rows()


def _row_for(version: str) -> ServingStack | None:
    """The image of an exact release: a row with that version, else a row known only as its major.minor.patch (the
    shard's check reads the build number inside the image)."""
    want = _parts(version)
    for row in CONTAINERS:
        if _parts(row.tensorrt) == want:
            return row
    for row in CONTAINERS:
        have = _parts(row.tensorrt)
        if len(have) == 3 and want[:3] == have:
            return row
    return None


def _nearest(version: str, k: int = 3) -> list[ServingStack]:
    want = _parts(version)

    def distance(row: ServingStack) -> tuple[int, ...]:
        have = _parts(row.tensorrt)
        return tuple(abs(a - b) for a, b in zip(have + (0,) * 4, want + (0,) * 4, strict=False))

    seen: dict[str, ServingStack] = {}
    for row in sorted(CONTAINERS, key=distance):
        seen.setdefault(row.tensorrt, row)
    return list(seen.values())[:k]


def container_image(version: str) -> tuple[str | None, str | None, str, str]:
    """(image, cuda, source, why-missing) of an exact TensorRT release."""
    row = _row_for(version)
    if row is not None:
        three = len(_parts(row.tensorrt)) == 3
        source = (f"{row.name} ({row.status}): {row.source}"
                  + (f"; known only as {row.tensorrt}: the shard's version check confirms the build number"
                     if three else ""))
        return row.image, row.cuda, source, ""
    near = ", ".join(f"{r.tensorrt} ({r.image})" for r in _nearest(version))
    return None, None, "", (f"no NGC TensorRT container of TensorRT {version} is known to this tool: no NVIDIA "
                            "publication (release notes, a file in an NVIDIA repository) found names an image that "
                            "ships it, and an image is never guessed"
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
