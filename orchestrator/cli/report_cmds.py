"""report: the matrix grid as one static HTML page, JSON, and a terminal table."""

from __future__ import annotations

import click

from orchestrator.app import pipeline as api
from orchestrator.cli.common import cache_option, console, json_option, manifests_argument, print_json


@click.command()
@manifests_argument
@click.option("-o", "--out", default=".orchestrate/report.html", show_default=True,
              type=click.Path(dir_okay=False), help="Where to write the HTML page.")
@click.option("--title", default=None)
@json_option
@cache_option
def report(manifests, out, title, as_json, cache_dir):
    """Write the matrix report (model × precision rows, target columns) with gates' numbers and plots."""
    from orchestrator.cli.render.report import render_report, report_json, summary_table

    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    project = api.load_project(manifests, cache_dir=cache_dir)
    cells = api.report_cells(project)
    path = render_report(cells, out, title=title or f"Engine matrix — {project.manifests[0].project}")
    if as_json:
        print_json({**report_json(cells), "html": str(path)})
        return
    console().print(summary_table(cells))
    console().print(f"wrote {path}")


COMMANDS = [report]
