"""`orchestrate ci verify-shard`: a CI shard's first step after installing (see orchestrator.app.shards)."""

from __future__ import annotations

import click
from rich.markup import escape

from orchestrator import plugins
from orchestrator.app.shards import verify_shard
from orchestrator.cli.build_cmds import load
from orchestrator.cli.common import cache_option, console, json_option, manifests_argument, print_json


@click.command("verify-shard")
@manifests_argument
@click.option("--plan", "plan_file", required=True, type=click.Path(dir_okay=False, exists=True),
              help="The plan the workflow made (plan.json).")
@click.option("--shard", required=True, help="The shard this job runs.")
@click.option("--role", type=click.Choice(["build", "gate"]), default="build", show_default=True)
@json_option
@cache_option
def verify_shard_command(manifests, plan_file, shard, role, as_json, cache_dir):
    """Check this runner has the exact toolchain and GPU the shard's cells need, and print what was verified."""
    project, the_plan = load(manifests, plan_file, cache_dir)
    report = verify_shard(project, the_plan, shard, plugins.fingerprint(), role=role)
    if as_json:
        print_json(report)
        return
    out = console()
    out.print(f"shard {escape(report['shard'])} ({role}) on [{escape(', '.join(report['labels']))}]")
    out.print(f"  toolchain: {escape(report['toolchain_text'])}")
    for who, version in report["wanted"].items():
        out.print(f"  {escape(who)}: wants {escape(version)}")
    for runtime, version in sorted(report["installed"].items()):
        out.print(f"  installed {escape(runtime)}: {escape(version or 'not installed')}")
    cc = report["compute_capability"]
    out.print(f"  GPU: {escape(report['gpu'])}" + (f" (CC {escape(cc)})" if cc else "")
              + f"; platform {escape(report['platform'])}")
    out.print("  verified: this runner can " + role + " every cell of the shard")
