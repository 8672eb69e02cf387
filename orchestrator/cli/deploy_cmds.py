"""pull (one engine, or ``--all`` for a deployment directory) and ``export triton``."""

from __future__ import annotations

import click
from rich.text import Text

from orchestrator.app import deploy, heal, triton
from orchestrator.cli.common import cache_option, console, console_err, json_option, print_json
from orchestrator.cli.plan_cmds import one_line
from orchestrator.cli.registry_cmds import registry_from, registry_option
from orchestrator.errors import ExitCode, UsageError

GPUS_HELP = ("The deployment's GPUs as compute capabilities, comma-separated: sm75,sm86,8.9; 'none': machines "
             "without a GPU, which also lets a CPU engine serve a listed GPU that no GPU engine serves{auto}.")
KEEP_STRIPPED_HELP = ("Write weight-stripped engines (targets[].weights: stripped/refittable) as published, without "
                      "refitting them from their weights blob: for deployments that refit them themselves.")
SIGNATURE_HELP = ("Refuse, before writing anything, an engine whose signed provenance does not verify against this: an "
                  "ed25519 public key (a PEM file, file:PATH or env:NAME) or a keyless identity "
                  "(https://github.com/ORG/REPO/.github/workflows/engines.yml@refs/heads/main) [default: the "
                  "manifest's registry.signing.require]. Unsigned, wrongly signed and mismatching engines exit 1.")
signature_option = click.option("--require-signature", "require_signature", default=None, metavar="KEY|IDENTITY",
                                help=SIGNATURE_HELP)


def _signed_lines(checks) -> None:
    for c in checks:
        console().print(Text(f"signature verified: {one_line(c.address)} {c.digest[:19]} signed by "
                             f"{one_line(c.signer)}"))


RUNTIME_HELP = ("The deployment's runtime: trt10.13[.3.9], ort1.31, or its serving stack: triton:25.01, "
                "ngc-tensorrt:25.01, jetpack:6.2 (resolved to the exact TensorRT it ships){default}.")


def _rejections(missing) -> None:
    for m in missing:
        console_err().print(Text(f"  {one_line(m.model)} on {m.gpu}: nothing compatible", style="red"),
                            highlight=False)
        for who, why in m.rejections:
            console_err().print(Text(f"    not {one_line(who)}: {one_line(why)}", style="dim"), highlight=False)


@click.command()
@click.argument("models", nargs=-1, metavar="[MODEL]...")
@click.option("--all", "pull_all", is_flag=True,
              help="Fill a directory for a deployment: every named model (none: every model in the registry) for "
                   "every GPU in --gpus, one verified file per engine (what an init container runs).")
@click.option("--gpus", multiple=True, metavar="CCS", help=GPUS_HELP.format(auto="; with --all, repeatable"))
@click.option("--version", "version", default=None, help="A model version [default: latest].")
@click.option("--precision", default=None,
              help="fp32, fp16, bf16, int8 or fp8 [default: any; among engines that fit equally well the most "
                   "precise wins: fp32, then fp16, bf16, int8, fp8].")
@click.option("--profile", default=None, help="Profile set name.")
@click.option("--gpu", default="auto", show_default=True, help="auto (NVML), a CC like sm89 / 8.9, or none.")
@click.option("--gpu-model", default=None, metavar="MODEL",
              help="The declared GPU's model as nvidia-smi names it ('NVIDIA L4'), with --gpu: engines built on it "
                   "rank first, gpu_match: sku engines need it.")
@click.option("--platform", "platform_", default=None, metavar="OS/ARCH[/VARIANT]",
              help="The deployment's platform: linux/x86_64, windows/x86_64, linux/aarch64, linux/aarch64/l4t36.4 "
                   "(Jetson) [default: this machine's].")
@click.option("--runtime", default=None,
              help=RUNTIME_HELP.format(default=" [default: the installed one; with --all: each engine's own]"))
@click.option("--allow-cpu", is_flag=True,
              help="Accept a CPU engine for the declared --gpu when no GPU engine runs there (without it, a declared "
                   "GPU is refused CPU engines: exit 4). With --all, add none to --gpus instead.")
@click.option("--lean-runtime", default=None, metavar="PATH",
              help="The TensorRT lean runtime library the deployment loads (libnvinfer_lean.so.X.Y.Z): needed by "
                   "version-compatible engines built without their lean runtime.")
@click.option("-o", "--out", type=click.Path(), default=None,
              help="Write the engine here (with --all: the directory to fill).")
