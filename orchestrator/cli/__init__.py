"""Command-line interface: ``orchestrate``. One place catches the project's errors and maps them to exit codes;
each command is a few lines that call orchestrator.app.pipeline and render the result."""

from __future__ import annotations

import sys

import click

from orchestrator.errors import ManifestError, OrchestratorError
from orchestrator.cli.common import console_err, emit_json_error


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="trt-orchestrator", prog_name="orchestrate")
def cli() -> None:
    """Turn YAML manifests into gated, fingerprinted TensorRT engines.

    \b
    Typical flow:
      orchestrate validate manifests/demo.yaml
      orchestrate plan manifests/demo.yaml
      orchestrate build manifests/demo.yaml
      orchestrate gate manifests/demo.yaml
      orchestrate publish manifests/demo.yaml
      orchestrate pull ocr-det --precision fp16 -o ocr-det.engine
    """


def _register() -> None:
    from orchestrator.cli import build_cmds, ci_cmds, plan_cmds, registry_cmds, report_cmds

    for module in (plan_cmds, build_cmds, registry_cmds, report_cmds, ci_cmds):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="orchestrate", standalone_mode=False)
    except click.exceptions.Abort:
        console_err().print("aborted")
        sys.exit(130)
    except click.ClickException as e:  # usage errors: exit 2 with click's own message
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        console_err().print("interrupted")
        sys.exit(130)
    except ManifestError as e:
        if not emit_json_error(e):
            for problem in e.problems:
                console_err().print(problem.render(), markup=False, highlight=False)
            console_err().print(f"{len(e.problems)} problem(s) found", style="bold red")
        sys.exit(e.exit_code)
    except OrchestratorError as e:
        if not emit_json_error(e):
            console_err().print(f"error: {e}", markup=False, highlight=False)
        sys.exit(e.exit_code)
    sys.exit(0)
