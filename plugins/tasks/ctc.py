"""``ctc``: greedy CTC decoding of an ``[N, T, C]`` recognition output, then strings compared with the reference's.

Decoding (PP-OCR's ``CTCLabelDecode``): argmax over C per time step, collapse repeats, drop the blank class
(option ``blank``, default 0), map the rest through the charset (option ``charset``: a text file, one character
per line, as PP-OCR's ``ppocr_keys_v1.txt``). The classes other than blank are the charset's characters in order;
one class more than the file has lines is PP-OCR's ``use_space_char``: a space is appended. Without a charset the
decoded "strings" are sequences of class indices (the comparison is the same).

Metrics: ``text_accuracy`` (rows whose engine string equals the reference's), ``norm_edit_distance`` (mean over
rows of Levenshtein distance / the longer string's length; 0 when both are empty); with labels (one string per
row): ``label_text_accuracy`` and ``label_norm_edit_distance`` of the engine, and ``reference_label_text_accuracy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.contracts.task import SampleOutputs
from orchestrator.core.model import TaskSpec
from orchestrator.errors import GateError
from trt_orchestrator_plugins.tasks._labels import read_answers
from trt_orchestrator_plugins.tasks._outputs import option, stacked

Text = tuple[Any, ...]  # characters, or class indices without a charset


def levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Edit distance (insert, delete, substitute: 1 each), two rows of the table at a time."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def normalized_edit_distance(a: Sequence[Any], b: Sequence[Any]) -> float:
    longest = max(len(a), len(b))
    return levenshtein(a, b) / longest if longest else 0.0


def read_charset(path: str) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise GateError(f"task ctc: cannot read charset {path}: {e.strerror or e}",
                        hint="models[].task.charset: a text file, one character per line") from e
    return [line.rstrip("\r") for line in text.split("\n")[:-1 if text.endswith("\n") else None]]


def greedy_decode(scores: np.ndarray, blank: int = 0) -> list[tuple[int, ...]]:
    """Each row of ``[N, T, C]``: argmax per step, repeats collapsed, blanks dropped -> class indices."""
    best = np.argmax(scores, axis=-1)
    keep = np.ones(best.shape, dtype=bool)
    keep[:, 1:] = best[:, 1:] != best[:, :-1]
    keep &= best != blank
    return [tuple(int(c) for c in row[mask]) for row, mask in zip(best, keep)]


def charset_for(chars: list[str], classes: int, blank: int, path: str) -> list[str]:
    """The character of each class, blank excluded, for an output of ``classes`` classes."""
    if len(chars) + 1 == classes - 1:  # PP-OCR use_space_char: the last class is a space
        chars = [*chars, " "]
    if len(chars) != classes - 1:
        raise GateError(f"task ctc: charset {path} has {len(chars)} characters; the output has {classes} classes "
                        f"({classes - 1} without the blank at {blank})",
                        hint="use the charset the recognition model was trained with")
    return chars


class CTC:
    name = "ctc"
    metrics = ("text_accuracy", "norm_edit_distance", "label_text_accuracy", "label_norm_edit_distance",
               "reference_label_text_accuracy")

    def decode(self, scores: np.ndarray, spec: TaskSpec) -> list[Text]:
        classes = scores.shape[-1]
        blank = int(option(spec, "blank", 0))
        if not 0 <= blank < classes:
            raise GateError(f"task ctc: blank index {blank} is outside the output's {classes} classes")
        sequences = greedy_decode(scores, blank)
        charset = spec.options.get("charset")
        if charset is None:
            return [tuple(s) for s in sequences]
        chars = charset_for(read_charset(str(charset)), classes, blank, str(charset))
        return [tuple(chars[c if c < blank else c - 1] for c in s) for s in sequences]

    def evaluate(self, reference_outputs: Sequence[SampleOutputs], engine_outputs: Sequence[SampleOutputs],
                 spec: TaskSpec, labels: Sequence[Any] | None = None) -> dict[str, float]:
        name, ref, eng = stacked(spec, reference_outputs, engine_outputs, 3, "[N, T, C] per-step class scores")
        ref_text, eng_text = self.decode(ref, spec), self.decode(eng, spec)
        out = {"text_accuracy": float(np.mean([r == e for r, e in zip(ref_text, eng_text)])) if ref_text else 1.0,
               "norm_edit_distance": float(np.mean([normalized_edit_distance(r, e)
                                                    for r, e in zip(ref_text, eng_text)])) if ref_text else 0.0}
        if labels is not None:
            truth = [tuple(str(x)) for x in labels]
            if len(truth) != len(ref_text):
                raise GateError(f"task ctc: {len(truth)} labels for {len(ref_text)} rows of output {name!r}")
            out["label_text_accuracy"] = float(np.mean([t == e for t, e in zip(truth, eng_text)]))
            out["label_norm_edit_distance"] = float(np.mean([normalized_edit_distance(t, e)
                                                             for t, e in zip(truth, eng_text)]))
            out["reference_label_text_accuracy"] = float(np.mean([t == r for t, r in zip(truth, ref_text)]))
        return out


    def read_labels(self, path: str, images: Sequence[tuple[str, tuple[int, int]]],
                    input_hw: tuple[int, int]) -> list[str]:
        """The text of each image (``_labels``: PP-OCR's name<TAB>text lines, or a JSON object)."""
        return [str(answer) for answer in read_answers(path, images)]


ctc = CTC()
