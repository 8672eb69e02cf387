"""Loading manifests: the I/O edge. Reads the file, parses with positions, validates against the schema,
converts, runs the semantic checks, checks model and data files on disk (existence, sha256 pins), and turns
every finding into a positioned ``Problem``. Raises one ``ManifestError`` carrying all of them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from orchestrator.core.model import GateSettings, Manifest, Model, RegistryConfig, Target
from orchestrator.core.resolve import address_part, cells_of
from orchestrator.errors import ManifestError, Problem
from orchestrator.manifest.checks import CapabilitiesFn, CheckInput, check, noise_threshold_problems
from orchestrator.manifest.convert import convert
from orchestrator.manifest.files import file_findings
from orchestrator.manifest.positions import Finding, Path, SourceMap, parse_yaml, printable, render_path
from orchestrator.manifest.schema import did_you_mean, kind_of, schema_findings

SlugFn = Callable[[str], str]
# A manifest is a few KB of YAML (the fleet example: 6 KB); a file far past that is the wrong file.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class LoadedManifest:
    """One file's outcome: the manifest (None when it has problems), its problems, and where each model and
    target name is written (for duplicates across files)."""

    manifest: Manifest | None
    problems: tuple[Problem, ...]
    names: dict[tuple[str, str], Problem]  # ("model"|"target", name) -> a Problem positioned at that name


def _with_where(models: list[Model | None], source: SourceMap, shown: str) -> list[Model | None]:
    """Each model's ``source.where`` ("manifests/x.yaml:12:7"): errors raised after loading (a download whose
    sha256 is not the pinned one) name the line to edit."""
    out: list[Model | None] = []
    for i, model in enumerate(models):
        if model is not None:
            line, col = source.locate(("models", i, "source"))
            where = f"{shown}:{line}:{col or 1}" if line is not None else shown
            model = replace(model, source=replace(model.source, where=where))
        out.append(model)
    return out


def _redirect(path: Path, redirects: dict[Path, Path]) -> Path:
    for n in range(len(path), 0, -1):
        if path[:n] in redirects:
            return redirects[path[:n]] + path[n:]
    return path


def _problem(finding: Finding, source: SourceMap, redirects: dict[Path, Path]) -> Problem:
    path = _redirect(finding.path, redirects)
    line, col = finding.mark or source.locate(path, key=finding.at_key)
    if line is None:  # only a document that never parsed has no marks, and its findings carry their own
        line, col = 1, 1
    # messages quote what the user wrote: never let a control character of it reach a terminal or a log
    return Problem(source.file, line, col, render_path(path), printable(finding.message),
                   printable(finding.hint) if finding.hint else None)


class _Unreadable(Exception):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def read_manifest_bytes(file: str) -> bytes:
    """The manifest's bytes: a regular file of at most MAX_MANIFEST_BYTES. Opened without blocking and checked on
    the open descriptor: a FIFO would wait for a writer forever, ``/dev/zero`` would never end (and a manifest's
    folder anchors its relative paths, which a pipe has none of)."""
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _Unreadable(f"cannot read manifest: {e.strerror or e}") from None
    with open(fd, "rb", buffering=0) as f:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _Unreadable("cannot read manifest: it is a folder", "give the path of a YAML file")
        if not stat.S_ISREG(info.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device or socket"
            raise _Unreadable(f"the manifest is not a regular file ({kind})",
                              "write the manifest to a file and give its path: relative model and data paths "
                              "start at the manifest's folder")
        if info.st_size > MAX_MANIFEST_BYTES:
            raise _Unreadable(f"the manifest is {info.st_size} bytes: at most {MAX_MANIFEST_BYTES} (a manifest is a "
                              "few KB of text)", "is this the right file?")
        try:
            return f.read(MAX_MANIFEST_BYTES + 1)
        except OSError as e:
            raise _Unreadable(f"cannot read manifest: {e.strerror or e}") from None


def _byte_position(raw: bytes, index: int) -> tuple[int, int]:
    """Line and column (in characters, as editors count them) of the byte at ``index``."""
    start = raw.rfind(b"\n", 0, index) + 1
    return raw.count(b"\n", 0, index) + 1, len(raw[start:index].decode("utf-8", "replace")) + 1


def _display_name(path: str) -> str:
    """Relative to the working directory when below it (what people type), else absolute."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _address_collisions(manifest: Manifest) -> list[Finding]:
    """Two targets whose cells would get the same addresses (same builder slug and version family, the same CCs,
    ...): `plan` could only say "also declared" without a line. Only cells the matrix really makes count."""
    part = {i: address_part(t) for i, t in enumerate(manifest.targets)}
    if len(set(part.values())) == len(part):
        return []  # the usual case: every target has its own address part, no cell can collide
    index = {id(t): i for i, t in enumerate(manifest.targets)}
    first: dict[str, int] = {}
    reported: set[tuple[int, int]] = set()
    out: list[Finding] = []
    for model, spec, set_name, target in cells_of(manifest):
        t = index[id(target)]
        address = f"{model.name}/{spec.name}/{set_name}@{part[t]}"
        other = first.setdefault(address, t)
        if other != t and (other, t) not in reported:
            reported.add((other, t))
            out.append(Finding(("targets", t, "name"),
                               f"target '{target.name}' gives its cells the same addresses as target "
                               f"'{manifest.targets[other].name}' (targets[{other}]), e.g. {address}",
                               "targets must differ in compute capability, builder, builder version (major.minor) "
                               "or options.version_compatible; merge the two, or exclude one from the other's "
                               "models in matrix.exclude"))
    return out


