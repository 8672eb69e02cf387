"""validate, plan, graph, schema."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping

import click
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from orchestrator.app import pipeline
from orchestrator.app.explain import explain as explain_cell
from orchestrator.app.pipeline import LocalOutcome
from orchestrator.app.project import load_manifests, load_project
from orchestrator.atomic import write_json_atomic
from orchestrator.cli.answers import remember
from orchestrator.cli.common import cache_option, console, json_option, long_lived, manifests_argument, print_json
from orchestrator.cli.render.graph import render
from orchestrator.core.plan import SYMBOL, Plan, PlanEntry, plan_from_json
from orchestrator.core.serving import resolve_serving
from orchestrator.errors import ExitCode, PlanError
from orchestrator.manifest import schema as manifest_schema

_STYLE = {"build": "green", "rebuild": "yellow", "refit": "magenta", "regate": "cyan", "publish": "green",
          "up-to-date": "dim", "blocked": "red"}
_LABEL = {"regate": "re-gate"}  # how a status reads in tables (JSON keeps the status names)
# Everything in a plan row that came from a manifest, a registry or a log is data, never markup: rich cells are
# Text (no [markup], no :emoji:), control characters are written as escapes (a newline cannot start a forged
# row), and markdown escapes its punctuation and HTML.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
_MD_PUNCT = re.compile(r"([\\`*_\[\]{}()#+!|~:$])")
_MD_CODE_SAFE = re.compile(r"^[A-Za-z0-9._/@+=,-]*$")


def one_line(text: str) -> str:
    """``text`` on one line: control characters (newlines, escapes, bidi overrides) as visible escapes."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def md_text(text: str) -> str:
    """Plain text for a GitHub-flavoured markdown table cell: no formatting, link, emoji, HTML or new cell."""
    text = one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCT.sub(r"\\\1", text)


def md_code(text: str) -> str:
    """A code span when the text cannot break out of one, else escaped plain text."""
    return f"`{text}`" if _MD_CODE_SAFE.match(text) else md_text(text)


def read_plan_file(path: str) -> Plan:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise PlanError(f"cannot read plan file {path}: {e.strerror}",
                        hint="create one with `orchestrate plan MANIFEST --out plan.json`") from e
    except ValueError as e:
        raise PlanError(f"plan file {path} is not JSON: {e}", hint="re-create it with `orchestrate plan --out`") from e
    return plan_from_json(data)


MAX_CHANGES = 5  # changes listed per cell; the rest are counted (`explain ADDR` lists them all)
WIDE = 120  # columns from which the plan is one table row per cell; narrower, each cell's reasons go below it


def why_lines(e: PlanEntry, local: Mapping[str, LocalOutcome | None]) -> list[str]:
    """What the plan says about a cell, one line per change (rebuild, re-gate) and one for its last outcome here."""
    if e.status in ("rebuild", "refit", "regate") and e.changes:
        lines = list(e.changes[:MAX_CHANGES])
        if len(e.changes) > MAX_CHANGES:
            lines.append(f"… and {len(e.changes) - MAX_CHANGES} more (`orchestrate explain {e.address}`)")
    else:
        lines = [e.reason] if e.reason else []
    outcome = local.get(e.address)
    if outcome is not None and e.status != "up-to-date":
        lines.append(outcome.text())
    return [one_line(line) for line in lines]


def _why(e: PlanEntry, local: Mapping[str, LocalOutcome | None]) -> str:
    """The reasons on one line (the markdown table's cell)."""
    return "; ".join(why_lines(e, local))


def _status(e: PlanEntry) -> Text:
    return Text(_LABEL.get(e.status, e.status), style=_STYLE[e.status])


