"""Entry-point discovery, load-time validation, and the few lookups that go from a name to a plugin.

First-party plugins register exactly like third-party ones (see pyproject.toml). A plugin that fails to import
or lacks what its group requires is reported with its name, group and the problem, never as a traceback.
Heavy libraries are imported by the plugin's own methods, so loading a plugin is cheap.

Two defaults are named here, and only here: the store a manifest gets when it names none, and the runtime that
computes the parity reference (the original ONNX on onnxruntime's CPU execution provider in fp32, DESIGN "Gates").
So is the one mapping from what a user types as a registry (``--registry``, ``ORCHESTRATE_REGISTRY``, the Python
API's ``registry=``) to a store: an ``oci://`` URL is the OCI store, anything else a local store directory.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import replace
from functools import cache
from importlib import metadata
from typing import Any, Union

from orchestrator.contracts.builder import Builder, Transform
from orchestrator.contracts.ci import CIEmitter
from orchestrator.contracts.identify import Identifier
from orchestrator.contracts.runtime import RefitCapability, Runtime, TritonBackend
from orchestrator.contracts.signer import Signer
from orchestrator.contracts.store import ExistenceCheck, IndexReader, Store
from orchestrator.contracts.task import TaskMetric
from orchestrator.core.artifact import EngineDescriptor, EngineTarget
from orchestrator.core.capabilities import BuilderCapabilities
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import RegistryConfig
from orchestrator.errors import PluginError, UsageError
from orchestrator.hardware import detect

BUILDERS = "trt_orchestrator.builders"
TRANSFORMS = "trt_orchestrator.transforms"
RUNTIMES = "trt_orchestrator.runtimes"
STORES = "trt_orchestrator.stores"
CI = "trt_orchestrator.ci"
TASKS = "trt_orchestrator.tasks"
IDENTIFIERS = "trt_orchestrator.identifiers"
SIGNERS = "trt_orchestrator.signers"

DEFAULT_STORE = "local"
OCI_STORE = "oci"  # the store an oci:// registry URL names
REFERENCE_RUNTIME = "onnxruntime"

# What each group's objects must have: attribute -> "callable" | "attr"
_REQUIRED: dict[str, dict[str, str]] = {
    BUILDERS: {"name": "attr", "runtime": "attr", "slug": "attr", "capabilities": "callable",
               "available": "callable", "build": "callable", "probe_target": "callable"},
    TRANSFORMS: {"kind": "attr", "tools": "attr", "settings": "callable", "run": "callable"},
    RUNTIMES: {"name": "attr", "slug": "attr", "probe": "callable", "can_run": "callable",
               "verify_engine": "callable", "load": "callable"},
    STORES: {},  # a factory: checked as callable below
    CI: {"name": "attr", "max_shards": "attr", "render": "callable"},
    TASKS: {"name": "attr", "metrics": "attr", "evaluate": "callable"},
    IDENTIFIERS: {"name": "attr", "order": "attr", "identify": "callable"},
    SIGNERS: {"name": "attr", "media_type": "attr", "filename": "attr", "available": "callable",
              "accepts": "callable", "sign": "callable", "verify": "callable"},
}


@cache
def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """A group's entry points, read once per process (each read scans every installed distribution's metadata,
    ~6 ms here, and one `plan` asks about a dozen times)."""
    return {ep.name: ep for ep in metadata.entry_points(group=group)}


def names(group: str) -> list[str]:
    return sorted(_entry_points(group))


def validate_plugin(group: str, name: str, obj: Any) -> None:
    """pluggy-style verification: name the plugin, the hook and the problem."""
    if group == STORES:
        if not callable(obj):
            raise PluginError(name, "a store entry point must be a factory callable(RegistryConfig)", group=group)
        return
    for attr, kind in _REQUIRED[group].items():
        if not hasattr(obj, attr):
            raise PluginError(name, f"missing required attribute {attr!r}", group=group,
                              hint=f"plugins in {group} must define: {', '.join(_REQUIRED[group])}")
        if kind == "callable" and not callable(getattr(obj, attr)):
            raise PluginError(name, f"{attr!r} must be callable", group=group)
    declared = getattr(obj, "name", getattr(obj, "kind", name))
    if declared != name:
        raise PluginError(name, f"declares name {declared!r} but is registered as {name!r}", group=group)


@cache
def load(group: str, name: str) -> Any:
    eps = _entry_points(group)
    if name not in eps:
        close = difflib.get_close_matches(name, list(eps), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"installed: {', '.join(sorted(eps)) or 'none'}"
        raise PluginError(name, "no such plugin installed", group=group, hint=hint)
    try:
        obj = eps[name].load()
    except Exception as e:  # any import failure of a plugin module is that plugin's problem, reported by name
        raise PluginError(name, f"failed to load {eps[name].value}: {type(e).__name__}: {e}", group=group) from e
    validate_plugin(group, name, obj)
    return obj


def builder(name: str) -> Builder:
    plugin: Builder = load(BUILDERS, name)
    check_builder_slugs()
    return plugin


@cache
def check_builder_slugs() -> None:
    """Two installed builders with one address slug would give their cells the same addresses (``sm89+trt10.13``):
    refused when builders are loaded, naming both plugins, before any address is made from a slug."""
    seen: dict[str, str] = {}
    for name in names(BUILDERS):
        try:
            slug = str(load(BUILDERS, name).slug)
        except PluginError:
            continue  # reported where that builder is used
        if slug in seen:
            first = seen[slug]
            raise PluginError(name, f"uses the address slug {slug!r}, which builder {first!r} "
                                    f"({_distribution(BUILDERS, first)}) uses too", group=BUILDERS,
                              hint=f"cell addresses would collide; uninstall one of {_distribution(BUILDERS, first)} "
                                   f"and {_distribution(BUILDERS, name)}, or give one builder another slug")
        seen[slug] = name


def _distribution(group: str, name: str) -> str:
    """The distribution (and version) an entry point comes from, for messages: ``onnx-copy-plugin 1.0.0``."""
    dist = getattr(_entry_points(group)[name], "dist", None)
    return f"{dist.metadata['Name']} {dist.version}" if dist is not None else f"the {name!r} plugin"


def recipe(group: str, name: str) -> str:
    """A builder's or transform's recipe version (a build-key input): its ``recipe`` attribute when it states one
    (bumped whenever its output changes), else the version of the distribution it is installed from, so a new
    release of a third-party plugin rebuilds what it built."""
    stated = getattr(load(group, name), "recipe", None)
    if stated is not None:
        if not isinstance(stated, str) or not stated.strip():
            raise PluginError(name, f"'recipe' must be a non-empty string, not {stated!r}", group=group,
                              hint="a version you bump when the plugin's output changes, e.g. recipe = \"2\"")
        return stated
    dist = getattr(_entry_points(group)[name], "dist", None)
    return str(dist.version) if dist is not None else ""


def recipes() -> dict[str, str]:
    """``builder:<name>`` / ``transform:<kind>`` -> the recipe version of every installed builder and transform
    (``core.resolve.ResolveInputs.recipes``); a plugin that fails to load is left out (its cells are blocked)."""
    out: dict[str, str] = {}
    for group, prefix in ((BUILDERS, "builder"), (TRANSFORMS, "transform")):
        for name in names(group):
            try:
                out[f"{prefix}:{name}"] = recipe(group, name)
            except PluginError:
                continue
    return out


def transform(kind: str) -> Transform:
    plugin: Transform = load(TRANSFORMS, kind)
    return plugin


def transform_problems() -> dict[str, str]:
    """Installed transform kinds -> why each cannot run here ("" when it can). A transform may say so itself with
    an optional ``available() -> str | None`` (cheap, no heavy import): a cell it would transform is then
    blocked with that reason at plan time instead of failing its transform step."""
    out: dict[str, str] = {}
    for kind in names(TRANSFORMS):
        try:
            plugin = transform(kind)
        except PluginError as e:
            out[kind] = e.message
            continue
        probe = getattr(plugin, "available", None)
        out[kind] = (probe() or "") if callable(probe) else ""
    return out


def runtime(name: str) -> Runtime:
    plugin: Runtime = load(RUNTIMES, name)
    return plugin


def ci_emitter(name: str) -> CIEmitter:
    plugin: CIEmitter = load(CI, name)
    return plugin


def task(kind: str) -> TaskMetric:
    """The task-metric plugin of a manifest's ``models[].task.kind``."""
    plugin: TaskMetric = load(TASKS, kind)
    return plugin


