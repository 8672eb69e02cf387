"""The Kubernetes emitter (issue 22.11): objects validated against Kubernetes' own JSON schemas (the
`kubernetes-validate` package ships them, offline), and the semantics a schema cannot see: a GPU is requested
where a shard's engines run on one, nodes are chosen by the labels NVIDIA GPU Feature Discovery sets, each shard
runs in its toolchain's image, what the shards build reaches a shared volume that the publish Job publishes from
with the registry login of a named Secret, and a plan of any size reaches the pods (ConfigMaps of at most 1 MiB).
The pods' scripts run for real here with a stand-in `orchestrate`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator import plugins
from orchestrator.core.plan import Plan, PlanEntry, Shard, plan_from_json
from orchestrator.core.toolchain import ResolvedToolchain
from orchestrator.errors import CIError
from trt_orchestrator_plugins.ci.k8s import CONFIGMAP_LIMIT, OUTPUT_PATH, emitter, gpu_product_label

from .ci_fixtures import HOSTILE, hostile_manifest, load, model_entry, plan_for_workflow, trt_target, write_manifest

K8S_VERSION = "1.30"  # backoffLimitPerIndex is beta from 1.29; the schemas of 1.30 know it
REPO_URL, REVISION = "https://git.example/acme/engines.git", "0123456789abcdef0123456789abcdef01234567"
RUNNER_IMAGE = "registry.example/trt-runner:10.13"
TRT_IMAGE = "nvcr.io/nvidia/tensorrt:25.08-py3"


@pytest.fixture
def manifests(tmp_path: Path):
    targets = [
        {**trt_target("l4", "8.9", ["self-hosted", "gpu", "l4"]),
         "toolchain": {"kind": "container", "image": TRT_IMAGE}},
        trt_target("a10", "8.6", ["self-hosted", "gpu", "a10"], version="10.12.0.36"),
        {"name": "cpu", "builder": "onnxruntime", "builder_version": "1.31", "device": "cpu",
         "runners": {"build": ["ubuntu-latest"]}},
    ]
    path = write_manifest(tmp_path, "fleet.yaml", [model_entry("det", ["fp32", "fp16"]), model_entry("cls")], targets)
    text = yaml.safe_load(path.read_text())
    text["runners"] = [{"labels": ["self-hosted", "gpu", "l4"], "gpu": "NVIDIA L4", "compute_capability": "8.9"},
                       {"labels": ["self-hosted", "gpu", "a10"]}, {"labels": ["ubuntu-latest"]}]
    path.write_text(yaml.safe_dump(text, sort_keys=False))
    return load(path)


@pytest.fixture
def plan(manifests):
    return plan_for_workflow(manifests)


def render(plan, manifests=(), **kw) -> list[dict]:
    context = {"targets": {t.name: t for m in manifests for t in m.targets},
               "pools": tuple(p for m in manifests for p in m.runner_pools),
               "repo_url": REPO_URL, "revision": REVISION, "image": RUNNER_IMAGE, **kw}
    files = emitter.render(plan, ["manifests/fleet.yaml"], **context)
    assert list(files) == [OUTPUT_PATH]
    return list(yaml.safe_load_all(files[OUTPUT_PATH]))


def jobs_of(docs: list[dict]) -> dict[str, dict]:
    """Build Jobs by their first shard's target set."""
    return {tuple(json.loads(d["metadata"]["annotations"]["trt-orchestrator/runner-labels"])): d
            for d in docs if d["kind"] == "Job" and d["metadata"]["labels"]["app.kubernetes.io/component"] == "build"}


def pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_registered_through_entry_points():
    assert plugins.load(plugins.CI, "k8s-indexed-job") is emitter


