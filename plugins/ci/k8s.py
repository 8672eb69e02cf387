"""The Kubernetes emitter: a Plan -> Indexed Jobs that build and gate each shard on a node with the right GPU, in
the shard's own toolchain image, onto a shared volume that a final Job publishes from.

What is emitted (one multi-document YAML, every object schema-valid for Kubernetes >= 1.30):

- a **PersistentVolumeClaim** (``ReadWriteMany``; or ``volume_claim=`` names one that exists): the cache every pod
  shares (``ORCHESTRATE_CACHE``), so the publish Job finds what the shards built and gated, and a ``done/`` folder
  where each shard pod leaves its exit status;
- per **chunk** of shards (same runner labels, toolchain and GPU placement; split further by size), a
  **ConfigMap** holding that chunk's slice of the plan (its shards' cells plus the plan's header: manifests,
  models and registry state, which ``build --plan`` checks) and its shard ids, and an **Indexed Job** whose pod
  ``i`` runs shard ``i`` (line ``i + 1`` of ``shards.txt``): ``verify-shard``, ``build``, ``gate``;
- one **publish Job**: it waits until every shard pod left its status (or ``publish_wait_s`` passed), joins the
  chunks' slices into the plan again and runs ``orchestrate publish --plan``, with the registry login from a
  named Secret.

Why the plan travels in slices: a ConfigMap is capped at 1 MiB (the API server's object size limit), and a large
fleet's plan is bigger. Each pod needs only its shard's cells, so each Job gets only its chunk's slice; a label
set whose slice would not fit is split over several Jobs. Fetching the plan from the registry instead would make
the registry hold run state; one ConfigMap per chunk keeps the objects self-contained and reviewable. Why one
publish at the end, not a publish per shard: every verb given ``--plan`` refuses a plan made against a registry
state that has since moved, so the first shard to publish would make every later shard's plan stale.

Where each shard runs (GPU Feature Discovery, the labels NVIDIA's GFD puts on every GPU node; their list:
https://github.com/NVIDIA/k8s-device-plugin/blob/main/docs/gfd_labels.md): a shard whose targets run on a GPU
asks for one (``nvidia.com/gpu: 1``, the NVIDIA device plugin's resource) and a node whose
``nvidia.com/gpu.compute.major``/``.minor`` is one of its compute capabilities (``Gt 7`` for ``ampere_plus``
engines), and whose ``nvidia.com/gpu.product`` is the GPU model the manifest's runner pool names, when it names
one (GFD writes the model's name with ``-`` for spaces: ``NVIDIA-L4``, ``Tesla-T4``). CPU-only shards ask for no
GPU. Runner labels are GitHub/GitLab runner names, not node labels: they stay as an annotation.

The pod's repository: an init container (git-sync, the Kubernetes project's own, one-time) checks out
``repo_url`` at ``revision`` into the pod; the tool is installed from that checkout (``.[extras]``, as in the
other emitters) unless ``tool_spec`` pins one. Every script is a constant of this module: shard ids, images, pins
and specs reach pods only as files and environment variables.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from orchestrator.core.model import RegistryConfig, RunnerPool, Target
from orchestrator.core.plan import Plan, Shard
from orchestrator.core.toolchain import IMAGE_RE, INDEX_URL_RE, REQUIREMENT_RE, ResolvedToolchain
from orchestrator.errors import CIError

OUTPUT_PATH = "k8s/engines.yaml"
CONFIGMAP_LIMIT = 1024 * 1024  # the API server refuses bigger objects (etcd's request size)
# room for the ConfigMap's own metadata and the shard list next to the plan slice
SLICE_BUDGET = CONFIGMAP_LIMIT - 64 * 1024
# GPU Feature Discovery's node labels and the device plugin's resource (module docstring)
GPU_RESOURCE = "nvidia.com/gpu"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_CC_MAJOR = "nvidia.com/gpu.compute.major"
GFD_CC_MINOR = "nvidia.com/gpu.compute.minor"
RUNNER_LABELS_ANNOTATION = "trt-orchestrator/runner-labels"
# kubernetes/git-sync v4 (registry.k8s.io is the Kubernetes project's registry): --one-time clones and exits
GIT_SYNC_IMAGE = "registry.k8s.io/git-sync/git-sync:v4.4.0"
DEFAULT_PYTHON = "3.11"
DEFAULT_TOOL_SPEC = ".[ort]"
PUBLISH_WAIT_S = 24 * 3600
SHARED = "/shared"
CHECKOUT = "/work/git/repo"
_SHARD_ID = re.compile(r"[A-Za-z0-9_.@~+-]{1,200}")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SECRET = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_PRODUCT = re.compile(r"[^A-Za-z0-9_.-]+")
_SAFE_PYTHON = re.compile(r"[0-9]+(\.[0-9]+){0,2}")

# A shard pod: its shard id from the chunk's list by completion index, its toolchain, then the shard's verbs. It
# leaves its exit status in the shared done/ folder whatever happens (the publish Job waits for them).
_SHARD_SCRIPT = """set -eu
shard="$(sed -n "$((JOB_COMPLETION_INDEX + 1))p" /plan/shards.txt)"
if [ -z "$shard" ]; then
  echo "no shard at index $JOB_COMPLETION_INDEX in /plan/shards.txt" >&2
  exit 1