def identifiers() -> list[Identifier]:
    """Every installed identifier, in the order they are asked (``order``, then name)."""
    found: list[Identifier] = [load(IDENTIFIERS, name) for name in names(IDENTIFIERS)]
    return sorted(found, key=lambda i: (int(i.order), str(i.name)))


def signer(name: str) -> Signer:
    plugin: Signer = load(SIGNERS, name)
    return plugin


def signers() -> list[Signer]:
    """Every installed signer plugin (one that fails to load is reported when it is named)."""
    out = []
    for name in names(SIGNERS):
        try:
            out.append(signer(name))
        except PluginError:
            continue
    return out


def builder_capabilities(name: str, version: str) -> BuilderCapabilities | None:
    """Capabilities of a builder version, or None when the plugin is not installed (the check reports it). A
    stripped or refittable engine needs its runtime to refit it (``contracts.runtime.RefitCapability``): where the
    builder's runtime plugin is installed and cannot, those weights modes are taken away, saying why."""
    if name not in _entry_points(BUILDERS):
        return None
    plugin = builder(name)
    caps = plugin.capabilities(version)
    refitting = caps.weights_modes - {"embedded"}
    if refitting and plugin.runtime in _entry_points(RUNTIMES):
        try:
            found = runtime(plugin.runtime)
        except PluginError:
            return caps
        if not isinstance(found, RefitCapability):
            why = f"its runtime plugin {plugin.runtime!r} has no refit (contracts.runtime.RefitCapability)"
            caps = replace(caps, weights_modes=caps.weights_modes - refitting,
                           weights_missing_reason={**caps.weights_missing_reason, **dict.fromkeys(refitting, why)})
    return caps


