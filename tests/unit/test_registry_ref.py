"""A registry as a user names it (``orchestrator.plugins.registry_config``): the CLI's ``--registry`` and the Python
API's ``registry=`` read it the same way (issue 22.4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.model import RegistryConfig
from orchestrator.errors import UsageError
from orchestrator.plugins import parse_registry, registry_config


@pytest.mark.parametrize("text, expected", [
    ("artifacts", RegistryConfig(store="local", path="/work/artifacts")),
    ("./a/../artifacts/", RegistryConfig(store="local", path="/work/artifacts")),
    ("/srv/engines", RegistryConfig(store="local", path="/srv/engines")),
    ("oci://127.0.0.1:5000/engines/", RegistryConfig(store="oci", url="127.0.0.1:5000/engines", insecure=True)),
    ("oci://localhost:5000/e", RegistryConfig(store="oci", url="localhost:5000/e", insecure=True)),
    ("oci://ghcr.io/acme/engines", RegistryConfig(store="oci", url="ghcr.io/acme/engines", insecure=False)),
    ("oci://reg.lan:5000/e?insecure", RegistryConfig(store="oci", url="reg.lan:5000/e", insecure=True)),
])
def test_parse(text, expected):
    assert parse_registry(text, "/work") == expected


def test_a_config_with_a_relative_path_is_relative_to_the_working_directory():
    assert registry_config(RegistryConfig(path="artifacts"), "/work") == RegistryConfig(path="/work/artifacts")
    absolute = RegistryConfig(store="local", path="/srv/e")
    assert registry_config(absolute, "/work") is absolute
    oci = RegistryConfig(store="oci", url="ghcr.io/acme/e")
    assert registry_config(oci, "/work") is oci
    assert registry_config(Path("artifacts"), "/work") == RegistryConfig(store="local", path="/work/artifacts")


@pytest.mark.parametrize("bad", ["", "  ", 3, None, b"artifacts", ["artifacts"]])
def test_anything_else_is_refused_with_what_to_pass(bad):
    with pytest.raises(UsageError) as info:
        registry_config(bad, "/work")
    assert "oci://" in info.value.hint
