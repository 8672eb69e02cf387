"""build, gate, doctor."""

from __future__ import annotations

import os
import sys
import time

import click

from .. import api
from ..execute import RunSummary
from ..hardware import detect
from .common import cache_option, console, console_err, json_option, manifests_argument, print_json, \
    require_manifests
from .plan_cmds import read_plan_file
from .progress import ProgressView, render_summary

_jobs = click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
                     help="Parallel workers for CPU-bound nodes [default: number of cores].")


def _load(manifests, plan_file, cache_dir):
    paths = require_manifests(manifests, plan_file)
    project = api.load_project(paths, cache_dir=cache_dir)
    if plan_file:
        saved = read_plan_file(plan_file)
        api.check_plan_current(project, saved)
        return project, saved
    return project, api.plan(project)


def _finish(summary: RunSummary, verb: str, as_json: bool, project) -> None:
    record = project.workspace.root / "runs" / f"{verb}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json"
    api.write_json_atomic(record, summary.to_json())
    if as_json:
        print_json({**summary.to_json(), "summary_file": str(record)})
    else:
        for r in summary.reports:
            if r.status == "failed":
                console_err().print(f"[red]failed[/] {r.node}: {r.reason}", highlight=False)
                if r.log:
                    console_err().print(f"  log: {r.log}", highlight=False)
        console().print(render_summary(summary, verb))
    if summary.interrupted:
        sys.exit(130)
    if not summary.ok:
        sys.exit(1)


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
    project, the_plan = _load(manifests, plan_file, cache_dir)
    fingerprint = detect()
    if shard:
        api.verify_shard_runner(project, the_plan, shard, fingerprint, role="build")
    cells = api.cells_in_scope(project, the_plan, shard=shard, only=only)
    total = len(api._closure(project.graph, [f"build:{c.address}" for c in cells]))
    with ProgressView(total, "build", quiet=quiet or as_json) as view:
        summary = api.build(project, the_plan, shard=shard, only=only, jobs=jobs, keep_going=keep_going,
                            fingerprint=fingerprint, on_event=view.event)
    _finish(summary, "build", as_json, project)


@click.command()
@json_option
@click.option("--labels", default="", help="Comma-separated runner labels of this machine (for shard checks).")
def doctor(as_json, labels):
    """Show this runner's fingerprint and what it can build and run."""
    from ..doctor import diagnose, render_doctor

    fingerprint = detect(tuple(x for x in labels.split(",") if x))
    report = diagnose(fingerprint)
    if as_json:
        print_json(report)
    else:
        render_doctor(report, console())


COMMANDS = [build, doctor]
