"""gate: parity and benchmark gates on built engines."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from orchestrator import plugins
from orchestrator.app import gating, pipeline
from orchestrator.cli.build_cmds import finish, load
from orchestrator.cli.common import cache_option, console_err, json_option, manifests_argument
from orchestrator.cli.render.progress import ProgressView
from orchestrator.core.plan import RUNNER_WORK
from orchestrator.run.executor import RunSummary


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
    project, the_plan = load(manifests, plan_file, cache_dir)
    cells = pipeline.cells_in_scope(project, the_plan, shard=shard, only=only, statuses=RUNNER_WORK)
    fingerprint = plugins.fingerprint() if (cells or (shard and verify_runner)) else None
    if shard and verify_runner and fingerprint is not None:
        pipeline.verify_shard_runner(project, the_plan, shard, fingerprint, role="gate")
    with ProgressView(2 * len(cells), "gate", quiet=quiet or as_json) as view:
        summary = gating.gate(project, the_plan, shard=shard, only=only, jobs=jobs, fingerprint=fingerprint,
                                on_event=view.event)
    failed = gating.failed_gates(summary)
    noisy = gating.noisy_gates(summary)
    if not as_json:
        render_gate_failures(summary, failed, noisy)
    return finish(summary, "gate", as_json, project, failed_gates=len(failed), noisy_gates=len(noisy))


def render_gate_failures(summary: RunSummary, failed: list[str], noisy: list[str]) -> None:
    """Per failed (or noisy) gate: a red ✗, every reason (which output or shape, which metric, the value against
    its threshold), where the verdict and the log are."""
    by_node = {r.node: r for r in summary.reports}
    out = console_err()
    for node in failed:
        report = by_node[node]
        out.print(f"[red]✗ gate failed[/] {escape(node)}", highlight=False)
        for reason in report.data.get("reasons") or ["(no reason recorded: see the verdict)"]:
            out.print(f"    {escape(str(reason))}", highlight=False)
        if report.dir:
            out.print(f"  verdict: {escape(str(Path(report.dir) / str(report.data.get('verdict', ''))))}",
                      highlight=False)
        if report.log:
            out.print(f"  log: {escape(report.log)}", highlight=False)
    for node in noisy:
        report = by_node[node]
        out.print(f"[yellow]~ benchmark noisy[/] {escape(node)}: no verdict (not cached; publish treats it as "
                  "pending)", highlight=False)
        for reason in report.data.get("reasons") or []:
            out.print(f"    {escape(str(reason))}", highlight=False)
        if report.log:
            out.print(f"  log: {escape(report.log)}", highlight=False)