def test_validates_against_the_kubernetes_schemas(plan, manifests):
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate (Kubernetes JSON schemas) is missing: "
                                      "run scripts/setup-env.sh test")
    docs = render(plan, manifests, namespace="ml", registry_secret="engines-push")
    kinds = [d["kind"] for d in docs]
    assert kinds[0] == "PersistentVolumeClaim" and kinds.count("Job") == kinds.count("ConfigMap") + 1
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    broken = json.loads(json.dumps(docs[-1]))  # negative control: the validator does reject a malformed Job
    broken["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": [1]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_gpu_limits_and_gpu_feature_discovery_node_labels(plan, manifests):
    jobs = jobs_of(render(plan, manifests))
    l4, a10, cpu = (jobs[("self-hosted", "gpu", "l4")], jobs[("self-hosted", "gpu", "a10")], jobs[("ubuntu-latest",)])
    for job, cc in ((l4, ("8", "9")), (a10, ("8", "6"))):
        (container,) = pod(job)["containers"]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}
        (term,) = pod(job)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        expressions = {e["key"]: (e["operator"], e["values"]) for e in term["matchExpressions"]}
        assert expressions["nvidia.com/gpu.compute.major"] == ("In", [cc[0]])
        assert expressions["nvidia.com/gpu.compute.minor"] == ("In", [cc[1]])
    # the runner pool of the L4 label set names its GPU model: GFD's product label
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]} in \
        pod(l4)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"]
    assert "nvidia.com/gpu.product" not in json.dumps(pod(a10)["affinity"])  # its pool names no model
    assert "resources" not in pod(cpu)["containers"][0] and "affinity" not in pod(cpu)
    for job in (l4, a10, cpu):  # no made-up node labels
        assert "nodeSelector" not in pod(job) and "trt-orchestrator/label" not in json.dumps(pod(job))


