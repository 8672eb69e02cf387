"""build, gate, doctor."""

from __future__ import annotations

import os
import sys
import time

import click

from orchestrator.app import pipeline as api
from orchestrator.errors import GateFailed
from orchestrator.run.executor import RunSummary
from orchestrator.hardware import detect
from orchestrator.cli.common import cache_option, console, console_err, json_option, manifests_argument, print_json, \
    require_manifests
from orchestrator.cli.plan_cmds import read_plan_file
from orchestrator.cli.render.progress import ProgressView, render_summary

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


def _finish(summary: RunSummary, verb: str, as_json: bool, project, failed_gates: int = 0) -> None:
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
        line = render_summary(summary, verb)
        console().print(line + (f"; {failed_gates} gate(s) FAILED" if failed_gates else ""))
    if summary.interrupted:
        sys.exit(130)
    if not summary.ok:
        sys.exit(1)
    if failed_gates:
        sys.exit(GateFailed.exit_code)  # a gate ran and the engine failed it


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
@manifests_argument
@click.option("--plan", "plan_file", type=click.Path(dir_okay=False, exists=True), help="Gate from a saved plan.")
@click.option("--shard", help="Only this shard of the plan.")
@click.option("--verify-runner", is_flag=True,
              help="With --shard: fail unless this runner can run every engine of the shard (dedicated gate "
                   "runners); without it, engines this runner cannot run are reported pending.")
@click.option("--only", multiple=True, metavar="ADDR", help="Only these cell addresses (repeatable).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Parallel gates (benchmarks share the machine: keep 1 for honest timings).")
@click.option("-q", "--quiet", is_flag=True)
@json_option
@cache_option
def gate(manifests, plan_file, shard, only, verify_runner, jobs, quiet, as_json, cache_dir):
    """Run parity and benchmark gates on built engines; engines this runner cannot run stay pending.

    Exit code 3 when a gate ran and the engine failed it."""
    project, the_plan = _load(manifests, plan_file, cache_dir)
    fingerprint = detect()
    if shard and verify_runner:
        api.verify_shard_runner(project, the_plan, shard, fingerprint, role="gate")
    cells = api.cells_in_scope(project, the_plan, shard=shard, only=only)
    with ProgressView(2 * len(cells), "gate", quiet=quiet or as_json) as view:
        summary = api.gate(project, the_plan, shard=shard, only=only, jobs=jobs, fingerprint=fingerprint,
                           on_event=view.event)
    failed = [r for r in summary.reports if r.status in ("done", "cached") and r.data.get("status") == "failed"]
    if failed and not as_json:
        for r in failed:
            console_err().print(f"[red]gate failed[/] {r.node}: verdict in {r.dir}", highlight=False)
    _finish(summary, "gate", as_json, project, failed_gates=len(failed))


@click.command()
@json_option
@click.option("--labels", default="", help="Comma-separated runner labels of this machine (for shard checks).")
def doctor(as_json, labels):
    """Show this runner's fingerprint and what it can build and run."""
    from orchestrator.app.doctor import diagnose, render_doctor

    fingerprint = detect(tuple(x for x in labels.split(",") if x))
    report = diagnose(fingerprint)
    if as_json:
        print_json(report)
    else:
        render_doctor(report, console())


COMMANDS = [build, gate, doctor]
