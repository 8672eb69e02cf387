"""Command-line interface: ``orchestrate``. The console script enters at ``main``: a `plan` or no-op `build` whose
inputs did not move since the same invocation last ran is answered from its saved result (``orchestrator.fastpath``)
before click, rich, jsonschema or yaml are imported; anything else runs the commands (``orchestrator.cli.entry``:
the lazy command table, the one catch site)."""

from __future__ import annotations

import importlib
import sys

from orchestrator import fastpath


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    code = fastpath.replay(args)
    if code is not None:
        sys.exit(code)
    # the full path, loaded by name so that the fast path above imports none of it
    importlib.import_module("orchestrator.cli.entry").main(args)
