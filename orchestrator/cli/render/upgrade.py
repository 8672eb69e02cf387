"""The upgrade rehearsal in a terminal: every engine judged (stops / keeps / starts / neither / another runtime),
the rebuild set as plan rows with their predicted build time, and (``--build``) the rebuilt cells' gates and
drift against the engines they replace. Every name, address and runtime message is data, never markup."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from orchestrator.app.upgrade import JudgedEngine, Rehearsal, UpgradeReport
from orchestrator.cli.plan_cmds import one_line
from orchestrator.core.plan import SYMBOL as PLAN_SYMBOL
from orchestrator.core.upgrade import SYMBOL

STYLE = {"stops": "red", "keeps": "green", "starts": "cyan", "never": "dim", "other-runtime": "dim",
         "unknown": "yellow"}
LABEL = {"stops": "stops loading", "keeps": "keeps loading", "starts": "starts loading", "never": "loads on neither",
         "other-runtime": "another runtime", "unknown": "not in the registry"}


def engines_table(engines: Sequence[JudgedEngine]) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, title="Engines")
    for name, kw in (("", {}), ("engine", {"no_wrap": True}), ("source", {}), ("status", {"no_wrap": True}),
                     ("GPUs", {}), ("why", {"overflow": "fold"})):
        table.add_column(name, **kw)  # type: ignore[arg-type]
    for e in engines:
        gpus = ",".join(a.gpu for a in e.gpus)
        table.add_row(SYMBOL[e.status], Text(one_line(e.address or e.digest or "")), Text(e.source),
                      Text(LABEL[e.status], style=STYLE[e.status]), Text(gpus), Text(one_line(e.reason)))
    return table


def rebuild_table(report: UpgradeReport) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False,
                  title=f"Rebuild set for {report.new.words}")
    for name in ("", "cell", "replaces", "status", "build key", "predicted build", "why"):
        table.add_column(name, no_wrap=name in ("cell", "build key"), overflow="fold")
    for r in report.rebuild:
        e = r.entry
        why = r.problem or e.reason or "; ".join(e.changes[:2])
        table.add_row(PLAN_SYMBOL[e.status], Text(one_line(e.address)), Text(one_line(r.replaces)), Text(e.status),
                      Text(e.build_key[:12]), Text(r.estimate.text()), Text(one_line(why)))
    return table


def rehearsal_lines(rehearsal: Rehearsal, publish: bool) -> list[Text]:
    """What --build did beyond the gate table: cells not built here (and why), and what was published."""
    if not rehearsal.addresses:
        return [Text("the rebuild set is up to date in the registry: nothing was built (its gates are the published "
                     "ones)")]
    lines = [Text(f"not built here: {one_line(address)}: {one_line(why)}", style="red")
             for address, why in rehearsal.not_built().items()]
    if rehearsal.published is not None:
        lines += [Text(f"published {one_line(p.address)} ({p.digest[:19]})", style="green")
                  for p in rehearsal.published.published]
        lines += [Text(f"held back {one_line(h.address)}: {one_line(h.text())}", style="yellow")
                  for h in rehearsal.published.held_back]
    elif not publish:
        lines.append(Text("nothing was published (pass --publish to publish the rebuilt engines whose gates pass)"))
    return lines
