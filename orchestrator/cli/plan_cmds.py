"""validate, plan, graph, schema."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.markup import escape
from rich.table import Table

from orchestrator.app import pipeline
from orchestrator.app.project import load_manifests, load_project
from orchestrator.atomic import write_json_atomic
from orchestrator.cli.common import cache_option, console, json_option, manifests_argument, print_json
from orchestrator.cli.render.graph import render
from orchestrator.core.plan import SYMBOL, Plan, plan_from_json
from orchestrator.errors import ExitCode, PlanError
from orchestrator.manifest import schema as manifest_schema

_STYLE = {"build": "green", "rebuild": "yellow", "up-to-date": "dim", "blocked": "red"}


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


def render_plan_table(plan: Plan) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("")
    table.add_column("cell", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("build key", no_wrap=True)
    table.add_column("why", overflow="fold")
    for e in plan.entries:
        why = e.reason if e.status != "rebuild" else "; ".join(e.changes[:3]) + (" …" if len(e.changes) > 3 else "")
        table.add_row(SYMBOL[e.status], escape(e.address), f"[{_STYLE[e.status]}]{e.status}[/]", e.build_key[:12],
                      escape(why))
    return table


def render_plan_markdown(plan: Plan) -> str:
    lines = [f"### {plan.summary()}", "", "| | cell | status | build key | why |", "|---|---|---|---|---|"]
    for e in plan.entries:
        why = (e.reason if e.status != "rebuild" else "; ".join(e.changes[:3])).replace("|", "\\|")
        lines.append(f"| {SYMBOL[e.status]} | `{e.address}` | {e.status} | `{e.build_key[:12]}` | {why} |")
    return "\n".join(lines) + "\n"


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
            console().print(f"[green]ok[/] {escape(os.path.relpath(m.file))}: {len(m.models)} models, "
                            f"{len(m.targets)} targets")


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
    project = load_project(manifests, cache_dir=cache_dir)
    the_plan = pipeline.plan(project, max_cells_per_shard=max_cells_per_shard)
    if out:
        write_json_atomic(out, the_plan.to_json())
    if as_json:
        print_json(the_plan.to_json())
    elif markdown:
        sys.stdout.write(render_plan_markdown(the_plan))
    else:
        console().print(render_plan_table(the_plan))
        console().print(f"\n[bold]{the_plan.summary()}[/]")
        if out:
            console().print(f"saved to {escape(out)} ({len(the_plan.shards)} shard(s))")
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


@click.command()
def schema():
    """Print the manifest JSON Schema (draft 2020-12) for editors and CI."""
    sys.stdout.write(json.dumps(manifest_schema(), indent=2) + "\n")


