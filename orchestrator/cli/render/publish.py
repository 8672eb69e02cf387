"""What a publish did, per cell: published (address, digest, store reference) and held back (address, why).

Two forms: lines for the terminal (rich Text: addresses and reasons are data, never markup) and a GitHub-flavoured
markdown job summary (``publish --summary "$GITHUB_STEP_SUMMARY"``), every user- or tool-given string escaped
with the same helpers as ``plan --markdown``.
"""

from __future__ import annotations

from rich.text import Text

from orchestrator.app.pipeline import PublishedCell, PublishReport
from orchestrator.cli.plan_cmds import md_code, md_text, one_line

_GATES = {"passed": "passed", "pending": "ungated (the manifest allows it)", "failed": "failed (forced)"}


def headline(report: PublishReport, seconds: float, *, interrupted: bool = False) -> str:
    """The closing line (plain text). Never "ok" while a cell was held back."""
    state = "interrupted" if interrupted else ("FAILED" if report.red else "ok")
    reused = sum(1 for p in report.published if p.reused_from is not None)
    parts = [f"{len(report.published)} published" + (f" ({reused} as a new model version, engine reused)"
                                                      if reused else ""), f"{len(report.held_back)} held back"]
    if report.already:
        parts.append(f"{len(report.already)} already in the store (nothing new)")
    if report.up_to_date:
        parts.append(f"{len(report.up_to_date)} up to date")
    return f"publish {state}: {', '.join(parts)} in {seconds:.1f}s"


def _version(p: PublishedCell) -> str:
    return f"{p.version} (engine of {p.reused_from} reused)" if p.reused_from else p.version


def held_back_lines(report: PublishReport) -> list[Text]:
    return [Text.assemble(("held back ", "red" if h.why != "blocked" else "yellow"), one_line(h.address),
                          (" — ", "dim"), one_line(h.text())) for h in report.held_back]


def render_markdown(report: PublishReport, seconds: float, *, interrupted: bool = False) -> str:
    """The job summary: a headline, then one table per group (a group with no cells is left out)."""
    lines = [f"### {md_text(headline(report, seconds, interrupted=interrupted))}", ""]
    if report.published:
        lines += ["#### Published", "", "| cell | version | digest | store reference | gates |",
                  "|---|---|---|---|---|"]
        lines += [f"| {md_code(p.address)} | {md_text(_version(p))} | {md_code(p.digest)} | {md_code(p.location)} | "
                  f"{md_text(_GATES.get(p.gates, p.gates))} |" for p in report.published]
        lines.append("")
    if report.already:
        lines.append(f"{len(report.already)} cell(s) were already in the store (another publisher was first); "
                     "nothing new landed for them.")
        lines.append("")
    if report.held_back:
        lines += ["#### Held back", "", "| cell | why |", "|---|---|"]
        lines += [f"| {md_code(h.address)} | {md_text(h.text())} |" for h in report.held_back]
        lines.append("")
    if report.up_to_date:
        lines.append(f"{len(report.up_to_date)} cell(s) already up to date in the store (not republished).")
        lines.append("")
    if not (report.published or report.held_back or report.up_to_date or report.already):
        lines += ["Nothing to publish.", ""]
    return "\n".join(lines) + "\n"