fi
mkdir -p "$SHARED/done"
trap 'echo "$?" > "$SHARED/done/$shard"' EXIT
case "$TOOLCHAIN" in
  pip)
    python3 -m venv /work/venv
    PATH="/work/venv/bin:$PATH"
    printf '%s\\n' "$TOOLCHAIN_REQUIREMENTS" > /work/requirements.txt
    if [ -n "$TOOLCHAIN_INDEX_URL" ]; then
      python3 -m pip install -r /work/requirements.txt --extra-index-url "$TOOLCHAIN_INDEX_URL"
    else
      python3 -m pip install -r /work/requirements.txt
    fi
    ;;
  container|runner)
    export PIP_BREAK_SYSTEM_PACKAGES=1  # the image's own Python has TensorRT (PEP 668 images refuse otherwise)
    ;;
esac
if [ -n "$TOOL_SPEC" ]; then python3 -m pip install "$TOOL_SPEC"; fi
orchestrate ci verify-shard --plan /plan/plan.json --shard "$shard" --role build
orchestrate build --plan /plan/plan.json --shard "$shard"
orchestrate gate --plan /plan/plan.json --shard "$shard"
"""

# The publish pod: wait for every shard's status (bounded), join the chunks' slices into one plan, publish it.
_PUBLISH_PY = """import json, os, pathlib, sys, time
chunks = sorted(pathlib.Path(os.environ.get("PLANS_DIR", "/plans")).glob("*/plan.json"),
                key=lambda p: int(p.parent.name))
parts = [json.loads(p.read_text()) for p in chunks]
plan = dict(parts[0], cells=[c for p in parts for c in p["cells"]], shards=[s for p in parts for s in p["shards"]])
ids = [s["id"] for s in plan["shards"]]
done = pathlib.Path(os.environ["SHARED"]) / "done"
deadline = time.time() + int(os.environ["PUBLISH_WAIT_S"])
while True:
    missing = [i for i in ids if not (done / i).exists()]
    if not missing:
        break
    if time.time() > deadline:
        print(f"{len(missing)} shard(s) never finished: publishing what did: {missing}", file=sys.stderr)
        break
    time.sleep(float(os.environ.get("POLL_S", "30")))
pathlib.Path(os.environ.get("PLAN_OUT", "/work/plan.json")).write_text(json.dumps(plan))
"""
_PUBLISH_SCRIPT = """set -eu
python3 -c "$PUBLISH_PY"
if [ -n "$TOOL_SPEC" ]; then python3 -m pip install "$TOOL_SPEC"; fi
exec orchestrate publish --plan "${PLAN_OUT:-/work/plan.json}"
"""


def gpu_product_label(gpu_name: str) -> str:
    """The value GFD gives ``nvidia.com/gpu.product`` for a GPU model name: ``NVIDIA L4`` -> ``NVIDIA-L4``."""
    return _PRODUCT.sub("-", gpu_name.strip()).strip("-_.")[:63]


@dataclass(frozen=True)
class Placement:
    """Where a shard's pods go: a GPU or not, the compute capabilities (any of them), a GFD product name."""

    gpu: bool
    ccs: tuple[str, ...] = ()
    ampere_plus: bool = False
    product: str | None = None

    def affinity(self) -> dict[str, Any] | None:
        if not self.gpu:
            return None
        base = [{"key": GFD_PRODUCT, "operator": "In", "values": [self.product]}] if self.product else []
        if self.ampere_plus:  # any GPU of compute capability 8.0 or newer
            terms = [base + [{"key": GFD_CC_MAJOR, "operator": "Gt", "values": ["7"]}]]
        elif self.ccs:  # terms are ORed: a node of any of the shard's compute capabilities
            terms = [base + [{"key": GFD_CC_MAJOR, "operator": "In", "values": [cc.split(".")[0]]},
                             {"key": GFD_CC_MINOR, "operator": "In", "values": [cc.split(".")[1]]}]
                     for cc in self.ccs]
        elif base:
            terms = [base]
        else:
            return None
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


