"""Manifests: YAML in, a validated, typed ``Manifest`` out, or one ``ManifestError`` with every problem.

    load_manifest(path, *, capabilities, builder_names=(), builder_slug=None, store_names=None,
                  absent_files_ok=False) -> Manifest
    load_manifests(paths, *, capabilities, builder_names=(), builder_slug=None, store_names=None,
                   absent_files_ok=False) -> tuple[Manifest, ...]
    schema() -> dict                                     (the JSON Schema, for `orchestrate schema`)

This package is an edge that knows YAML and JSON Schema, not plugins: what the installed builders can do comes
in as functions (``orchestrator.app.project`` passes the plugins'). ``capabilities(builder, version) ->
BuilderCapabilities | None`` says what each target's builder can do; ``builder_names`` feeds the "did you mean"
hint for an unknown builder; ``builder_slug(name)`` gives each target's address slug (``trt`` for tensorrt), which
also lets the loader refuse two targets whose cells would share addresses; ``store_names`` names the installed
stores.

Modules: ``positions`` (YAML with line/column), ``schema`` (JSON Schema and its errors), ``convert`` (data ->
dataclasses, defaults), ``checks`` (semantic checks, pure), ``model_file`` (what an ONNX file holds, read without
its weights), ``files`` (the model and data files on disk), ``load`` (reading the manifest, problems); the
dataclasses themselves are ``orchestrator.core.model``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from orchestrator.core.model import Manifest
from orchestrator.manifest.checks import CapabilitiesFn
from orchestrator.manifest.load import SlugFn, load_all
from orchestrator.manifest.schema import schema

__all__ = ["load_manifest", "load_manifests", "schema"]


def load_manifest(path: str | os.PathLike[str], *, capabilities: CapabilitiesFn, builder_names: Sequence[str] = (),
                  builder_slug: SlugFn | None = None, store_names: Sequence[str] | None = None,
                  absent_files_ok: bool = False) -> Manifest:
    """Load, validate and type one manifest; raises ``ManifestError`` with every problem found."""
    return load_manifests([path], capabilities=capabilities, builder_names=builder_names,
                          builder_slug=builder_slug, store_names=store_names, absent_files_ok=absent_files_ok)[0]


def load_manifests(paths: Iterable[str | os.PathLike[str]], *, capabilities: CapabilitiesFn,
                   builder_names: Sequence[str] = (), builder_slug: SlugFn | None = None,
                   store_names: Sequence[str] | None = None, absent_files_ok: bool = False) -> tuple[Manifest, ...]:
    """Load several manifests planned together. Problems of all files are reported at once; a model or target
    name defined in two files is a problem at both places. A file named twice is loaded once. ``store_names``
    (the installed store plugins) makes an unknown ``registry.store`` a problem; None: not checked.
    ``absent_files_ok``: model and data files that do not exist here are no problem (a deployment's manifest,
    ``pull --build-on-miss``; ``manifest.files``)."""
    unique = list(dict.fromkeys(os.path.abspath(os.fspath(p)) for p in paths))
    return load_all(unique, capabilities=capabilities, builder_names=tuple(builder_names), builder_slug=builder_slug,
                    store_names=tuple(store_names) if store_names is not None else None,
                    absent_files_ok=absent_files_ok)
