"""``options.extra``: the TensorRT builder settings a target may add beyond the common options, per builder version
and per front end (the ``tensorrt`` builder's Python API or trtexec's command line). Pure.

``options.extra`` (per builder version, ``EXTRA_OPTIONS``; any other key is refused at validate, and again here):

=========================  =======================================  ======================  ====================
key (value)                TensorRT Python API (``tensorrt``)       trtexec flag            versions
=========================  =======================================  ======================  ====================
``avg_timing_iterations``  ``config.avg_timing_iterations = N``     ``--avgTiming=N``       8.6.1+ (both)
(int >= 1)
``max_aux_streams``        ``config.max_aux_streams = N``           ``--maxAuxStreams=N``   8.6.1+ (both)
(int >= 0)
``sparse_weights`` (bool)  true: ``set_flag(BuilderFlag.             true: ``--sparsity=     8.6.1+ (both)
                           SPARSE_WEIGHTS)``                        enable``
``tf32`` (bool)            false: ``clear_flag(BuilderFlag.TF32)``  false: ``--noTF32``     8.6.1+ (both)
``max_num_tactics``        ``config.max_num_tactics = N``           ``--maxTactics=N``      API 10.4+
(int >= 1)                                                                                  (pyCore.cpp from tag
                                                                                            v10.4.0); trtexec 10.7+
                                                                                            (first option table
                                                                                            listing it)
=========================  =======================================  ======================  ====================

Every name above was checked against the binding surfaces of 8.6.1 ... 11.4 (tests/conformance/data, read from
NVIDIA's binding wheels) and trtexec's option sets per tag (v8.6.1 ... v11.1, ``_trt/trtexec_options.py``).
``true`` for ``tf32`` / ``false`` for ``sparse_weights`` is TensorRT's default and changes nothing (but is still a
key input).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.core.versions import parse_version
from orchestrator.errors import BuildError

# which front end applies the plan: the Python API (the ``tensorrt`` builder) or trtexec's command line
Tool = Literal["python", "trtexec"]


@dataclass(frozen=True)
class ExtraOption:
    """One ``options.extra`` key: its value type, and from which version each front end has it."""

    kind: Literal["int", "bool"]
    minimum: int | None
    python_since: tuple[int, ...]
    trtexec_since: tuple[int, ...]
    what: str


EXTRA_OPTIONS: dict[str, ExtraOption] = {
    "avg_timing_iterations": ExtraOption(
        "int", 1, (8, 6), (8, 6),
        "int >= 1: timing iterations averaged per tactic (IBuilderConfig.avg_timing_iterations; trtexec "
        "--avgTiming)"),
    "max_aux_streams": ExtraOption(
        "int", 0, (8, 6), (8, 6),
        "int >= 0: auxiliary streams TensorRT may run layers on in parallel (IBuilderConfig.max_aux_streams; "
        "trtexec --maxAuxStreams)"),
    "sparse_weights": ExtraOption(
        "bool", None, (8, 6), (8, 6),
        "bool: true lets TensorRT pick 2:4 structured-sparsity tactics (BuilderFlag.SPARSE_WEIGHTS; trtexec "
        "--sparsity=enable)"),
    "tf32": ExtraOption(
        "bool", None, (8, 6), (8, 6),
        "bool: false forbids TF32 in FP32 layers (clears BuilderFlag.TF32, on by default; trtexec --noTF32)"),
    "max_num_tactics": ExtraOption(
        "int", 1, (10, 4), (10, 7),
        "int >= 1: most tactics timed per layer (IBuilderConfig.max_num_tactics; trtexec --maxTactics)"),
}


def extra_options(version: str | tuple[int, ...], tool: Tool = "python") -> dict[str, str]:
    """The extra keys TensorRT ``version`` applies through ``tool``, each with what it does."""
    v = parse_version(version) if isinstance(version, str) else version
    return {k: o.what for k, o in EXTRA_OPTIONS.items()
            if v >= (o.python_since if tool == "python" else o.trtexec_since)}


def extra_settings(v: tuple[int, ...], tool: Tool, extra: dict[str, Any], vtext: str) -> tuple[tuple[str, Any], ...]:
    """``options.extra`` checked against what this version/tool applies, values type-checked; sorted by key."""
    known = extra_options(v, tool)
    who = f"{vtext} ({'trtexec' if tool == 'trtexec' else 'Python API'})"
    out = []
    for key in sorted(extra):
        value = extra[key]
        if key not in known:
            gate = EXTRA_OPTIONS.get(key)
            why = (f" (from {'.'.join(map(str, gate.python_since if tool == 'python' else gate.trtexec_since))})"
                   if gate else "")
            raise BuildError(f"{who} does not apply extra option {key!r}{why}",
                             hint="it applies: " + ("; ".join(f"{k}: {w}" for k, w in known.items()) or "none"))
        spec = EXTRA_OPTIONS[key]
        if spec.kind == "bool":
            if not isinstance(value, bool):
                raise BuildError(f"extra option {key!r} takes true or false, not {value!r}")
        else:
            if isinstance(value, bool) or not isinstance(value, int):
                raise BuildError(f"extra option {key!r} takes an integer, not {value!r}")
            if spec.minimum is not None and value < spec.minimum:
                raise BuildError(f"extra option {key!r} must be >= {spec.minimum}, not {value}")
        out.append((key, value))
    return tuple(out)