def placement(shard: Shard, targets: Mapping[str, Target], pools: Sequence[RunnerPool]) -> Placement:
    """A shard gates what its node can run, so it asks for the GPU its targets' engines run on."""
    mine = [targets[t] for t in shard.targets if t in targets]
    if not mine or all(t.device == "cpu" for t in mine):
        return Placement(gpu=False)
    ccs = sorted({cc for t in mine for cc in t.compute_capabilities if "." in cc})
    ampere = any(t.hardware_compatibility == "ampere_plus" for t in mine) and not ccs
    products = {p.gpu for p in pools if p.gpu and set(p.labels) == set(shard.build_labels)}
    product = gpu_product_label(products.pop()) if len(products) == 1 else None
    return Placement(gpu=True, ccs=tuple(ccs), ampere_plus=ampere, product=product)


def _check_shard(shard: Shard) -> None:
    if not _SHARD_ID.fullmatch(shard.id):
        raise CIError(f"shard id {shard.id!r} in the plan cannot name a file",
                      hint="re-create the plan with `orchestrate plan` (shard ids are slugs)")
    tc = shard.toolchain
    if tc.kind == "container" and not IMAGE_RE.match(tc.image):
        raise CIError(f"container image {tc.image!r} of shard {shard.id} is not an image reference",
                      hint="registry/path:tag or registry/path@sha256:<64 hex>")
    if tc.kind == "pip" and (not tc.requirements or any(not REQUIREMENT_RE.match(r) for r in tc.requirements)
                             or (tc.index_url and not INDEX_URL_RE.match(tc.index_url))):
        raise CIError(f"shard {shard.id}: pip toolchain {tc.describe()!r} is not plain pins",
                      hint="re-create the plan with `orchestrate plan`")


def _image(tc: ResolvedToolchain, shard: Shard, runner_image: str | None, python_image: str) -> str:
    if tc.kind == "container":
        return tc.image
    if tc.kind == "pip":
        return python_image
    if runner_image is None:
        raise CIError(f"shard {shard.id} uses the runner toolchain (TensorRT installed on the machine): a pod has "
                      "no machine install", hint="pass --image IMAGE (an image with that TensorRT and Python), or "
                                                 "give its targets `toolchain: container` or `toolchain: pip`")
    return runner_image


def _slice(plan: Plan, shards: Sequence[Shard]) -> dict[str, Any]:
    ids = {s.id for s in shards}
    full = plan.to_json()
    return {**full, "cells": [c for c in full["cells"] if c.get("shard") in ids],
            "shards": [s.to_json() for s in shards]}


def _chunks(plan: Plan, shards: Sequence[Shard]) -> list[tuple[list[Shard], str]]:
    """Consecutive runs of ``shards`` whose slice of the plan fits a ConfigMap, each with that slice's text."""
    out: list[tuple[list[Shard], str]] = []
    current: list[Shard] = []
    text = ""
    for shard in shards:
        trial = json.dumps(_slice(plan, [*current, shard]), indent=1, sort_keys=True) + "\n"
        if len(trial.encode()) <= SLICE_BUDGET:
            current, text = [*current, shard], trial
            continue
        if not current:
            raise CIError(f"shard {shard.id} alone is {len(trial.encode())} bytes of plan, more than a ConfigMap "
                          f"holds ({CONFIGMAP_LIMIT})", hint="give its targets several runner label sets, or plan "
                                                             "fewer manifests at once")
        out.append((current, text))
        current = [shard]
        text = json.dumps(_slice(plan, current), indent=1, sort_keys=True) + "\n"
    if current:
        out.append((current, text))
    return out


