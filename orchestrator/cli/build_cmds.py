"""build, gate, doctor."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
from rich.markup import escape

from orchestrator import plugins
from orchestrator.app import pipeline
from orchestrator.app.doctor import diagnose
from orchestrator.app.project import Project, load_project
from orchestrator.atomic import write_json_atomic
from orchestrator.cli.answers import remember
from orchestrator.cli.common import (
    cache_option,
    console,
    console_err,
    json_option,
    long_lived,
    manifests_argument,
    print_json,
    require_manifests,
)
from orchestrator.cli.plan_cmds import read_plan_file
from orchestrator.cli.render.doctor import render_doctor
from orchestrator.cli.render.progress import ProgressView, render_summary
from orchestrator.contracts.store import IndexReader
from orchestrator.core.plan import Plan
from orchestrator.errors import ExitCode
from orchestrator.run.executor import RunSummary

_jobs = click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
                     help="Parallel workers for CPU-bound nodes [default: number of cores].")


def load(manifests: tuple[str, ...], plan_file: str | None, cache_dir: str | None) -> tuple[Project, Plan]:
    project, the_plan, _ = load_planned(manifests, plan_file, cache_dir)
    return project, the_plan


def load_planned(manifests: tuple[str, ...], plan_file: str | None, cache_dir: str | None
                 ) -> tuple[Project, Plan, IndexReader | None]:
    """The project and its plan: the saved one (checked current), or planned now against the registry's index
    (returned too; None for a saved plan)."""
    paths = require_manifests(manifests, plan_file)
    with long_lived():
        project = load_project(paths, cache_dir=cache_dir)
        if plan_file:
            saved = read_plan_file(plan_file)
            pipeline.check_plan_current(project, saved)
            return project, saved, None
        index = pipeline.registry_index(project)
        return project, pipeline.plan(project, index), index


def run_record(summary: RunSummary, project: Project) -> dict:
    """The run summary as recorded under ``runs/``, each node with its key: the report reads the last outcome
    of a node from these records, and a key tells a failure of the current inputs from one of older inputs."""
    data = summary.to_json()
    for node in data["nodes"]:
        graph_node = project.graph.nodes.get(node["node"])
        if graph_node is not None:
            node["key"] = graph_node.key
    return data


def record_run(summary: RunSummary, verb: str, project: Project) -> Path:
    """Write the run summary under ``runs/`` (what `plan` and `report` read back); returns its path."""
    record = project.workspace.root / "runs" / f"{verb}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json"
    write_json_atomic(record, run_record(summary, project))
    return record


def finish(summary: RunSummary, verb: str, as_json: bool, project: Project, failed_gates: int = 0,
           noisy_gates: int = 0) -> ExitCode:
    """Record the run, render it, and say how the command exits."""
    record = record_run(summary, verb, project)
    data = run_record(summary, project)
    if as_json:
        print_json({**data, "summary_file": str(record)})
    else:
        for r in summary.reports:
            if r.status == "failed":
                console_err().print(f"[red]failed[/] {escape(r.node)}: {escape(r.reason)}", highlight=False)
                if r.log:
                    console_err().print(f"  log: {escape(r.log)}", highlight=False)
        line = render_summary(summary, verb, failed_gates=failed_gates, noisy_gates=noisy_gates)
        style = "red" if (summary.interrupted or not summary.ok or failed_gates) else None
        console().print(escape(line), style=style, highlight=False)
    if summary.interrupted:
        return ExitCode.INTERRUPTED
    if not summary.ok:
        return ExitCode.ERROR
    if failed_gates:
        return ExitCode.GATE_FAILED  # a gate ran and the engine failed it
    return ExitCode.OK


@click.command()
@manifests_argument
@click.option("--plan", "plan_file", type=click.Path(dir_okay=False, exists=True),
              help="Build from a saved plan (refused if the manifests or registry moved since).")
@click.option("--shard", help="Only this shard of the plan (one runner label set); verifies this runner first.")
@click.option("--only", multiple=True, metavar="ADDR", help="Only these cell addresses (repeatable).")
@_jobs
@click.option("--keep-going", is_flag=True, help="Keep building unrelated nodes after a failure.")
@click.option("-q", "--quiet", is_flag=True, help="No per-node lines.")
@json_option
@cache_option
def build(manifests, plan_file, shard, only, jobs, keep_going, quiet, as_json, cache_dir):
    """Build the engines the plan calls for (resumable: finished nodes are never redone)."""
    project, the_plan, index = load_planned(manifests, plan_file, cache_dir)
    total = len(pipeline.build_scope(project, the_plan, shard=shard, only=only))
    fingerprint = plugins.fingerprint() if (total or shard) else None
    if shard and fingerprint is not None:
        pipeline.verify_shard_runner(project, the_plan, shard, fingerprint, role="build")
    with ProgressView(total, "build", quiet=quiet or as_json) as view:
        summary = pipeline.build(project, the_plan, shard=shard, only=only, jobs=jobs, keep_going=keep_going,
                                 fingerprint=fingerprint, on_event=view.event)
    code = finish(summary, "build", as_json, project)
    if index is not None and not total and not shard and not only and code == ExitCode.OK and not summary.reports:
        # nothing to do: while nothing it read moves, the same command is answered without loading anything
        remember(project, index, outcomes=False,
                 record={"verb": "build", "data": run_record(summary, project), "json": bool(as_json)})
    return code


@click.command()
@json_option
@click.option("--labels", default="", help="Comma-separated runner labels of this machine (for shard checks).")
def doctor(as_json, labels):
    """Show this runner's fingerprint and what it can build and run."""
    fingerprint = plugins.fingerprint(tuple(x for x in labels.split(",") if x))
    report = diagnose(fingerprint)
    if as_json:
        print_json(report)
    else:
        render_doctor(report, console())