def _noise_findings(manifest: Manifest, own_gates: Sequence[tuple[Path, GateSettings]]) -> list[Finding]:
    """Regression thresholds inside the benchmark's accepted noise (``checks.noise_threshold_problems``) in the gate
    of every model x target (the target's keys over the model's): reported at the key the target itself sets, else
    at the model's."""
    own = {path[1]: gate for path, gate in own_gates if path[0] == "targets"}
    out: list[Finding] = []
    for t, target in enumerate(manifest.targets):
        mine = own.get(t)
        for i, model in enumerate(manifest.models):
            for key, message, hint in noise_threshold_problems(manifest.gate_for(model, target)):
                if mine is not None and getattr(getattr(mine, key[0]), key[1]) is not None:
                    path: Path = ("targets", t, "gate", *key)
                elif mine is not None and mine.benchmark.max_spread_pct is not None:
                    path = ("targets", t, "gate", "benchmark", "max_spread_pct")
                else:
                    path = ("models", i, "gate", *key)
                finding = Finding(path, message, hint)
                if finding not in out:
                    out.append(finding)
    # a matrix rule's gate over the target's over the model's: reported at the rule that sets one of the two keys
    problems = {(key, message, hint) for gate in dict(manifest.rule_gates).values()
                for key, message, hint in noise_threshold_problems(gate)}
    for rpath, rule in own_gates:
        if rpath[0] != "matrix":
            continue
        for key, message, hint in sorted(problems):
            if getattr(getattr(rule, key[0]), key[1]) is not None:
                where: tuple[str, ...] = key
            elif rule.benchmark.max_spread_pct is not None:
                where = ("benchmark", "max_spread_pct")
            else:
                continue
            rule_finding = Finding((*rpath, *where), message, hint)
            if rule_finding not in out:
                out.append(rule_finding)
    return out


def _names(data: dict, section: str) -> list[str | None]:
    entries = data.get(section)
    if not isinstance(entries, list):
        return []
    return [e["name"] if isinstance(e, dict) and isinstance(e.get("name"), str) else None for e in entries]


