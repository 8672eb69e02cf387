"""The PEP 517 build backend of this project: setuptools' own (``setuptools.build_meta``), with one message
silenced in editable installs.

Our two packages come from two folders (``orchestrator/`` and ``plugins/`` installed as
``trt_orchestrator_plugins``), so setuptools makes an editable install with its meta path finder and, on every
``pip install -e .``, emits an ``InformationOnly`` "warning" ("Editable installation. Please be careful with
folders in your working directory...") that pip prints as a ``BuildBackendWarning``. Setuptools uses a warning
only because a backend has no other channel to the user (``InformationOnly``'s docstring, and
https://github.com/pypa/packaging-problems/issues/558); it says nothing about this project, so it is filtered
here, by its category and its exact summary. Every other setuptools warning (deprecations, package data outside
``packages``) still shows, and ``tests/integration/test_packaging.py`` keeps the install free of them.
"""

from __future__ import annotations

import warnings

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every other hook is setuptools' own)
from setuptools.build_meta import __all__ as _hooks
from setuptools.warnings import InformationOnly  # setuptools >= 77, as [build-system] requires

__all__ = list(_hooks)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Editable installation\.", category=InformationOnly)
        return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