@pytest.mark.parametrize("name, product", [("NVIDIA L4", "NVIDIA-L4"), ("Tesla T4", "Tesla-T4"),
                                           ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3")])
def test_gpu_product_label(name, product):
    assert gpu_product_label(name) == product


def test_each_shard_runs_in_its_toolchains_image(plan, manifests):
    jobs = jobs_of(render(plan, manifests))
    l4 = pod(jobs[("self-hosted", "gpu", "l4")])["containers"][0]
    assert l4["image"] == TRT_IMAGE and env(l4)["TOOLCHAIN"] == "container"
    a10 = pod(jobs[("self-hosted", "gpu", "a10")])["containers"][0]
    assert a10["image"] == RUNNER_IMAGE and env(a10)["TOOLCHAIN"] == "runner"
    with pytest.raises(CIError, match="runner toolchain") as info:
        render(plan, manifests, image=None)
    assert "--image" in info.value.hint


def test_a_pip_toolchain_installs_its_pins_in_a_python_image():
    tc = ResolvedToolchain(kind="pip", requirements=("tensorrt-cu12==10.13.3.9",), index_url="https://pypi.nvidia.com")
    plan = Plan(entries=(), shards=(Shard(id="s1", build_labels=("gpu",), gate_labels=("gpu",), targets=(),
                                          addresses=(), toolchain=tc),), registry_state="empty")
    (job,) = jobs_of(render(plan)).values()
    container = pod(job)["containers"][0]
    assert container["image"] == "python:3.11-slim"
    assert env(container)["TOOLCHAIN_REQUIREMENTS"] == "tensorrt-cu12==10.13.3.9"
    assert env(container)["TOOLCHAIN_INDEX_URL"] == "https://pypi.nvidia.com"


def test_shards_share_a_volume_and_the_publish_job_has_the_registry_secret(plan, manifests):
    docs = render(plan, manifests, registry_secret="engines-push")
    claim = docs[0]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    jobs = [d for d in docs if d["kind"] == "Job"]
    publish = jobs[-1]
    assert publish["metadata"]["labels"]["app.kubernetes.io/component"] == "publish"
    for job in jobs:
        spec = pod(job)
        assert {"name": "shared", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} in spec["volumes"]
        (container,) = spec["containers"]
        assert env(container)["ORCHESTRATE_CACHE"] == "/shared/cache"
        assert env(container)["ORCHESTRATE_REGISTRY_PASSWORD"] == {
            "secretKeyRef": {"name": "engines-push", "key": "password"}}
        (checkout,) = spec["initContainers"]  # every pod checks the repository out at the planned commit
        assert env(checkout) == {"REPO_URL": REPO_URL, "REVISION": REVISION}
        assert container["workingDir"] == "/work/git/repo"
    assert "orchestrate publish --plan" in pod(publish)["containers"][0]["command"][2]
    existing = render(plan, manifests, volume_claim="team-cache")
    assert existing[0]["kind"] != "PersistentVolumeClaim"
    assert all({"name": "shared", "persistentVolumeClaim": {"claimName": "team-cache"}} in pod(d)["volumes"]
               for d in existing if d["kind"] == "Job")


def big_plan(shards: int = 8, cells: int = 900) -> Plan:
    """A fleet-sized plan (several MiB as JSON), straight from the typed model."""
    entries, out = [], []
    for s in range(shards):
        addresses = []
        for c in range(cells):
            address = f"model-{c:04d}-with-a-long-name/fp16/default@sm{80 + s}+trt10.13"
            addresses.append(address)
            entries.append(PlanEntry(address=address, status="build", build_key=f"{s:02d}{c:062d}",
                                     target=f"t{s}", model=f"model-{c:04d}", precision="fp16", profile_set="default",
                                     reason="not published", shard=f"shard-{s}", gate_key="g" * 64))
        out.append(Shard(id=f"shard-{s}", build_labels=("gpu", f"sm{80 + s}") if s % 2 else ("gpu",),
                         gate_labels=("gpu",), targets=(f"t{s}",), addresses=tuple(addresses)))
    return Plan(entries=tuple(entries), shards=tuple(out), registry_state="state",
                manifests={"manifests/fleet.yaml": "a" * 64}, models={"m@1": "sha256:" + "b" * 64})


def test_a_plan_of_any_size_reaches_the_pods(tmp_path: Path):
    plan = big_plan()
    assert len(json.dumps(plan.to_json())) > 3 * CONFIGMAP_LIMIT  # one ConfigMap could never hold it
    docs = render(plan)
    configs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    assert len(configs) > 3
    for config in configs.values():
        assert len(json.dumps(config).encode()) < CONFIGMAP_LIMIT
    jobs = [d for d in docs if d["kind"] == "Job"]
    for job in jobs[:-1]:  # each Job mounts its own slice, whose cells are its shards' cells
        (volume,) = [v for v in pod(job)["volumes"] if v["name"] == "plan"]
        config = configs[volume["configMap"]["name"]]
        ids = config["data"]["shards.txt"].split()
        assert ids == json.loads(job["metadata"]["annotations"]["trt-orchestrator/shards"])
        sliced = plan_from_json(json.loads(config["data"]["plan.json"]))
        assert {e.shard for e in sliced.entries} == set(ids) and sliced.registry_state == plan.registry_state
        assert job["spec"]["completions"] == len(ids)
    # the publish Job gets every slice and joins them into the plan again: run its script for real
    publish = jobs[-1]
    sources = pod(publish)["volumes"][-1]["projected"]["sources"]
    assert {s["configMap"]["name"] for s in sources} == set(configs)
    plans = tmp_path / "plans"
    for source in sources:
        (item,) = source["configMap"]["items"]
        (plans / item["path"]).parent.mkdir(parents=True)
        (plans / item["path"]).write_text(configs[source["configMap"]["name"]]["data"][item["key"]])
    done = tmp_path / "shared" / "done"
    done.mkdir(parents=True)
    for shard in plan.shards:
        (done / shard.id).write_text("0\n")
    out = run_publish(publish, tmp_path, plans)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["publish", "--plan", str(tmp_path / "plan.json")]
    merged = plan_from_json(json.loads((tmp_path / "plan.json").read_text()))
    assert sorted(merged.entries, key=lambda e: e.address) == sorted(plan.entries, key=lambda e: e.address)
    assert sorted(merged.shards, key=lambda s: s.id) == sorted(plan.shards, key=lambda s: s.id)
    assert (merged.registry_state, merged.manifests, merged.models) == (plan.registry_state, plan.manifests,
                                                                        plan.models)


def fake_bin(tmp_path: Path, *, fail: str | None = None) -> Path:
    """`orchestrate` that prints its arguments (and fails for verb ``fail``); `python3 -m pip` that only says so."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "orchestrate").write_text('#!/bin/sh\necho "$@"\n' + (f'[ "$1" = {fail} ] && exit 3\n' if fail else "")
                                         + "exit 0\n")
    real = shutil.which("python3")
    (bin_dir / "python3").write_text(f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then echo "pip $*" >&2; exit 0; fi\n'
                                     f'exec {real} "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def run_publish(job: dict, tmp_path: Path, plans: Path, wait: str | None = None) -> subprocess.CompletedProcess:
    container = pod(job)["containers"][0]
    values = {k: v for k, v in env(container).items() if isinstance(v, str)}
    values.update(PLANS_DIR=str(plans), PLAN_OUT=str(tmp_path / "plan.json"), SHARED=str(tmp_path / "shared"),
                  PATH=f"{fake_bin(tmp_path)}:/usr/bin:/bin", POLL_S="0.05")
    if wait is not None:
        values["PUBLISH_WAIT_S"] = wait
    return subprocess.run(container["command"], capture_output=True, text=True, timeout=60, env=values)


def test_the_publish_job_waits_for_the_shards_then_publishes_what_finished(tmp_path: Path):
    plan = big_plan(shards=2, cells=3)
    docs = render(plan)
    configs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    publish = [d for d in docs if d["kind"] == "Job"][-1]
    plans = tmp_path / "plans"
    for source in pod(publish)["volumes"][-1]["projected"]["sources"]:
        (item,) = source["configMap"]["items"]
        (plans / item["path"]).parent.mkdir(parents=True)
        (plans / item["path"]).write_text(configs[source["configMap"]["name"]]["data"]["plan.json"])
    (tmp_path / "shared" / "done").mkdir(parents=True)
    (tmp_path / "shared" / "done" / "shard-0").write_text("0\n")
    out = run_publish(publish, tmp_path, plans, wait="1")
    assert out.returncode == 0 and "1 shard(s) never finished: publishing what did: ['shard-1']" in out.stderr
    assert out.stdout.split()[:2] == ["publish", "--plan"]


@pytest.mark.parametrize("fail", [None, "build"])
def test_the_shard_script_picks_its_shard_and_leaves_its_status(plan, manifests, tmp_path: Path, fail):
    docs = render(plan, manifests)
    configs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    job = jobs_of(docs)[("self-hosted", "gpu", "l4")]
    (volume,) = [v for v in pod(job)["volumes"] if v["name"] == "plan"]
    config = configs[volume["configMap"]["name"]]
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    for key, text in config["data"].items():
        (plan_dir / key).write_text(text)
    container = pod(job)["containers"][0]
    script = container["command"][2]
    for shard in plan.shards:
        assert shard.id not in script  # ids reach the pod as data only
    local = script.replace("/plan/", f"{plan_dir}/")
    values = {k: v for k, v in env(container).items() if isinstance(v, str)}
    values.update(SHARED=str(tmp_path / "shared"), PATH=f"{fake_bin(tmp_path, fail=fail)}:/usr/bin:/bin")
    for index, shard in enumerate((plan_dir / "shards.txt").read_text().split()):
        proc = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True, timeout=30,
                              env={**values, "JOB_COMPLETION_INDEX": str(index)})
        wanted = [f"ci verify-shard --plan {plan_dir}/plan.json --shard {shard} --role build",
                  f"build --plan {plan_dir}/plan.json --shard {shard}",
                  f"gate --plan {plan_dir}/plan.json --shard {shard}"]
        if fail:
            assert proc.returncode == 3 and proc.stdout.splitlines() == wanted[:2]
        else:
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.splitlines() == wanted
        assert "pip -m pip install .[ort]" in proc.stderr  # the tool, from the checkout
        assert (tmp_path / "shared" / "done" / shard).read_text().strip() == ("3" if fail else "0")
    proc = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True, timeout=30,
                          env={**values, "JOB_COMPLETION_INDEX": "7"})
    assert proc.returncode == 1 and "no shard at index 7" in proc.stderr


def test_same_plan_same_bytes(plan, manifests):
    a = emitter.render(plan, ["b.yaml", "a.yaml"], repo_url=REPO_URL, revision=REVISION, image=RUNNER_IMAGE)
    assert a == emitter.render(plan, ["a.yaml", "b.yaml"], repo_url=REPO_URL, revision=REVISION, image=RUNNER_IMAGE)


def test_hostile_names_stay_out_of_the_scripts():
    plan = plan_for_workflow([hostile_manifest()])
    docs = render(plan)
    scripts = [c["command"][2] for d in docs if d["kind"] == "Job" for c in pod(d)["containers"]]
    for bad in HOSTILE:
        assert all(bad not in s for s in scripts)


@pytest.mark.parametrize("kwargs", [{"name": "Engines"}, {"namespace": "a b"}, {"image": "x y"},
                                    {"registry_secret": "Bad_Name"}, {"repo_url": None}, {"python": "3;id"}])
def test_bad_options_are_refused(plan, manifests, kwargs):
    with pytest.raises(CIError):
        render(plan, manifests, **kwargs)


def test_the_cli_writes_valid_objects_for_the_demo(tmp_path: Path):
    """`orchestrate ci k8s` end to end on this repository's demo manifest (the revision from git's HEAD)."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "engines.yaml"
    env_ = {**os.environ, "ORCHESTRATE_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([os.sys.executable, "-m", "orchestrator", "ci", "k8s", "manifests/demo.yaml", "-o", str(out),
                           "--image", RUNNER_IMAGE, "--repo-url", REPO_URL], cwd=repo, env=env_,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "model file not found" in proc.stderr:
        pytest.skip("the demo's models are not fetched: run python scripts/fetch_models.py")
    assert proc.returncode == 0, proc.stderr
    assert "registry: a local store" in proc.stderr  # the demo's registry cannot be shared by pods: said so
    docs = list(yaml.safe_load_all(out.read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    checkout = pod([d for d in docs if d["kind"] == "Job"][0])["initContainers"][0]
    assert env(checkout)["REVISION"] == head