def render_plan_table(plan: Plan, local: Mapping[str, LocalOutcome | None] | None = None,
                      width: int = WIDE) -> RenderableType:
    """The plan for a terminal ``width`` columns wide; ``local``: each cell's last outcome on this machine
    (``pipeline.local_outcomes``). Wide: a table, one row per cell, its reasons one per line. Narrow: each cell on
    a line (symbol, address, status) with its reasons indented below, so no column is squeezed to a few letters."""
    local = local or {}
    if width >= WIDE:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("")
        table.add_column("cell", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("build key", no_wrap=True)
        table.add_column("why", overflow="fold")
        for e in plan.entries:
            table.add_row(SYMBOL[e.status], Text(one_line(e.address)), _status(e), Text(one_line(e.build_key[:12])),
                          Text("\n".join(why_lines(e, local))))
        return table
    rows: list[RenderableType] = []
    # addresses and statuses aligned while that leaves room (a very long address is not padded to)
    address_w = min(max((len(one_line(e.address)) for e in plan.entries), default=0), max(width - 20, 20))
    status_w = max((len(_status(e)) for e in plan.entries), default=0)
    for e in plan.entries:
        status = _status(e)
        status.pad_right(status_w - len(status))
        head = Text.assemble(f"{SYMBOL[e.status]} ", one_line(e.address).ljust(address_w), "  ", status)
        why = why_lines(e, local)
        if len(why) == 1 and head.cell_len + 2 + len(why[0]) <= width:  # one short reason: beside its cell
            rows.append(Text.assemble(head, "  ", why[0]))
            continue
        head.rstrip()
        rows.append(head)
        rows.extend(Text(f"    {line}", overflow="fold") for line in why)
    return Group(*rows)


def render_plan_markdown(plan: Plan, local: Mapping[str, LocalOutcome | None] | None = None) -> str:
    """The plan as a GitHub-flavoured markdown table (a job summary): every user-given text escaped."""
    local = local or {}
    lines = [f"### {md_text(plan.summary())}", "", "| | cell | status | build key | why |", "|---|---|---|---|---|"]
    for e in plan.entries:
        status = md_text(_LABEL.get(e.status, e.status))
        lines.append(f"| {md_text(SYMBOL[e.status])} | {md_code(e.address)} | {status} | "
                     f"{md_code(e.build_key[:12])} | {md_text(_why(e, local))} |")
    return "\n".join(lines) + "\n"


def serving_rows(project) -> list[dict]:
    """Each target that names a serving stack (``serve: triton:25.01``) and what it resolved to: the exact
    TensorRT (the target's builder version), CUDA, the image and the table row's source (core.serving)."""
    rows = []
    for manifest in project.manifests:
        for target in manifest.targets:
            if target.serve:
                stack = resolve_serving(target.serve)
                rows.append({"target": target.name, "serve": stack.name, "tensorrt": stack.tensorrt,
                             "builder_version": target.builder_version, "cuda": stack.cuda, "image": stack.image,
                             "status": stack.status, "source": stack.source, "note": stack.note})
    return rows


def plan_json(plan: Plan, local: Mapping[str, LocalOutcome | None]) -> dict:
    """The plan's JSON with each cell's ``local`` outcome added (None: never built or tried on this machine)."""
    data = plan.to_json()
    for cell in data["cells"]:
        outcome = local.get(cell["address"])
        cell["local"] = outcome.to_json() if outcome is not None else None
    return data


@click.command()
@manifests_argument
@json_option
def validate(manifests, as_json):
    """Check manifests (schema + semantics + model files); report every problem at once."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    loaded = load_manifests(list(manifests))
    if as_json:
        print_json({"valid": True, "manifests": [m.file for m in loaded],
                    "models": sum(len(m.models) for m in loaded), "targets": sum(len(m.targets) for m in loaded)})
    else:
        for m in loaded:
            console().print(Text.assemble(("ok", "green"), f" {one_line(os.path.relpath(m.file))}: "
                                          f"{len(m.models)} models, {len(m.targets)} targets"))


@click.command()
@manifests_argument
@json_option
@click.option("--out", "out", type=click.Path(dir_okay=False), help="Save the plan (with the registry state) here.")
@click.option("--detailed-exitcode", is_flag=True, help="Exit 0: no changes, 1: error, 2: changes to build.")
@click.option("--markdown", is_flag=True, help="A markdown table (for $GITHUB_STEP_SUMMARY).")
@click.option("--max-cells-per-shard", type=int, default=0, show_default=True,
              help="Split a runner label set's work into chunks of at most this many cells (0: one shard per set).")
@cache_option
def plan(manifests, as_json, out, detailed_exitcode, markdown, max_cells_per_shard, cache_dir):
    """Show what would be built, what is up to date, and why the rest must be rebuilt."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    with long_lived():
        project = load_project(manifests, cache_dir=cache_dir)
        index = pipeline.registry_index(project)
        the_plan = pipeline.plan(project, index, max_cells_per_shard=max_cells_per_shard)
        local = pipeline.local_outcomes(project)
    if out:
        write_json_atomic(out, plan_json(the_plan, local))
    serving = serving_rows(project)
    if as_json:
        print_json({**plan_json(the_plan, local), "serving": serving})
    elif markdown:
        sys.stdout.write(render_plan_markdown(the_plan, local))
    else:
        # wrapped at the terminal's width (the console soft-wraps other output): reasons stay under their cell
        console().print(render_plan_table(the_plan, local, console().width), soft_wrap=False)
        for row in serving:
            console().print(Text(f"target {one_line(row['target'])}: serve {row['serve']} -> TensorRT "
                                 f"{row['tensorrt']}, CUDA {row['cuda'] or '?'}"
                                 + (f", {row['image']}" if row["image"] else "") + f" ({row['status']}: "
                                 f"{one_line(row['source'])})"))
        if the_plan.registry_note:
            console().print(Text(f"\nregistry: {one_line(the_plan.registry_note)}"))
        console().print(f"\n[bold]{the_plan.summary()}[/]")
        if out:
            console().print(Text(f"saved to {one_line(out)} ({len(the_plan.shards)} shard(s))"))
    if not out:  # a saved plan file is a side effect the fast path does not repeat
        remember(project, index, outcomes=True)
    if detailed_exitcode and the_plan.has_changes:
        return ExitCode.CHANGES
    return ExitCode.OK


@click.command()
@manifests_argument
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot", "json"]), default="mermaid", show_default=True)
@cache_option
def graph(manifests, fmt, cache_dir):
    """Print the build graph (prepare, transform, build, gates, publish) as mermaid, dot or json."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    project = load_project(manifests, cache_dir=cache_dir)
    sys.stdout.write(render(project.graph, fmt).rstrip("\n") + "\n")


def _tree(label: str, value: object) -> Tree:
    """A nested dict/list as a rich tree; every key and value is data (Text), never markup."""
    tree = Tree(Text(one_line(label), style="bold"))

    def add(node: Tree, key: str, v: object) -> None:
        if isinstance(v, dict) and v:
            branch = node.add(Text(one_line(key)))
            for k, sub in v.items():
                add(branch, str(k), sub)
        elif isinstance(v, list) and v and any(isinstance(x, (dict, list)) for x in v):
            branch = node.add(Text(one_line(key)))
            for i, sub in enumerate(v):
                add(branch, f"[{i}]", sub)
        else:
            node.add(Text.assemble((one_line(key), "cyan"), ": ", one_line(json.dumps(v, ensure_ascii=False))))

    if isinstance(value, dict):
        for k, v in value.items():
            add(tree, str(k), v)
    return tree


@click.command()
@click.argument("address")
@manifests_argument
@json_option
@cache_option
def explain(address, manifests, as_json, cache_dir):
    """Show what ADDRESS's build key and gate keys are made of, and why the plan rebuilds or re-gates it."""
    if not manifests:
        raise click.UsageError("give the cell ADDRESS, then at least one MANIFEST")
    project = load_project(manifests, cache_dir=cache_dir)
    data = explain_cell(project, address)
    if as_json:
        print_json(data)
        return ExitCode.OK
    out = console()
    p = data["plan"]
    status = _LABEL.get(p["status"], p["status"])
    out.print(Text.assemble((SYMBOL[p["status"]] + " ", "bold"), (one_line(address), "bold"), "  ",
                            (status, _STYLE[p["status"]]), f"  {one_line(p['reason'])}"))
    for change in p["changes"][1:]:
        out.print(Text(f"    {one_line(change)}"))
    out.print(_tree(f"build key {data['build_key']}", data["build_inputs"]))
    out.print(_tree(f"gate key {data['gate_key']}", data["gate_inputs"]))
    out.print(_tree("nodes", {nid: f"{n['kind']} {n['key'][:16]}" for nid, n in data["nodes"].items()}))
    return ExitCode.OK


@click.command()
def schema():
    """Print the manifest JSON Schema (draft 2020-12) for editors and CI."""
    sys.stdout.write(json.dumps(manifest_schema(), indent=2) + "\n")


