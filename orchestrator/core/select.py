"""Choosing among published engines (pure): one ranking for ``pull`` and for every other caller.

The caller says, per candidate, whether it can run and how well (a ``Compat`` from the runtime plugin that owns
the rules); this module keeps the best and says why every other candidate lost. Ranks are lower-is-better;
runtime plugins follow one convention so that engines of different runtimes compare: TensorRT-family engines
0-99 (exact CC 0, same-CC build 10, hardware-compatible 20, +1 for a newer version-compatible runtime), RTX-style
JIT engines 100-199, ONNX engines on a GPU 200-299, on the CPU 300-399.

Within one rank, the most precise precision first when the caller asks for any precision (``precision_rank``:
fp32, fp16, bf16, int8, fp8: ``pull`` without ``--precision`` gives the engine closest to the model's own numerics,
never one picked by publish time; ask for a faster one by name); then ``preference`` (lower first), a policy of the
caller's that no runtime sets: ``pull`` puts an engine built on this runner's exact GPU model (0) before one built
on another model of the compute capability (1). Ties keep input order (a store lists newest first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
UNRANKED = 10_000
# Most precise first: fp32; fp16 (10 mantissa bits) before bf16 (7); int8 (256 levels over a calibrated range)
# before fp8 (E4M3: 3 mantissa bits).
PRECISION_ORDER: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8", "fp8")


def precision_rank(precision: str) -> int:
    """Lower is more precise (``PRECISION_ORDER``); an unknown precision last."""
    return PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)


@dataclass(frozen=True)
class Compat:
    """A runtime's answer for one engine on one runner: can it run, why (or why not), and how well."""

    ok: bool
    reason: str  # why not (ok=False) or how it fits (ok=True), one sentence
    rank: int = UNRANKED  # lower is better; meaningful only when ok
    preference: int = 0  # orders equal ranks, lower first (the caller's policy; runtimes leave it 0)

    @classmethod
    def no(cls, reason: str) -> Compat:
        return cls(False, reason, UNRANKED)

    @classmethod
    def yes(cls, reason: str, rank: int, preference: int = 0) -> Compat:
        return cls(True, reason, rank, preference)


@dataclass(frozen=True)
class Choice(Generic[T]):
    id: str
    item: T
    compat: Compat


@dataclass(frozen=True)
class Ranking(Generic[T]):
    """The best candidate (None when nothing can run), every rejected one with its reason, and the runnable
    ones that lost to the best (with how they would have fit)."""

    best: Choice[T] | None
    rejected: tuple[tuple[str, str], ...]
    runners_up: tuple[Choice[T], ...]

    def explanations(self) -> tuple[tuple[str, str], ...]:
        """Every candidate but the chosen one, with a sentence: rejections first, then the lower-ranked ones."""
        lower = tuple((c.id, f"also compatible, ranked lower ({c.compat.reason})") for c in self.runners_up)
        return self.rejected + lower


def rank_candidates(candidates: Iterable[tuple[str, T]], judge: Callable[[T], Compat],
                    precision_of: Callable[[T], str] | None = None) -> Ranking[T]:
    """Judge every ``(id, item)``; the lowest rank wins, then the most precise precision (``precision_of``: the
    item's precision; None: not compared), then the lowest preference; ties keep input order."""
    runnable: list[tuple[int, int, int, int, Choice[T]]] = []
    rejected: list[tuple[str, str]] = []
    for position, (ident, item) in enumerate(candidates):
        compat = judge(item)
        if compat.ok:
            precise = precision_rank(precision_of(item)) if precision_of is not None else 0
            runnable.append((compat.rank, precise, compat.preference, position, Choice(ident, item, compat)))
        else:
            rejected.append((ident, compat.reason))
    runnable.sort(key=lambda entry: entry[:4])
    best = runnable[0][4] if runnable else None
    return Ranking(best, tuple(rejected), tuple(entry[4] for entry in runnable[1:]))
