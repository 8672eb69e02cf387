"""report: the matrix grid as one static HTML page, JSON, and a terminal table."""

from __future__ import annotations

import click
from rich.markup import escape

from orchestrator.app.matrix import report_cells
from orchestrator.app.project import load_project
from orchestrator.app.upgrade import rebuild_cells
from orchestrator.cli.common import cache_option, console, json_option, manifests_argument, print_json
from orchestrator.cli.render.report import render_report, report_json, summary_table


@click.command()
@manifests_argument
@click.option("-o", "--out", default=".orchestrate/report.html", show_default=True,
              type=click.Path(dir_okay=False), help="Where to write the HTML page.")
@click.option("--title", default=None)
@click.option("--upgrade-to", default=None, metavar="STACK",
              help="The upgrade rehearsal's rebuilt cells instead (`upgrade-check --to STACK --build`): each with the "
                   "drift gate against the engine it replaces.")
@click.option("--upgrade-from", default=None, metavar="STACK", help="With --upgrade-to: upgrade-check's --from.")
@json_option
@cache_option
def report(manifests, out, title, upgrade_to, upgrade_from, as_json, cache_dir):
    """Write the matrix report (model × precision rows, target columns) with gates' numbers and plots."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    if upgrade_from and not upgrade_to:
        raise click.UsageError("--upgrade-from goes with --upgrade-to")
    project = load_project(manifests, cache_dir=cache_dir)
    if upgrade_to:
        cells, words = rebuild_cells(project, to=upgrade_to, from_=upgrade_from)
        title = title or f"Upgrade rehearsal — {words}"
    else:
        cells = report_cells(project)
    path = render_report(cells, out, title=title or f"Engine matrix — {project.manifests[0].project}")
    if as_json:
        print_json({**report_json(cells), "html": str(path)})
        return
    console().print(summary_table(cells))
    console().print(f"wrote {escape(str(path))}")
