"""Manifests: YAML in, a validated, typed ``Manifest`` out, or one ``ManifestError`` with every problem.

    load_manifest(path, *, capabilities=None) -> Manifest
    load_manifests(paths, *, capabilities=None) -> tuple[Manifest, ...]   (model/target names unique across files)
    schema() -> dict                                                       (the JSON Schema, for `orchestrate schema`)

``capabilities(builder, version) -> BuilderCapabilities | None`` says what each target's builder can do; by
default the installed builder plugins answer (``orchestrator.plugins.builder_capabilities``), and
``builder_names`` (default: the installed builders) feeds the "did you mean" hint for an unknown builder.

Modules: ``positions`` (YAML with line/column), ``schema`` (JSON Schema and its errors), ``convert`` (data ->
dataclasses, defaults), ``checks`` (semantic checks, pure), ``load`` (files, hashes, problems), ``model``.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

from orchestrator.manifest.checks import CapabilitiesFn
from orchestrator.manifest.load import load_all
from orchestrator.core.model import Manifest
from orchestrator.manifest.schema import schema

__all__ = ["load_manifest", "load_manifests", "schema"]


def _plugins(capabilities: CapabilitiesFn | None, builder_names: Sequence[str] | None):
    # Imported here: the plugin machinery reads entry points, which the pure parts never need.
    from orchestrator import plugins

    caps = capabilities if capabilities is not None else plugins.builder_capabilities
    names = tuple(builder_names) if builder_names is not None else tuple(plugins.names(plugins.BUILDERS))
    return caps, names


def load_manifest(path: str | os.PathLike, *, capabilities: CapabilitiesFn | None = None,
                  builder_names: Sequence[str] | None = None) -> Manifest:
    """Load, validate and type one manifest; raises ``ManifestError`` with every problem found."""
    return load_manifests([path], capabilities=capabilities, builder_names=builder_names)[0]


def load_manifests(paths: Iterable[str | os.PathLike], *, capabilities: CapabilitiesFn | None = None,
                   builder_names: Sequence[str] | None = None) -> tuple[Manifest, ...]:
    """Load several manifests planned together. Problems of all files are reported at once; a model or target
    name defined in two files is a problem at both places. A file named twice is loaded once."""
    caps, names = _plugins(capabilities, builder_names)
    unique = list(dict.fromkeys(os.path.abspath(os.fspath(p)) for p in paths))
    return load_all(unique, capabilities=caps, builder_names=names)
