"""publish, ls, show, retention (pull: deploy_cmds)."""

from __future__ import annotations

import os

import click
from rich.text import Text

from orchestrator import plugins
from orchestrator.app import pipeline
from orchestrator.app import registry as registry_verbs
from orchestrator.app.project import registry_of
from orchestrator.cli.build_cmds import load, record_run, run_record
from orchestrator.cli.common import cache_option, console, console_err, json_option, manifests_argument, print_json
from orchestrator.cli.plan_cmds import one_line
from orchestrator.cli.render import publish as render_publish
from orchestrator.cli.render import registry as render_registry
from orchestrator.cli.render.attest import write_checksums
from orchestrator.cli.render.progress import ProgressView
from orchestrator.core.model import RegistryConfig
from orchestrator.errors import ExitCode, UsageError


def parse_registry(text: str) -> RegistryConfig:
    """``oci://host:port/prefix`` (loopback hosts are plain HTTP) or a local store directory (relative to the
    working directory)."""
    return plugins.parse_registry(text, os.getcwd())


def registry_from(registry: str | None, manifests: tuple[str, ...]) -> RegistryConfig:
    if registry:
        return parse_registry(registry)
    if manifests:
        return registry_of(list(manifests))
    return parse_registry(os.environ.get("ORCHESTRATE_REGISTRY", "artifacts"))


registry_option = click.option("--registry", envvar="ORCHESTRATE_REGISTRY", default=None,
                               help="A local store directory or oci://HOST:PORT/PREFIX "
                                    "[default: the manifest's registry, else ./artifacts].")


@click.command()
@manifests_argument
@click.option("--plan", "plan_file", type=click.Path(dir_okay=False, exists=True), help="Publish from a saved plan.")
@click.option("--shard", help="Only this shard of the plan.")
@click.option("--only", multiple=True, metavar="ADDR", help="Only these cell addresses (repeatable).")
@click.option("--force", is_flag=True, help="Publish even engines whose gates failed (recorded in the metadata).")
@click.option("--summary", "summary_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Append a markdown summary (published, held back and why) to FILE, e.g. \"$GITHUB_STEP_SUMMARY\".")
@click.option("--checksums", "checksums_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write `<sha256>  <address>` for every engine published here (sha256sum format: what GitHub's "
                   "attest-build-provenance takes as subject-checksums); not written when none was.")
@click.option("-q", "--quiet", is_flag=True)
@json_option
@cache_option
def publish(manifests, plan_file, shard, only, force, summary_file, checksums_file, quiet, as_json, cache_dir):
    """Publish every built engine whose gates passed (pending ones only where the manifest allows it), whatever
    happened to the other cells; the rest are held back, each with its reason.

    Exit status: 0 when every cell in scope was published or is up to date (cells the plan blocked are listed,
    not counted); 3 when the cells held back all failed a gate; 1 when any was held back for another reason (no
    build result here, a failed build, a pending gate, a publish error); 130 when interrupted."""
    project, the_plan = load(manifests, plan_file, cache_dir)
    with ProgressView(len(the_plan.entries), "publish", quiet=quiet or as_json) as view:
        summary = pipeline.publish(project, the_plan, shard=shard, only=only, force=force, on_event=view.event)
    report = pipeline.publish_report(project, the_plan, summary, shard=shard, only=only)
    record = record_run(summary, "publish", project)
    if summary_file:
        append_summary(summary_file, render_publish.render_markdown(report, summary.seconds,
                                                                     interrupted=summary.interrupted))
    if checksums_file:
        write_checksums(checksums_file, report.published)
    code = ExitCode.INTERRUPTED if summary.interrupted else report.exit_code()
    if not summary.ok and code == ExitCode.OK:
        code = ExitCode.ERROR  # defensive: a failed publish node is always a held-back cell as well
    if as_json:
        print_json({**run_record(summary, project), **report.to_json(), "exit_code": int(code),
                    "summary_file": str(record)})
        return code
    for line in render_publish.held_back_lines(report):
        console_err().print(line, highlight=False)
    console().print(render_publish.headline(report, summary.seconds, interrupted=summary.interrupted),
                    style="red" if code != ExitCode.OK else None, highlight=False, markup=False)
    return code


def append_summary(path: str, text: str) -> None:
    """Append to a job summary file (several steps may write to the same one)."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"cannot write the publish summary to {path}: {e.strerror or e}",
                         hint="pass a writable file to --summary (in GitHub Actions: \"$GITHUB_STEP_SUMMARY\")") from e


@click.command(name="ls")
@manifests_argument
@registry_option
@click.option("--model", help="Only this model.")
@json_option
def ls_cmd(manifests, registry, model, as_json):
    """List published artifacts and the calibration and timing caches published with them."""
    found = registry_verbs.listing(registry_from(registry, manifests), model=model)
    # one model: newest first; the whole registry: oldest first
    metas = [a.metadata for a in (found.artifacts if model else reversed(found.artifacts))]
    if as_json:
        print_json(render_registry.listing_json(found, metas))
        return
    render_registry.render_listing(found, metas, console(), one_line)  # registry text is data, never markup


@click.command()
@click.argument("ref")
@manifests_argument
@registry_option
@json_option
def show(ref, manifests, registry, as_json):
    """Show one record's metadata, its caches and attachments: by address, engine digest (sha256:…) or record key."""
    meta = registry_verbs.show(registry_from(registry, manifests), ref).metadata
    if as_json:
        print_json(meta)  # the whole record: caches and attachments included
        return
    render_registry.render_record(meta, console(), one_line)


@click.command()
@manifests_argument
@registry_option
@click.option("--keep-versions", type=click.IntRange(min=1), required=True,
              help="Keep the newest N versions of each model; delete older ones.")
@click.option("--yes", is_flag=True, help="Really delete (otherwise only shows what would go).")
@json_option
def retention(manifests, registry, keep_versions, yes, as_json):
    """Delete old model versions from the registry (the only way artifacts are ever deleted)."""
    result = registry_verbs.retention(registry_from(registry, manifests), keep_versions=keep_versions, delete=yes)
    doomed, removed = result.doomed, result.removed
    if as_json:
        print_json({"would_delete" if not yes else "deleted": [a.metadata["address"] + "@" +
                                                               a.metadata["model"]["version"] for a in doomed],
                    "removed": removed})
        return
    for a in doomed:
        console().print(Text(f"{'deleted' if yes else 'would delete'} {one_line(str(a.metadata['address']))} "
                             f"{one_line(str(a.metadata['model']['version']))} {one_line(a.digest)[:19]}"))
    if not yes and doomed:
        console().print("dry run: pass --yes to delete")
    if not doomed:
        console().print("nothing to delete")


