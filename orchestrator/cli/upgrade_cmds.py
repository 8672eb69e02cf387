"""upgrade-check: rehearse a serving-stack upgrade (docs/deploy.md, "Upgrade rehearsal")."""

from __future__ import annotations

import re

import click
from rich.text import Text

from orchestrator.app import gating, outputs, upgrade
from orchestrator.app.project import load_project
from orchestrator.cli.build_cmds import record_run, run_record
from orchestrator.cli.common import cache_option, console, json_option, manifests_argument, print_json
from orchestrator.cli.gate_cmds import render_gate_failures
from orchestrator.cli.plan_cmds import one_line
from orchestrator.cli.render import upgrade as render
from orchestrator.cli.render.progress import ProgressView
from orchestrator.cli.render.report import render_report, report_json, summary_table
from orchestrator.errors import ExitCode


@click.command("upgrade-check")
@manifests_argument
@click.option("--to", "to", required=True, metavar="STACK",
              help="The new stack: a serving stack (triton:26.03, ngc-tensorrt:25.01, jetpack:7.0: the exact "
                   "TensorRT it ships) or a runtime and release (ort1.31, rtx1.7.1.116, trt10.14.1.48).")
@click.option("--from", "from_", metavar="STACK",
              help="The stack deployed now, in the same forms [default: each engine on the release that built it].")
@click.option("--inventory", type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="What is deployed: the output of `pull --all ... --json` (or a JSON list of several); judged "
                   "instead of the manifests' engines, each on the GPUs it was pulled for.")
@click.option("--gpus", multiple=True, metavar="sm75,sm86",
              help="The deployment's GPUs [default: each engine's own compute capabilities].")
@click.option("--platform", default=None, metavar="OS/ARCH", help="The new stack's platform [default: unchanged].")
@click.option("--lean-runtime", type=click.Path(), default=None, metavar="PATH",
              help="The lean runtime library the deployment loads (version-compatible engines built without it).")
@click.option("--build", "do_build", is_flag=True,
              help="Build and gate the rebuild set here (drift gate against the engines they replace); publishes "
                   "nothing unless --publish.")
@click.option("--publish", is_flag=True, help="With --build: publish the rebuilt engines whose gates pass.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel build workers.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="With --build: the HTML report of the rebuilt cells [default: <cache dir>/upgrade-<to>.html].")
@click.option("--detailed-exitcode", is_flag=True,
              help="Exit 2 when an engine stops loading (a rebuild is needed), 0 when none does, 1 on error.")
@click.option("-q", "--quiet", is_flag=True, help="No per-node lines during --build.")
@json_option
@cache_option
def upgrade_check(manifests, to, from_, inventory, gpus, platform, lean_runtime, do_build, publish, jobs,
                  report_path, detailed_exitcode, quiet, as_json, cache_dir):
    """Rehearse a serving-stack upgrade: which published engines stop loading on the new stack and why, which keep
    loading, the rebuild set as plan entries with a predicted build time; --build builds and gates it.

    \b
    Exit status: 0 (engines that stop loading are listed; --detailed-exitcode: 2 when any does), 1 error, 2 usage;
    with --build also 1 when a rebuild cell failed or cannot be built on this runner (the reason is listed), 3
    when a rebuilt engine failed a gate (the drift gate included), 130 interrupted.
    """
    if not manifests:
        raise click.UsageError("give at least one MANIFEST (the manifests whose engines are deployed)")
    if publish and not do_build:
        raise click.UsageError("--publish publishes what --build rebuilt: pass --build too")
    page = outputs.check_file(report_path, "--report") if report_path else None
    project = load_project(manifests, cache_dir=cache_dir)
    report = upgrade.upgrade_check(project, to=to, from_=from_, inventory=inventory, gpus=gpus, platform=platform,
                                   lean_runtime=lean_runtime)
    code = ExitCode.CHANGES if detailed_exitcode and report.breaking else ExitCode.OK
    data = report.to_json()
    if not as_json:
        if report.engines:
            console().print(render.engines_table(report.engines))
        if report.rebuild:
            console().print(render.rebuild_table(report))
        console().print(Text(one_line(report.summary()), style="bold"))
    if do_build and report.rebuild:
        page = page or project.workspace.root / f"upgrade-{re.sub(r'[^A-Za-z0-9._-]', '_', to)}.html"
        rehearsal = _rehearse(report, publish, jobs, quiet or as_json)
        render_report(rehearsal.cells, page, title=f"Upgrade rehearsal: {report.old.words} -> {report.new.words}")
        runs = {verb: str(record_run(summary, verb, report.retargeted))
                for verb, summary in (("build", rehearsal.build), ("gate", rehearsal.gate),
                                      ("publish", rehearsal.publish_run)) if summary is not None}
        code = rehearsal.exit_code() if rehearsal.exit_code() != ExitCode.OK else code
        data["rehearsal"] = {"cells": list(rehearsal.addresses), "report": report_json(rehearsal.cells),
                             "html": str(page), "not_built": rehearsal.not_built(), "runs": runs,
                             "build": run_record(rehearsal.build, report.retargeted),
                             "gate": run_record(rehearsal.gate, report.retargeted),
                             "published": rehearsal.published.to_json() if rehearsal.published else None,
                             "exit_code": int(rehearsal.exit_code())}
        if not as_json:
            render_gate_failures(rehearsal.gate, gating.failed_gates(rehearsal.gate), [])
            console().print(summary_table(rehearsal.cells))
            for line in render.rehearsal_lines(rehearsal, publish):
                console().print(line)
            console().print(Text(f"wrote {one_line(str(page))}"))
    elif do_build:
        data["rehearsal"] = None  # nothing to rebuild: no engine stops loading on the new stack
        if not as_json:
            console().print("nothing to rebuild: no engine stops loading on the new stack")
    if as_json:
        print_json({**data, "exit_code": int(code)})
    return code


def _rehearse(report: upgrade.UpgradeReport, publish: bool, jobs: int | None, quiet: bool) -> upgrade.Rehearsal:
    total = 3 * len(report.rebuild)  # build and two gates per cell (prepare and transform nodes add to it)
    with ProgressView(total, "upgrade", quiet=quiet) as view:
        return upgrade.rehearse(report, publish=publish, jobs=jobs, on_event=view.event)
