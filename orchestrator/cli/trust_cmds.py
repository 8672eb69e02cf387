"""identify (what a model or engine file is, from its bytes) and adopt (gate and register a foreign engine)."""

from __future__ import annotations

import click
from rich.text import Text

from orchestrator.app import identify as identify_verb
from orchestrator.cli.common import console, console_err, json_option, print_json
from orchestrator.cli.plan_cmds import one_line
from orchestrator.errors import ExitCode


def _value(v) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x) for x in v) if v else "-"
    if isinstance(v, dict):
        return "; ".join(f"{k}={_value(x)}" for k, x in v.items()) if v else "-"
    return "unknown" if v is None else str(v)


def render_identified(found) -> None:
    out = console()
    if found.error:
        console_err().print(Text(f"{one_line(found.path)}: {one_line(found.error)}", style="red"), highlight=False)
        return
    out.print(Text(one_line(found.path), style="bold"))
    for depth, layer in enumerate(found.layers):
        pad = "  " * (depth + 1)
        out.print(Text(f"{pad}{layer.kind}: {one_line(layer.summary)}"))
        for key, value in layer.facts.items():
            if value is None and key in layer.unknown:
                continue
            out.print(Text(f"{pad}  {key}: {one_line(_value(value))}", style="dim"))
        for key, why in layer.unknown.items():
            out.print(Text(f"{pad}  {key}: unknown ({one_line(why)})", style="yellow"))
        for problem in layer.problems:
            out.print(Text(f"{pad}  ! {one_line(problem)}", style="red"))


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@json_option
def identify(files, as_json):
    """Say what each FILE is from its bytes alone, without loading TensorRT or any runtime: a TensorRT or
    TensorRT-RTX plan (builder version; what the header says about compute capabilities and compatibility), an
    Ultralytics export (its JSON metadata prefix and the plan behind it), an ONNX Runtime EPContext model (its
    attributes and the engine inside), an onnxruntime-optimized ONNX, a plain ONNX. What the bytes do not hold is
    printed as unknown, with why; cut-off and unrecognized files say so.

    Exit status: 0 when every file could be read (whatever it is); 1 when one could not."""
    found = identify_verb.identify(list(files))
    if as_json:
        print_json({"files": [f.to_json() for f in found]})
    else:
        for f in found:
            render_identified(f)
    if any(f.error for f in found):
        raise SystemExit(int(ExitCode.ERROR))
