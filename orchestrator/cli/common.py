"""Shared CLI plumbing: consoles, JSON output, the --json error shape, common options."""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import click
from rich.console import Console

from orchestrator import fastpath
from orchestrator.errors import ManifestError, NoCompatibleEngineError, OrchestratorError

_JSON_MODE = {"on": False}


def _width(stream) -> int | None:
    # Piped output (CI logs, `| less`) keeps whole addresses on one line instead of rich's default 80 columns;
    # a width the user sets (COLUMNS) is theirs, piped or not (rich reads it)
    return None if stream.isatty() or os.environ.get("COLUMNS", "").strip().isdigit() else 200


@cache
def console() -> Console:
    return Console(highlight=False, soft_wrap=True, width=_width(sys.stdout))


@cache
def console_err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True, width=_width(sys.stderr))


_PROCESS: dict[str, Any] = {"owned": False, "recorder": None}  # owned: ``orchestrator.cli.main`` is the entry


def own_process() -> None:
    _PROCESS["owned"] = True


def release_process() -> None:
    """``main`` is done: an in-process caller (a test calling ``main``) goes on with its own GC state and nothing
    recorded after it."""
    _PROCESS["owned"] = False
    _PROCESS["recorder"] = None


def set_recorder(recorder: fastpath.Recorder) -> None:
    _PROCESS["recorder"] = recorder


def recording() -> fastpath.Recorder | None:
    """The recorder of a command the fast path may answer next time (None: not recording)."""
    recorder: fastpath.Recorder | None = _PROCESS["recorder"]
    return recorder


def finish_recording(exit_code: int) -> None:
    recorder = recording()
    if recorder is not None:
        _PROCESS["recorder"] = None
        recorder.finish(exit_code)


@contextmanager
def long_lived() -> Iterator[None]:
    """For what a command makes once and keeps until it exits (the project, its graph, the plan): CPython's cyclic
    GC is paused while it is made, and in the ``orchestrate`` process those objects are then moved out of its reach
    (``gc.freeze``). They hold no reference cycles, yet every full collection would walk all of them again: at a
    million cells that cost more than resolving them (bench/NOTES.md, "Plan at scale"). An in-process caller (a
    test's CliRunner) keeps its own GC state: there the pause ends and nothing is frozen."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _PROCESS["owned"]:
            gc.freeze()
        if enabled:
            gc.enable()


def set_json_mode(on: bool) -> None:
    _JSON_MODE["on"] = on


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def emit_json_error(error: OrchestratorError) -> bool:
    """In --json mode errors are JSON on stdout too, so scripts can parse every outcome."""
    if not _JSON_MODE["on"]:
        return False
    body: dict[str, dict[str, Any]] = {"error": {"type": type(error).__name__, "message": error.message,
                                                 "hint": error.hint, "exit_code": error.exit_code}}
    if isinstance(error, ManifestError):
        body["error"]["problems"] = [p.to_json() for p in error.problems]
    if isinstance(error, NoCompatibleEngineError):
        body["error"]["candidates"] = error.candidates
    print_json(body)
    return True


def json_option(f):
    def callback(ctx, param, value):
        set_json_mode(bool(value))
        return value

    return click.option("--json", "as_json", is_flag=True, expose_value=True, is_eager=True, callback=callback,
                        help="Machine-readable JSON on stdout.")(f)


manifests_argument = click.argument("manifests", nargs=-1, type=click.Path(dir_okay=False))
cache_option = click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
                            envvar="ORCHESTRATE_CACHE", help="Work and cache directory [default: .orchestrate].")


def require_manifests(manifests, plan_file=None) -> list[str]:
    if manifests:
        return list(manifests)
    if plan_file:
        data = json.loads(open(plan_file).read())
        paths = list(data.get("manifests", {}))
        if paths:
            return paths
    raise click.UsageError("give at least one MANIFEST (e.g. manifests/demo.yaml)")