def load_one(path: str | os.PathLike, *, capabilities: CapabilitiesFn, builder_names: Sequence[str],
             builder_slug: SlugFn | None = None, store_names: Sequence[str] | None = None,
             absent_files_ok: bool = False) -> LoadedManifest:
    file = os.path.abspath(os.fspath(path))
    shown = _display_name(file)
    try:
        raw = read_manifest_bytes(file)
    except _Unreadable as e:
        return LoadedManifest(None, (Problem(shown, None, None, "", e.message, e.hint),), {})
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = _byte_position(raw, e.start)
        problem = Problem(shown, line, col, "", f"the manifest is not UTF-8 text (byte {e.start}: "
                          f"0x{raw[e.start]:02x})", "save the file as UTF-8 (YAML manifests are UTF-8 text)")
        return LoadedManifest(None, (problem,), {})
    parsed = parse_yaml(text, shown)
    source = parsed.source
    findings = list(parsed.findings)
    data = parsed.data
    redirects: dict[Path, Path] = {}
    manifest = None
    if data is not None and not isinstance(data, dict):
        findings.append(Finding((), f"the manifest must be a mapping of keys, got a {kind_of(data)}",
                                "start with `manifest_version: 1`"))
    elif data is not None:
        schema_errors = schema_findings(data, source)
        findings += schema_errors
        # Entries with schema errors (or with findings of the parse, such as duplicate keys) are not converted.
        bad = {f.path for f in findings}
        converted = convert(data, file, bad, source.scalars)
        converted.models = _with_where(converted.models, source, shown)
        redirects = converted.redirects
        findings += converted.findings
        on_disk, model_files = file_findings(converted.models, converted.own_gates, absent=absent_files_ok)
        findings += check(CheckInput(converted.models, converted.targets, _names(data, "models"),
                                     _names(data, "targets"), converted.include, converted.exclude, model_files),
                          capabilities=capabilities, builder_names=builder_names)
        findings += on_disk
        if store_names is not None and converted.registry is not None and converted.registry.store is not None \
                and converted.registry.store not in store_names:
            store = converted.registry.store
            findings.append(Finding(("registry", "store"), f"unknown store '{store}'",
                                    did_you_mean(store, store_names)
                                    or f"installed stores: {', '.join(store_names) or 'none'}"))
        if not findings:  # then every entry was typed and the registry converted: a None comes with a finding
            manifest = Manifest(
                file=file, project=data.get("project", os.path.splitext(os.path.basename(file))[0]),
                models=tuple(cast("list[Model]", converted.models)),
                targets=tuple(cast("list[Target]", converted.targets)),
                include=tuple(converted.include), exclude=tuple(converted.exclude),
                registry=cast(RegistryConfig, converted.registry), runner_pools=tuple(converted.pools),
                salt=data.get("salt", ""),
                transform_tools=tuple(sorted(((data.get("transforms") or {}).get("tools") or {}).items())),
                cell_gates=tuple(converted.cell_gates), rule_gates=tuple(converted.rule_gates))
            if builder_slug is not None:
                manifest = replace(manifest, targets=tuple(replace(t, builder_slug=builder_slug(t.builder))
                                                           for t in manifest.targets))
            collisions = _address_collisions(manifest) + _noise_findings(manifest, converted.own_gates)
            if collisions:
                findings += collisions
                manifest = None
    # a finding at a defaults entry is made once per target inheriting it: say it once
    problems = tuple(dict.fromkeys(_problem(f, source, redirects) for f in findings))
    names: dict[tuple[str, str], Problem] = {}
    if isinstance(data, dict):
        for section, what in (("models", "model"), ("targets", "target")):
            for i, name in enumerate(_names(data, section)):
                if name is not None:
                    names.setdefault((what, name), _problem(Finding((section, i, "name"), ""), source, {}))
    return LoadedManifest(manifest, problems, names)


def load_all(paths: Iterable[str | os.PathLike], *, capabilities: CapabilitiesFn,
             builder_names: Sequence[str], builder_slug: SlugFn | None = None,
             store_names: Sequence[str] | None = None, absent_files_ok: bool = False) -> tuple[Manifest, ...]:
    loaded = [load_one(p, capabilities=capabilities, builder_names=builder_names, builder_slug=builder_slug,
                       store_names=store_names, absent_files_ok=absent_files_ok) for p in paths]
    problems = [p for one in loaded for p in one.problems]
    first: dict[tuple[str, str], Problem] = {}
    for one in loaded:
        for key, where in one.names.items():
            if key not in first:
                first[key] = where
                continue
            other = first[key]
            what, name = key
            hint = f"{what} names must be unique across manifests planned together; rename one"
            problems.append(Problem(where.file, where.line, where.column, where.path,
                                    f"{what} '{name}' is also defined at {other.location()}", hint))
            problems.append(Problem(other.file, other.line, other.column, other.path,
                                    f"{what} '{name}' is also defined at {where.location()}", hint))
    if problems:
        raise ManifestError(problems)
    return tuple(one.manifest for one in loaded if one.manifest is not None)
