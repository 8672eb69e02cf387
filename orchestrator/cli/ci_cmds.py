"""ci github, ci k8s: the same shards, emitted for GitHub Actions or a Kubernetes Indexed Job."""

from __future__ import annotations

import os

import click
from rich.markup import escape

from orchestrator.app import ci as ci_verbs
from orchestrator.app.ci_checks import CIWarning
from orchestrator.app.project import load_project
from orchestrator.cli.common import cache_option, console, console_err, manifests_argument
from orchestrator.cli.plan_cmds import read_plan_file
from orchestrator.cli.shard_cmds import verify_shard_command

WORKFLOW_PATH = ".github/workflows/engines.yml"
TOOL_SPEC_HELP = ("What every job `pip install`s [default: this repository at the pipeline's own commit, `.[extras]` "
                  "with the extras the manifests need]. Pin one (trt-orchestrator==0.1.0, a git URL) when the "
                  "manifests live in a repository that is not the tool's.")


@click.group()
def ci() -> None:
    """Generate CI that fans the plan's shards out to runners."""


ci.add_command(verify_shard_command)  # a shard's first step in the generated pipelines


def _report(written: list[str], warnings: tuple[CIWarning, ...] = ()) -> None:
    for dest in written:
        console().print(f"wrote {escape(os.path.relpath(dest))}")
    for w in warnings:  # the files are written: these say what the repository lacks for them to run
        console_err().print(f"[yellow]warning:[/] {escape(str(w))}\n  hint: {escape(w.hint)}")


@ci.command()
@manifests_argument
@click.option("-o", "--out", default=None, help=f"Workflow path [default: {WORKFLOW_PATH}].")
@click.option("--tool-spec", default=None, help=TOOL_SPEC_HELP)
@click.option("--python", "python_version", default="3.11", show_default=True)
@click.option("--repo-root", default=".", type=click.Path(file_okay=False, exists=True), show_default=True)
@click.option("--pr-build-label", default="build-engines", show_default=True,
              help="Pull requests from this repository's branches build (on the GPU runners) once a maintainer adds "
                   "this label; other PRs only plan. Fork PRs never build.")
@click.option("--action-refs", type=click.Choice(["sha", "tags"]), default="sha", show_default=True,
              help="Pin third-party actions by commit SHA (with the version in a comment), or by major tag.")
def github(manifests, out, tool_spec, python_version, repo_root, pr_build_label, action_refs):
    """Write a GitHub Actions workflow (and .github/actionlint.yaml with the runner labels)."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    made = ci_verbs.workflow("github", list(manifests), repo_root, tool_spec=tool_spec, python=python_version,
                             pr_build_label=pr_build_label, action_refs_mode=action_refs, output_path=out)
    _report(ci_verbs.write_files(made.files, repo_root, out, WORKFLOW_PATH), made.warnings)


@ci.command()
@manifests_argument
@click.option("-o", "--out", default="k8s/engines.yaml", show_default=True)
@click.option("--image", default=None,
              help="Image of shards on the runner toolchain (TensorRT installed, Python); container and pip "
                   "toolchains bring their own.")
@click.option("--tool-spec", default=None, help=TOOL_SPEC_HELP)
@click.option("--python", "python_version", default="3.11", show_default=True,
              help="Python of pip-toolchain shards and the publish Job (python:<version>-slim).")
@click.option("--repo-url", default=None, help="The repository the pods check out [default: git's origin].")
@click.option("--revision", default=None, help="The commit they check out [default: HEAD].")
@click.option("--volume-claim", default=None,
              help="An existing ReadWriteMany PersistentVolumeClaim the pods share [default: one is declared].")
@click.option("--registry-secret", default=None,
              help="Secret with `username` and `password` keys: the registry login of every pod.")
@click.option("--namespace", default=None)
@cache_option
def k8s(manifests, out, image, tool_spec, python_version, repo_url, revision, volume_claim, registry_secret,
        namespace, cache_dir):
    """Write the plan's shards as Kubernetes Indexed Jobs on GPU nodes (GPU Feature Discovery labels), each in its
    toolchain's image, building onto a shared volume that a final Job publishes from."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    project = load_project(manifests, cache_dir=cache_dir)
    made = ci_verbs.plan_workflow("k8s-indexed-job", project, image=image, tool_spec=tool_spec,
                                  python=python_version, repo_url=repo_url, revision=revision,
                                  volume_claim=volume_claim, registry_secret=registry_secret, namespace=namespace,
                                  output_path=out)
    _report(ci_verbs.write_files(made.files, ".", None, out), made.warnings)


GITLAB_PIPELINE_PATH = ".gitlab-ci.yml"
GITLAB_CHILD_PATH = "child-pipeline.yml"


@ci.command()
@manifests_argument
@click.option("-o", "--out", default=None, help=f"Pipeline path [default: {GITLAB_PIPELINE_PATH}].")
@click.option("--tool-spec", default=None, help=TOOL_SPEC_HELP)
@click.option("--python", "python_version", default="3.11", show_default=True,
              help="Python of the plan and publish jobs' image (python:<version>-slim).")
@click.option("--image", default=None,
              help="Image of the plan and publish jobs instead [default: python:<version>-slim].")
@click.option("--repo-root", default=".", type=click.Path(file_okay=False, exists=True), show_default=True)
def gitlab(manifests, out, tool_spec, python_version, image, repo_root):
    """Write a GitLab CI parent pipeline: a plan job and a trigger of the child pipeline it renders at run time."""
    if not manifests:
        raise click.UsageError("give at least one MANIFEST")
    output_path = None
    if out not in (None, "-"):  # repo-relative: the plan job's `changes:` rules and the header name it
        output_path = os.path.relpath(os.path.abspath(out), os.path.abspath(repo_root)).replace(os.sep, "/")
        if output_path.startswith(".."):
            raise click.BadParameter(f"{out} is outside the repository {repo_root}", param_hint="-o/--out")
    made = ci_verbs.workflow("gitlab", list(manifests), repo_root, tool_spec=tool_spec, python=python_version,
                             image=image, output_path=output_path)
    _report(ci_verbs.write_files(made.files, repo_root, out, output_path or GITLAB_PIPELINE_PATH), made.warnings)


@ci.command("gitlab-child")
@click.option("--plan", "plan_file", required=True, type=click.Path(dir_okay=False, exists=True),
              help="The plan the pipeline's plan job made (plan.json).")
@click.option("-o", "--out", default=GITLAB_CHILD_PATH, show_default=True)
@click.option("--tool-spec", default=None,
              help="What the jobs `pip install` [default: this repository at the pipeline's commit].")
@click.option("--image", default="python:3.11-slim", show_default=True,
              help="Image of the publish job and of shards that run on any runner.")
def gitlab_child(plan_file, out, tool_spec, image):
    """Write the GitLab child pipeline of a plan: a job per shard, then publish (run by the parent's plan job)."""
    files = ci_verbs.child_files("gitlab", read_plan_file(plan_file), tool_spec=tool_spec, image=image,
                                 plan_path=plan_file, output_path=None if out == "-" else out)
    _report(ci_verbs.write_files(files, ".", out, out if out != "-" else GITLAB_CHILD_PATH))