@click.option("--keep-stripped", is_flag=True, help=KEEP_STRIPPED_HELP)
@registry_option
@click.option("--manifest", "manifest", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Use this manifest's registry (with --build-on-miss: and its recipe for the model).")
@signature_option
@click.option("--build-on-miss", is_flag=True,
              help="When engines are published but none fits (exit 4 otherwise), build one here with the recipe of "
                   "--manifest: the model version's published ONNX, its transforms and caches, the builder options "
                   "of the nearest declared target of the same builder; gate it before writing it (exit 3 and "
                   "nothing written when it fails). See docs/deploy.md, 'Build on miss'.")
@click.option("--publish-back", is_flag=True,
              help="With --build-on-miss: publish the engine built here (registry credentials needed), marked "
                   "built_on_device, under the build key `plan` computes for a manifest declaring its target.")
@click.option("--require-gate", is_flag=True,
              help="With --build-on-miss: refuse (exit 1, nothing written) an engine this machine cannot gate "
                   "(its runtime does not run here, e.g. an RTX engine for a declared --gpu on a machine without one).")
@cache_option
@json_option
def pull(models, pull_all, gpus, version, precision, profile, gpu, gpu_model, platform_, runtime, allow_cpu,
         lean_runtime, out, keep_stripped, registry, manifest, require_signature, build_on_miss, publish_back,
         require_gate, cache_dir, as_json):
    """Pick the published engine that can run on this platform, GPU and runtime, verify it, and write it out.

    With --all, fill a directory for a deployment: for every model and every GPU in --gpus, the engine `pull --gpu`
    would choose, written once per engine as DIR/<model>/model.<gpus>.<suffix>, sha256 and header verified;
    a file already holding it is left alone.

    A declared GPU (--gpu sm90; --gpus with --all) is never served a CPU engine unless asked: --allow-cpu, or
    none among --gpus with --all.

    Exit status: 0 done; 4 when engines are published but none can run on a declared GPU/runtime (nothing is
    written; every candidate is listed with its reason; --json: error.candidates); 1 when the model, version,
    precision or profile is not published, or a check fails (digest, plan header, --require-signature, a stripped
    engine whose refit fails or does not reproduce its gate's recorded outputs: nothing written); 2 for a usage
    error.

    A weight-stripped engine is refitted from its model version's weights blob (fetched once per blob) and checked
    against the outputs its gate recorded before it is written; --keep-stripped writes it as published.

    With --build-on-miss --manifest M, a miss (exit 4) builds the engine here instead, gates it (parity against the
    model's reference on its published ONNX, the task metric, the benchmark, and the outputs a published engine of
    the version recorded) and writes it only when it passed (exit 3 otherwise) or cannot be gated here (said; exit 1
    with --require-gate); --publish-back publishes it. Two such pulls at once build once."""
    if (publish_back or require_gate) and not build_on_miss:
        raise UsageError("--publish-back and --require-gate go with --build-on-miss")
    if build_on_miss:
        return _build_on_miss(models, pull_all, manifest, dict(
            version=version, precision=precision, profile=profile, gpu=gpu, gpu_model=gpu_model, platform=platform_,
            runtime="auto" if runtime is None else runtime, lean_runtime=lean_runtime, allow_cpu=allow_cpu, out=out,
            registry=registry, publish_back=publish_back, require_gate=require_gate,
            require_signature=require_signature, cache_dir=cache_dir), keep_stripped, as_json)
    config = registry_from(registry, (manifest,) if manifest else ())
    if pull_all:
        if not gpus:
            raise UsageError("pull --all needs the deployment's GPUs", hint="pass --gpus sm75,sm86 (or none)")
        if out is None:
            raise UsageError("pull --all needs a directory to fill", hint="pass -o DIR")
        if gpu != "auto" or gpu_model or lean_runtime:
            raise UsageError("--gpu, --gpu-model and --lean-runtime choose one engine; with --all use --gpus")
        if allow_cpu:
            raise UsageError("--allow-cpu is for one engine", hint="with --all, add none to --gpus (--gpus sm90,none): "
                                                                   "the deployment also runs CPU engines")
        result = deploy.pull_all(models, registry=config, gpus=gpus, out=out, version=version, precision=precision,
                                 profile=profile, runtime=runtime, platform=platform_,
                                 require_signature=require_signature, keep_stripped=keep_stripped)
        if as_json:
            print_json(result.to_json())
            return
        for e in result.engines:
            console().print(Text(f"{e.status:9} {one_line(str(e.path))}  {e.digest[:19]}  "
                                 f"{', '.join(e.to_json()['gpus'])}  "
                                 f"({one_line(e.address)})"))
        _signed_lines(result.signatures)
        console().print(Text(f"{len(result.engines)} engine(s) for {len(set(e.model for e in result.engines))} "
                             f"model(s) in {one_line(str(result.out))}"
                             + ("" if result.changed else ": nothing changed")))
        return
    if len(models) != 1:
        raise UsageError("pull takes one MODEL" if models else "pull needs a MODEL",
                         hint="orchestrate pull MODEL -o FILE; or pull --all [MODEL...] --gpus sm75,sm86 -o DIR")
    if gpus:
        raise UsageError("--gpus is for pull --all", hint="one engine: --gpu sm86")
    result = deploy.pull(models[0], registry=config, version=version, precision=precision, profile=profile, gpu=gpu,
                         runtime="auto" if runtime is None else runtime, out=out, platform=platform_,
                         gpu_model=gpu_model, lean_runtime=lean_runtime, allow_cpu=allow_cpu,
                         require_signature=require_signature, keep_stripped=keep_stripped)
    _pulled(result, as_json)


def _pulled(result, as_json: bool, extra: dict | None = None) -> None:
    meta = result.metadata
    lean = ({"version": result.lean_runtime,
             "path": str(result.lean_runtime_path) if result.lean_runtime_path else None}
            if result.lean_runtime else None)
    if as_json:
        print_json({"path": str(result.path) if result.path else None, "address": meta["address"],
                    "digest": meta["engine"]["digest"], "reason": result.reason, "platform": result.platform,
                    "lean_runtime": lean, "metadata": meta, "refit": result.refit,
                    "signature": result.signature.to_json() if result.signature else None,
                    "rejected": [c.to_json() for c in result.candidates], **(extra or {})})
        return
    console().print(Text.assemble(("chose", "green"), f" {one_line(str(meta['address']))} "
                                  f"{one_line(str(meta['engine']['digest']))[:19]} — {one_line(result.reason)}"))
    if result.signature:
        _signed_lines([result.signature])
    if result.path and result.refit:
        check = result.refit["check"]
        console().print(Text(f"wrote {one_line(str(result.path))} ({result.path.stat().st_size} bytes): stripped "
                             f"engine {meta['engine']['size']} bytes, sha256 verified, refitted from its weights "
                             f"blob, {check['compared']} recorded sample(s) reproduced"))
    elif result.path:
        console().print(Text(f"wrote {one_line(str(result.path))} ({meta['engine']['size']} bytes, sha256 verified)"))
    if lean:
        console().print(Text(f"the deployment must load the TensorRT {one_line(str(lean['version']))} lean runtime"
                             f" ({one_line(str(lean['path']))})"))
    for who, why in result.rejections:
        console_err().print(Text(f"  not {one_line(who)}: {one_line(why)}", style="dim"), highlight=False)


def _build_on_miss(models, pull_all, manifest, options: dict, keep_stripped: bool, as_json: bool) -> ExitCode:
    if pull_all or len(models) != 1:
        raise UsageError("--build-on-miss builds one engine: pull one MODEL" if pull_all or models else
                         "pull needs a MODEL", hint="orchestrate pull MODEL --build-on-miss --manifest M -o FILE")
    if manifest is None:
        raise UsageError("--build-on-miss builds with the recipe of the manifest that declares the model",
                         hint="pass --manifest M (the manifest its engines were published from)")
    if keep_stripped:
        raise UsageError("--keep-stripped and --build-on-miss: an engine built here carries its weights",
                         hint="drop --keep-stripped")

    def say(text: str) -> None:
        if not as_json:
            console_err().print(Text(one_line(text), style="dim"), highlight=False)

    result = heal.pull_or_build(models[0], manifest=manifest, say=say, **options)
    if result.pulled is not None:
        # nothing built: a published engine fits (perhaps the one another pull built and published while this one
        # waited for its lock)
        _pulled(result.pulled, as_json, {"build_on_miss": {"built": None, "waited": result.waited}})
        return ExitCode.OK
    code = result.exit_code()
    if as_json:
        print_json({"path": str(result.path) if result.path else None, "address": result.address,
                    "digest": result.digest, "reason": result.reason, "build_on_miss": result.to_json()})
        return code
    gate = result.gate
    assert gate is not None
    word = "built" if result.built == "built" else "reused"
    console().print(Text.assemble((word, "green"), f" {one_line(str(result.address))} "
                                  f"{one_line(str(result.digest))[:19]} here — {one_line(result.reason)}"))
    console().print(Text(f"  target {one_line(str(result.target.get('name')))}: "
                         + (f"the builder options of declared target {one_line(result.nearest)}" if result.nearest
                            else "the builder's default options (the manifest declares no target of it)")))
    if gate.status == "failed":
        console_err().print(Text(f"✗ gate failed: {one_line(str(result.address))}: nothing written", style="red"),
                            highlight=False)
        for reason in gate.reasons:
            console_err().print(Text(f"    {one_line(reason)}"), highlight=False)
        return code
    recorded = gate.recorded
    line = f"  gate {gate.status}" + (f" ({one_line(gate.pending)}): written ungated" if gate.pending else "")
    if recorded and recorded.get("compared"):
        line += (f"; {recorded['compared']} sample(s) of {one_line(str(recorded['against']['address']))}'s recorded "
                 "outputs reproduced")
    console().print(Text(line, style="yellow" if gate.status != "passed" else ""))
    for note in gate.notes:
        console().print(Text(f"  {one_line(note)}", style="dim"))
    if result.path:
        console().print(Text(f"wrote {one_line(str(result.path))} ({result.path.stat().st_size} bytes, sha256 "
                             "verified)"))
    if result.published is not None:
        console().print(Text(f"published back: {one_line(result.published.location)} (built on device)"))
    if result.held_back is not None:
        console_err().print(Text(f"not published back: {one_line(result.held_back.text())}", style="red"),
                            highlight=False)
    for who, why in result.candidates:
        console_err().print(Text(f"  not {one_line(who)}: {one_line(why)}", style="dim"), highlight=False)
    return code


@click.group()
def export() -> None:
    """Write published engines in a serving system's layout."""


@export.command(name="triton")
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@click.option("--repo", required=True, type=click.Path(file_okay=False), help="The Triton model repository to write.")
@registry_option
@click.option("--manifest", "manifest", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Use this manifest's registry.")
@click.option("--version", "version", default=None, help="A model version [default: latest].")
@click.option("--precision", default=None, help="fp32, fp16, bf16, int8 or fp8 (needed when several are published).")
@click.option("--profile", default=None, help="Profile set name (needed when several are published).")
@click.option("--runtime", default=None,
              help=RUNTIME_HELP.format(default=" [default: the newest TensorRT release published for the model]"))
@click.option("--gpus", default="auto", show_default=True, metavar="CCS|auto",
              help=GPUS_HELP.format(auto="; auto: the CCs the published engines were built for"))
@click.option("--allow-missing", is_flag=True,
              help="Write the GPUs that have an engine even when some requested GPU has none (listed, exit 0).")
@click.option("--version-policy", default="latest", show_default=True,
              help="Triton's version policy: latest, latest:N, all, or specific:1,3.")
@click.option("--keep-stripped", is_flag=True, help=KEEP_STRIPPED_HELP)
@signature_option
@json_option
def export_triton(models, repo, registry, manifest, version, precision, profile, runtime, gpus, allow_missing,
                  version_policy, keep_stripped, require_signature, as_json):
    """Write a Triton Inference Server model repository: REPO/<model>/config.pbtxt and REPO/<model>/<n>/ with one
    engine file per GPU architecture (cc_model_filenames), each with a provenance.json.

    Every file is verified by digest; a re-export with nothing changed writes nothing; a new model version
    becomes a new version directory. Exit status: 0 done; 4 when a requested GPU has no compatible engine
    (nothing written; every candidate with its reason) unless --allow-missing; 1 when nothing is published;
    2 for a usage error."""
    config = registry_from(registry, (manifest,) if manifest else ())
    requested = gpus if gpus == "auto" else [g for g in gpus.split(",") if g.strip()]
    result = triton.export_triton(models, registry=config, repo=repo, version=version, precision=precision,
                                  profile=profile, runtime=runtime, gpus=requested, allow_missing=allow_missing,
                                  version_policy=version_policy, require_signature=require_signature,
                                  keep_stripped=keep_stripped)
    if as_json:
        print_json(result.to_json())
        return
    _signed_lines(result.signatures)
    for model in result.models:
        changed = [f for f in model.files if f.status != "unchanged"]
        console().print(Text.assemble(
            (one_line(model.name), "bold"), f" {one_line(model.model_version)} -> version {model.version} "
            f"({model.backend}, {one_line(model.runtime)}): "
            + (f"{len(changed)} file(s) written or removed" if changed else "unchanged")))
        for f in model.files:
            if f.digest is not None:
                console().print(Text(f"  {f.status:9} {one_line(str(f.path))}  {f.digest[:19]}  "
                                     f"{', '.join(f.to_json()['gpus']) or 'any device'}"))
            elif f.status != "unchanged":
                console().print(Text(f"  {f.status:9} {one_line(str(f.path))}"))
    if result.missing:
        console_err().print(Text("written without these GPUs (--allow-missing):", style="yellow"), highlight=False)
        _rejections(result.missing)