def _dns_name(prefix: str, key: str, index: int) -> str:
    """A DNS-1123 label: the prefix, a readable slug and a hash (two groups never collide)."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")[:24].strip("-") or "any"
    head = f"{prefix}-{slug}"[: 63 - len(digest) - 5].rstrip("-")
    return f"{head}-{index}-{digest}"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (scripts, plan slices, shard lists) as literal blocks, so the file reads as text."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and all(line == line.rstrip() for line in value.split("\n")) and value.isascii():
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def _env(values: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _registry_env(secret: str | None) -> list[dict[str, Any]]:
    """The OCI store's login variables from the Secret's ``username`` and ``password`` keys."""
    if secret is None:
        return []
    return [{"name": f"ORCHESTRATE_REGISTRY_{key.upper()}",
             "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}} for key in ("username", "password")]


@dataclass(frozen=True)
class KubernetesEmitter:
    name: str = "k8s-indexed-job"
    max_shards: int | None = None  # Jobs scale with the plan: no matrix limit

    def render(self, plan: Plan, manifests: list[str], *, image: str | None = None, name: str = "engines",
               namespace: str | None = None, output_path: str = OUTPUT_PATH, backoff_limit_per_index: int = 1,
               tool_spec: str | None = None, default_tool_spec: str = DEFAULT_TOOL_SPEC,
               python: str = DEFAULT_PYTHON, repo_url: str | None = None, revision: str | None = None,
               git_image: str = GIT_SYNC_IMAGE, volume_claim: str | None = None, volume_size: str = "100Gi",
               registry_secret: str | None = None, targets: Mapping[str, Target] | None = None,
               pools: Sequence[RunnerPool] = (), registry: RegistryConfig | None = None,
               publish_wait_s: int = PUBLISH_WAIT_S) -> dict[str, str]:
        """{output_path: a multi-document YAML}: the shared volume's claim, a ConfigMap and an Indexed Job per
        chunk of shards, and the publish Job. ``targets``/``pools``: the manifests' targets by name and runner
        pools (where each shard runs); ``registry`` is accepted for the app's common context."""
        if not plan.shards:
            raise CIError("the plan has no shards: nothing to build", hint="`orchestrate plan` shows why")
        if not _DNS_LABEL.fullmatch(name) or len(name) > 30:
            raise CIError(f"name {name!r} is not a short DNS label", hint="lowercase letters, digits and '-'")
        for what, value in (("namespace", namespace), ("volume claim", volume_claim),
                            ("registry secret", registry_secret)):
            if value is not None and not (_SECRET.fullmatch(value) and len(value) <= 253):
                raise CIError(f"{what} {value!r} is not a Kubernetes name", hint="lowercase letters, digits, '-', '.'")
        for what, value in (("image", image), ("git image", git_image)):
            if value is not None and not IMAGE_RE.match(value):
                raise CIError(f"{what} {value!r} is not an image reference",
                              hint="registry/path:tag or registry/path@sha256:<64 hex>")
        if not _SAFE_PYTHON.fullmatch(python):
            raise CIError(f"python version {python!r} is not a plain version", hint="e.g. 3.11")
        if not repo_url or not revision:
            raise CIError("the pods check the repository out, and need its URL and commit",
                          hint="pass --repo-url URL --revision SHA (by default: git's origin and HEAD)")
        spec = tool_spec if tool_spec is not None else default_tool_spec
        python_image = f"python:{python}-slim"
        targets = targets or {}
        ns = {"namespace": namespace} if namespace else {}
        common = {"app.kubernetes.io/name": "trt-orchestrator", "app.kubernetes.io/part-of": name}
        claim = volume_claim or f"{name}-work"
        documents: list[dict[str, Any]] = []
        if volume_claim is None:
            documents.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                              "metadata": {"name": claim, "labels": dict(common), **ns},
                              "spec": {"accessModes": ["ReadWriteMany"],
                                       "resources": {"requests": {"storage": volume_size}}}})

        checkout = {"name": "checkout", "image": git_image,
                    "args": ["--repo=$(REPO_URL)", "--ref=$(REVISION)", "--root=/work/git", "--link=repo",
                             "--one-time"],
                    "env": _env({"REPO_URL": repo_url, "REVISION": revision}),
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}]}
        shared_env = {"SHARED": SHARED, "ORCHESTRATE_CACHE": f"{SHARED}/cache", "TOOL_SPEC": spec}
        mounts = [{"name": "work", "mountPath": "/work"}, {"name": "shared", "mountPath": SHARED}]

        groups: dict[tuple[Any, ...], list[Shard]] = {}
        for shard in sorted(plan.shards, key=lambda s: s.id):
            _check_shard(shard)
            where = placement(shard, targets, pools)
            groups.setdefault((shard.build_labels, shard.toolchain.digest(), where), []).append(shard)
        plan_sources = []
        for (labels, _, where), shards in sorted(groups.items(), key=lambda kv: kv[1][0].id):
            for chunk, text in _chunks(plan, shards):
                index = len(plan_sources)
                job_name = _dns_name(name, "-".join(labels) or "any", index)
                config = f"{job_name}-plan"
                plan_sources.append({"configMap": {"name": config, "items": [
                    {"key": "plan.json", "path": f"{index}/plan.json"}]}})
                documents.append({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": config, "labels": dict(common), **ns},
                                  "data": {"plan.json": text, "shards.txt": "".join(s.id + "\n" for s in chunk)}})
                tc = chunk[0].toolchain
                env = {**shared_env, "TOOLCHAIN": tc.kind, "TOOLCHAIN_REQUIREMENTS": "\n".join(tc.requirements),
                       "TOOLCHAIN_INDEX_URL": tc.index_url}
                container: dict[str, Any] = {
                    "name": "orchestrate", "image": _image(tc, chunk[0], image, python_image),
                    "command": ["/bin/sh", "-c", _SHARD_SCRIPT], "workingDir": CHECKOUT,
                    "env": _env(env) + _registry_env(registry_secret),
                    "volumeMounts": [*mounts, {"name": "plan", "mountPath": "/plan", "readOnly": True}]}
                if where.gpu:
                    container["resources"] = {"limits": {GPU_RESOURCE: 1}}
                pod: dict[str, Any] = {
                    "restartPolicy": "Never",  # required by backoffLimitPerIndex
                    "initContainers": [checkout], "containers": [container],
                    "volumes": [{"name": "work", "emptyDir": {}},
                                {"name": "shared", "persistentVolumeClaim": {"claimName": claim}},
                                {"name": "plan", "configMap": {"name": config}}]}
                affinity = where.affinity()
                if affinity:
                    pod["affinity"] = affinity
                documents.append({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": job_name, "labels": {**common, "app.kubernetes.io/component": "build"},
                                 "annotations": {RUNNER_LABELS_ANNOTATION: json.dumps(list(labels)),
                                                 "trt-orchestrator/shards": json.dumps([s.id for s in chunk])},
                                 **ns},
                    "spec": {"completionMode": "Indexed", "completions": len(chunk), "parallelism": len(chunk),
                             # like `fail-fast: false`: one shard failing does not stop the others (Kubernetes >= 1.29)
                             "backoffLimitPerIndex": backoff_limit_per_index,
                             "template": {"metadata": {"labels": {**common, "app.kubernetes.io/component": "build"}},
                                          "spec": pod}}})

        publish = {"name": "publish", "image": python_image, "command": ["/bin/sh", "-c", _PUBLISH_SCRIPT],
                   "workingDir": CHECKOUT,
                   "env": _env({**shared_env, "PUBLISH_WAIT_S": str(publish_wait_s), "PUBLISH_PY": _PUBLISH_PY})
                   + _registry_env(registry_secret),
                   "volumeMounts": [*mounts, {"name": "plans", "mountPath": "/plans", "readOnly": True}]}
        documents.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-publish", "labels": {**common, "app.kubernetes.io/component": "publish"},
                         "annotations": {"trt-orchestrator/manifests": json.dumps(sorted(set(manifests)))}, **ns},
            "spec": {"backoffLimit": 1, "activeDeadlineSeconds": publish_wait_s + 6 * 3600,
                     "template": {"metadata": {"labels": {**common, "app.kubernetes.io/component": "publish"}},
                                  "spec": {"restartPolicy": "Never", "initContainers": [checkout],
                                           "containers": [publish],
                                           "volumes": [{"name": "work", "emptyDir": {}},
                                                       {"name": "shared",
                                                        "persistentVolumeClaim": {"claimName": claim}},
                                                       {"name": "plans", "projected": {"sources": plan_sources}}]}}}})
        return {output_path: yaml.dump_all(documents, Dumper=_Dumper, sort_keys=True, default_flow_style=False,
                                           allow_unicode=False, width=10_000, explicit_start=True)}


emitter = KubernetesEmitter()