def builder_slug(name: str) -> str:
    """A builder's part of a cell address; its name when the plugin is not installed (the check reports it)."""
    if name not in _entry_points(BUILDERS):
        return name
    try:
        return str(builder(name).slug)
    except PluginError:
        return name


def runtime_name_of(builder_name: str) -> str:
    """The runtime that runs a builder's engines, as the builder declares it."""
    return builder(builder_name).runtime


def runtime_for(engine: EngineDescriptor) -> Runtime:
    return runtime(engine.runtime)


def reference_engine(address: str) -> EngineDescriptor:
    """The descriptor the parity reference is loaded with: the original ONNX, CPU, fp32."""
    return EngineDescriptor(address=f"{address} (reference)", precision="fp32", builder=REFERENCE_RUNTIME,
                            builder_version="", runtime=REFERENCE_RUNTIME,
                            target=EngineTarget(name="reference", device="cpu"))


# What the API's verbs take as ``registry=``.
RegistryRef = Union[RegistryConfig, str, os.PathLike[str]]

OCI_SCHEME = "oci://"
# Plain HTTP for a registry on this machine (the OCI store's own rule for loopback hosts), or when asked.
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_INSECURE_SUFFIX = "?insecure"


def parse_registry(text: str, cwd: str) -> RegistryConfig:
    """``oci://host:port/prefix`` (loopback hosts, or a ``?insecure`` suffix: plain HTTP) or a local store
    directory (relative to ``cwd``: a manifest's ``registry.path`` is relative to its folder, and the loader
    resolves that one; what a user types or passes to the API is relative to where they are)."""
    if not text.strip():
        raise UsageError("empty registry", hint="a local store directory (e.g. artifacts) or oci://HOST[:PORT]/PREFIX")
    if text.startswith(OCI_SCHEME):
        url = text[len(OCI_SCHEME):].rstrip("/")
        host = url.split("/", 1)[0]
        insecure = host.split(":")[0] in _LOOPBACK or text.endswith(_INSECURE_SUFFIX)
        return RegistryConfig(store=OCI_STORE, url=url.removesuffix(_INSECURE_SUFFIX), insecure=insecure)
    return RegistryConfig(store=DEFAULT_STORE, path=os.path.normpath(os.path.join(cwd, text)))


