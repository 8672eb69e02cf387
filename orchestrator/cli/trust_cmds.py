"""identify (what a model or engine file is, from its bytes) and adopt (gate and register a foreign engine)."""

from __future__ import annotations

import click
from rich.text import Text

from orchestrator.app import adopt as adopt_verb
from orchestrator.app import identify as identify_verb
from orchestrator.app.project import load_project
from orchestrator.cli.common import (
    cache_option,
    console,
    console_err,
    json_option,
    manifests_argument,
    print_json,
    require_manifests,
)
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


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@manifests_argument
@click.option("--model", required=True, help="The manifest's model the engine was built from (its ONNX is the parity "
                                             "reference).")
@click.option("--target", required=True, help="The manifest's target whose runtime runs the engine.")
@click.option("--precision", default=None, help="The cell's precision, when the model has several on that target.")
@click.option("--profile", default=None, help="The cell's profile set, when there are several.")
@click.option("--as-cell", "as_cell", default=None, metavar="ADDR",
              help="Stand for this plan cell (its address and build key): only when the builder version and compute "
                   "capabilities read from the engine are the cell's. Without it the engine never satisfies a cell.")
@json_option
@cache_option
def adopt(file, manifests, model, target, precision, profile, as_cell, as_json, cache_dir):
    """Gate an engine built elsewhere (a TensorRT or TensorRT-RTX plan, an Ultralytics export, an EPContext model, an
    onnxruntime-optimized ONNX) like one built here — parity against the model's ONNX on the manifest's parity data,
    the task metric, the benchmark where this runner can run it — and register it in the manifest's registry, marked
    adopted, under its own address (…@adopted-<digest>) unless pinned with --as-cell.

    Exit status: 0 registered (gates passed, or pending where the manifest allows ungated publishing); 3 a gate
    failed (the failing output named; nothing registered); 1 it cannot be gated here and the manifest does not allow
    ungated publishing, or another error; 2 a usage error (not an engine, wrong target, --as-cell mismatch)."""
    project = load_project(require_manifests(manifests), cache_dir=cache_dir)
    result = adopt_verb.adopt(project, file, model=model, target=target, precision=precision, profile=profile,
                              as_cell=as_cell)
    code = ExitCode.GATE_FAILED if result.status == "failed" else ExitCode.OK
    if as_json:
        print_json({**result.to_json(), "exit_code": int(code)})
        raise SystemExit(int(code))
    layers = " > ".join(x.kind for x in result.identified.layers)
    if result.status == "failed":
        console_err().print(Text(f"✗ {one_line(str(file))} ({layers}) refused for {one_line(result.address)}: "
                                 "a gate failed; nothing registered", style="red"), highlight=False)
        for r in result.reasons:
            console_err().print(Text(f"  {one_line(r)}", style="red"), highlight=False)
        raise SystemExit(int(code))
    console().print(Text(f"adopted {one_line(str(file))} ({layers}) as {one_line(result.address)}: gates "
                         f"{result.gates}, {result.stored.digest[:19] if result.stored else ''}"
                         + (" (pinned to the cell)" if result.pinned else "")))
    for r in result.reasons:
        console_err().print(Text(f"  {one_line(r)}", style="yellow"), highlight=False)
