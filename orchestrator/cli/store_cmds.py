"""``orchestrate store check``: the store's damaged records, and moving them aside."""

from __future__ import annotations

import click
from rich.text import Text

from orchestrator.app.store_check import StoreCheck, check_store
from orchestrator.cli.common import console, json_option, manifests_argument, print_json
from orchestrator.cli.plan_cmds import one_line
from orchestrator.cli.registry_cmds import registry_from, registry_option
from orchestrator.contracts.store import DamagedRecord


@click.group()
def store() -> None:
    """The registry's own health: damaged records."""


def damaged_line(d: DamagedRecord) -> Text:
    """One damaged record for people: what it was (where known), what is wrong, where it is. Data, never markup."""
    what = d.address or f"record {d.key[:12]}"
    return Text(f"! {one_line(what)} [{d.kind}]: {one_line(d.problem)} ({one_line(d.location)})")


def render(result: StoreCheck) -> None:
    out = console()
    for d in result.damaged:
        out.print(damaged_line(d))
    for q in result.quarantined:
        out.print(Text(f"moved aside: {one_line(q.record.address or q.record.key[:12])} -> {one_line(q.moved_to)}"))
    blobs = "engines and attachments hashed" if result.verified_blobs else "blobs not hashed"
    summary = (f"{one_line(result.store)}: {result.sound} sound record(s), {len(result.damaged)} damaged "
               f"({blobs})")
    if result.quarantined:
        summary += f", {len(result.quarantined)} moved aside"
    out.print(Text(summary))
    if result.left:
        out.print(Text("publish those artifacts again to replace them, or pass --quarantine to move them aside "
                       "(nothing is deleted)"))


@store.command()
@manifests_argument
@registry_option
@click.option("--quarantine", is_flag=True,
              help="Move every damaged record aside (never deleted; the store says where), so its address plans "
                   "from what remains.")
@click.option("--no-verify-blobs", "fast", is_flag=True,
              help="Do not hash engines and attachments (only records, and whether their blobs are there).")
@json_option
def check(manifests, registry, quarantine, fast, as_json):
    """List damaged records: metadata that is not JSON or not the schema, changed since it was published, naming
    another record, or whose engine or attachment is missing or no longer hashes to its digest.

    Exit status: 0 when no damaged record is left in place (none found, or all moved aside with --quarantine);
    1 otherwise."""
    result = check_store(registry_from(registry, manifests), quarantine=quarantine, verify_blobs=not fast)
    if as_json:
        print_json(result.to_json())
    else:
        render(result)
    return result.exit_code()
