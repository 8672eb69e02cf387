"""Plugins load through entry points and are checked on load; errors name the plugin, the group and the problem."""

from __future__ import annotations

import pytest

from orchestrator import plugins
from orchestrator.contracts.builder import BuilderCapabilities
from orchestrator.errors import PluginError


def test_first_party_plugins_register_like_third_party_ones():
    assert set(plugins.names(plugins.BUILDERS)) >= {"tensorrt-rtx", "tensorrt", "trtexec", "onnxruntime"}
    assert set(plugins.names(plugins.TRANSFORMS)) >= {"fp16", "bf16", "int8-qdq"}
    assert set(plugins.names(plugins.RUNTIMES)) >= {"onnxruntime", "tensorrt", "tensorrt-rtx"}
    assert set(plugins.names(plugins.STORES)) >= {"local", "oci"}
    assert set(plugins.names(plugins.CI)) >= {"github", "k8s-indexed-job"}
    for group in (plugins.BUILDERS, plugins.TRANSFORMS, plugins.RUNTIMES, plugins.STORES, plugins.CI):
        for name in plugins.names(group):
            plugins.load(group, name)  # each one passes its load-time check


def test_every_builder_declares_capabilities_per_version():
    for name in plugins.names(plugins.BUILDERS):
        caps = plugins.builder(name).capabilities("10.13.3.9" if name in ("tensorrt", "trtexec") else "1.7.1.116")
        assert isinstance(caps, BuilderCapabilities)
        assert caps.target_kinds and caps.runs_on


def test_unknown_plugin_suggests_a_close_name():
    with pytest.raises(PluginError) as e:
        plugins.builder("tensorrt-rtz")
    assert ("plugin 'tensorrt-rtz' (entry point group trt_orchestrator.builders): no such plugin installed"
            in str(e.value))
    assert e.value.hint == "did you mean 'tensorrt-rtx'?"


class _NoBuild:
    name = "broken"
    runtime = "broken-rt"
    slug = "broken"

    def probe_target(self, fingerprint):
        return None

    def capabilities(self, version):
        return None

    def available(self, fingerprint, target):
        return None


class _WrongName(_NoBuild):
    name = "other"

    def build(self, request):
        return None


class _NotCallable(_NoBuild):
    build = "not a function"


def test_a_plugin_missing_a_hook_is_named_with_the_hook():
    with pytest.raises(PluginError) as e:
        plugins.validate_plugin(plugins.BUILDERS, "broken", _NoBuild())
    assert str(e.value).startswith("plugin 'broken' (entry point group trt_orchestrator.builders): "
                                   "missing required attribute 'build'")
    assert "capabilities, available, build, probe_target" in e.value.hint


def test_a_hook_that_is_not_callable_is_refused():
    with pytest.raises(PluginError, match="'build' must be callable"):
        plugins.validate_plugin(plugins.BUILDERS, "broken", _NotCallable())


def test_a_plugin_registered_under_another_name_is_refused():
    with pytest.raises(PluginError, match="declares name 'other' but is registered as 'broken'"):
        plugins.validate_plugin(plugins.BUILDERS, "broken", _WrongName())


def test_a_store_entry_point_must_be_a_factory():
    with pytest.raises(PluginError, match="must be a factory"):
        plugins.validate_plugin(plugins.STORES, "weird", object())


def test_loading_plugins_imports_no_heavy_library():
    import subprocess
    import sys

    code = ("import sys; from orchestrator import plugins\n"
            "for g in (plugins.BUILDERS, plugins.TRANSFORMS, plugins.RUNTIMES, plugins.STORES, plugins.CI):\n"
            "    [plugins.load(g, n) for n in plugins.names(g)]\n"
            "heavy = [m for m in ('tensorrt', 'tensorrt_rtx', 'onnxruntime', 'oras', 'pynvml', 'torch') "
            "if m in sys.modules]\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_a_runtime_without_refit_takes_the_refitting_weights_modes_away(monkeypatch):
    """A builder may offer weights: stripped/refittable only where its runtime plugin can refit
    (``contracts.runtime.RefitCapability``): validate then refuses those targets, naming the runtime (issue 25)."""
    offered = frozenset({"embedded", "stripped", "refittable"})

    class Builder:
        name, runtime = "b", "r"

        def capabilities(self, version):
            return BuilderCapabilities(native=frozenset(), via_transform=frozenset(), target_kinds=frozenset({"cpu"}),
                                       needs_gpu=False, runs_on="cpu", weights_modes=offered)

    class Runtime:
        name = "r"

    class Refitting(Runtime):
        def refit(self, request):
            return None

    chosen = {"runtime": Runtime()}
    monkeypatch.setattr(plugins, "_entry_points",
                        lambda group: {"b": None} if group == plugins.BUILDERS else {"r": None})
    monkeypatch.setattr(plugins, "builder", lambda name: Builder())
    monkeypatch.setattr(plugins, "runtime", lambda name: chosen["runtime"])
    caps = plugins.builder_capabilities("b", "1.0")
    assert caps.weights_modes == frozenset({"embedded"})
    assert caps.weights_missing_reason["stripped"] == caps.weights_missing_reason["refittable"] == \
        "its runtime plugin 'r' has no refit (contracts.runtime.RefitCapability)"
    chosen["runtime"] = Refitting()
    assert plugins.builder_capabilities("b", "1.0").weights_modes == offered