def registry_config(ref: RegistryRef, cwd: str) -> RegistryConfig:
    """Any :data:`RegistryRef` as a :class:`RegistryConfig` whose local path, if any, is absolute."""
    if isinstance(ref, RegistryConfig):
        if ref.path is not None and not os.path.isabs(ref.path):
            return replace(ref, path=os.path.normpath(os.path.join(cwd, ref.path)))
        return ref
    text = os.fspath(ref) if isinstance(ref, (str, os.PathLike)) else None
    if isinstance(text, str):
        return parse_registry(text, cwd)
    raise UsageError(f"registry={ref!r} is not a registry",
                     hint="pass a local store directory ('artifacts', a path), an 'oci://HOST[:PORT]/PREFIX' URL or "
                          "an orchestrator.RegistryConfig")


def open_store(ref: RegistryRef) -> Store:
    """The store plugin of a registry: a :class:`RegistryConfig`, a local store directory or an ``oci://`` URL
    (what the Python API's ``registry=`` takes; a relative path is relative to the working directory)."""
    config = registry_config(ref, os.getcwd())
    factory = load(STORES, config.store or DEFAULT_STORE)
    store: Store = factory(config)
    return store


def open_existing_store(config: RegistryRef) -> Store:
    """The store for a reader that needs one to exist (``ls``, ``show``, ``pull``, ``retention``): a local store
    whose directory is missing is an error naming it, never an empty store. The build pipeline keeps
    ``open_store``: a first plan, build or gate before anything was published is normal."""
    store = open_store(config)
    if isinstance(store, ExistenceCheck):
        store.require_existing()
    return store


def registry_index(config: RegistryConfig) -> IndexReader:
    return open_store(config).index()


def runtime_probes() -> dict[str, Any]:
    """Each installed runtime plugin's ``probe`` by name (a plugin that fails to load is left out: ``doctor``
    reports it)."""
    probes = {}
    for name in names(RUNTIMES):
        try:
            probes[name] = runtime(name).probe
        except PluginError:
            continue
    return probes


def triton_backends() -> dict[str, TritonBackend]:
    """Each installed runtime plugin Triton can serve (its optional ``triton`` attribute), by runtime name."""
    found = {}
    for name in names(RUNTIMES):
        try:
            backend = getattr(runtime(name), "triton", None)
        except PluginError:
            continue
        if isinstance(backend, TritonBackend):
            found[name] = backend
    return found


def runtime_slugs() -> dict[str, str]:
    """Each installed runtime plugin's slug (``trt``) -> its name: how ``trt10.13`` names a runtime."""
    slugs = {}
    for name in names(RUNTIMES):
        try:
            slugs[str(runtime(name).slug)] = name
        except PluginError:
            continue
    return slugs


def fingerprint(labels: tuple[str, ...] = ()) -> RunnerFingerprint:
    """This runner's fingerprint: NVML, and what every installed runtime plugin finds of itself."""
    return detect(labels, runtime_probes())
