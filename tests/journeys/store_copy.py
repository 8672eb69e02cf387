"""A cheap private copy of a published store for one journey."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def link_copy(src: Path, dest: Path) -> Path:
    """A copy of a local store whose files are hard links to the original's where the filesystem allows: the store
    writes every file through a temp file and a rename, never in place, so a journey that publishes or deletes in
    its copy leaves the original untouched."""
    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dest, copy_function=link)
    return dest
