"""Labels files every task can read (``gate.parity.data.labels``): one expected answer per image, by file name.

- a JSON object ``{"image.jpg": answer, ...}`` (answer: a class index, a text);
- a text file of ``name<TAB>answer`` lines (PP-OCR's ``rec_gt.txt``: the name may carry a folder, matched by its
  last part; the answer is the rest of the line, spaces kept).

Every image of the dataset needs an answer; a missing one, a duplicate name or a malformed line is a
``GateError`` naming the file and the line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.errors import GateError


def _base(name: str) -> str:
    return name.replace("\\", "/").rsplit("/", 1)[-1]


def read_answers(path: str, images: Sequence[tuple[str, tuple[int, int]]]) -> list[Any]:
    """Each image's answer, in the order of ``images`` ((file name, (width, height)))."""
    file = Path(path)
    if not file.is_file():
        raise GateError(f"labels {file}: not a file", hint="a JSON object or a name<TAB>label text file")
    text = file.read_text(encoding="utf-8-sig")
    answers: dict[str, Any] = {}
    if file.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise GateError(f"labels {file}:{e.lineno}: not JSON: {e.msg}") from None
        if not isinstance(data, dict):
            raise GateError(f"labels {file}: a JSON object of image name -> answer is expected, found "
                            f"{type(data).__name__}", hint='e.g. {"cat.jpg": 281, "dog.jpg": 207}')
        answers = {_base(str(k)): v for k, v in data.items()}
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            name, tab, answer = line.partition("\t")
            if not tab or not name.strip():
                raise GateError(f"labels {file}:{number}: expected 'name<TAB>label', found {line[:80]!r}")
            key = _base(name.strip())
            if key in answers:
                raise GateError(f"labels {file}:{number}: {key!r} is labelled twice")
            answers[key] = answer
    missing = [name for name, _ in images if name not in answers]
    if missing:
        raise GateError(f"labels {file}: no label for {len(missing)} of the {len(images)} images "
                        f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''})",
                        hint="label every image of gate.parity.data.path")
    return [answers[name] for name, _ in images]
