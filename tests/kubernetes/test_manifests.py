"""Rendered manifests validate against Kubernetes' schemas and the CRDs, agree with each
other, carry the env contract local jobs get, and never hold a credential."""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.fakes.kube_mpijob import config_map  # what training-operator v1.9 writes
from tests.fakes.kube_pytorchjob import operator_env  # what training-operator v1.9 adds
from tests.fakes.kube_tfjob import tf_config
from workbench.backends.kubernetes.kubeflow import MPI_AS_ROOT, replica_templates
from workbench.backends.kubernetes.manifests import (
    INDEX_ANNOTATION,
    LABEL_JOB,
    ClusterOptions,
    RenderedJob,
    render,
)
from workbench.catalog import load_catalog
from workbench.contract import World, worker_env
from workbench.errors import SpecError
from workbench.spec import TrainSpec

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-crds"  # upstream, unchanged
K8S_VERSION = "1.37.0"
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?\Z")
IANA_SVC_NAME = re.compile(r"(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+\Z")

# Credentials a user might hand a job: none may appear outside the Secret.
S3_KEY, S3_SECRET = "AKIAEXAMPLEKEY7Q", "s3cr3t/with+chars=Zq9"
ENV_TOKEN = "hf_tokenvalue_abcdef123"
MOUNTS = {
    "none": [],
    "pvc": ["pvc://datasets/imagenet:/data"],
    "nas": ["nas://10.0.0.5/exports/imagenet:/data:ro"],
    "s3": [f"s3://{S3_KEY}:{quote(S3_SECRET, safe='')}@bucket-a/train:/data"],
}
OPTIONS = ClusterOptions(
    namespace="team-a",
    service_account="trainer",
    image_pull_secrets=("regcred",),
    node_selector={"node.kubernetes.io/instance-type": "gn7i"},
    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    priority_class="high",
)


def make(workers: int = 2, gpus: float = 0, mounts: str = "none", **extra: Any) -> TrainSpec:
    """A validated spec as the backend would hand it to render()."""
    data = {
        "name": "mnist-1",
        "command": ["torchrun", "train.py", "--epochs", "3"],
        "image": "pytorch",
        "workers": workers,
        "gpus": gpus,
        "data": MOUNTS[mounts],
        "env": {"LR": "0.1", "HF_TOKEN": ENV_TOKEN},
        **extra,
    }
    return TrainSpec.from_dict(data).validate(load_catalog())


def rendered(spec: TrainSpec, flavor: str) -> RenderedJob:
    catalog = load_catalog()
    return render(
        spec, catalog.spec(spec.instance_spec or ""), spec.image_ref(catalog), OPTIONS, flavor
    )


@functools.cache
def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    """A validator for the CRD's openAPIV3Schema, strict as the API server's pruning is:
    an object with declared properties takes no others (an unknown field would be
    silently dropped). Built once: checking the schema itself takes seconds."""
    # libyaml's loader: the pure-Python one takes seconds per 600 kB CRD.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = (CRDS / f"kubeflow.org_{kind.lower()}s.yaml").read_text()
    for doc in yaml.load_all(text, Loader=loader):
        if doc["spec"]["names"]["kind"] == kind:
            schema = next(v for v in doc["spec"]["versions"] if v["name"] == "v1")["schema"]
            strict = _strict(copy.deepcopy(schema["openAPIV3Schema"]))
            jsonschema.Draft7Validator.check_schema(strict)
            return jsonschema.Draft7Validator(strict)
    raise LookupError(kind)


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):  # fmt: skip
            node["additionalProperties"] = False
        for v in node.values():
            _strict(v)
    elif isinstance(node, list):
        for v in node:
            _strict(v)
    return node


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]]
    return replica_templates(obj)


def validate(obj: dict[str, Any]) -> None:
    """Core kinds strictly against Kubernetes 1.37; custom resources against their CRD,
    and each pod template inside strictly as a core PodTemplateSpec."""
    if obj["apiVersion"] in ("v1", "batch/v1"):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        return
    crd_validator(obj["kind"]).validate(obj)
    for tmpl in pod_templates(obj):
        wrapped = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "t"},
            "template": tmpl,
        }
        kubernetes_validate.validate(wrapped, K8S_VERSION, strict=True)


KINDS = [("indexed", "pytorch"), ("kubeflow", "pytorch"), ("kubeflow", "tensorflow"),
         ("kubeflow", "mpi")]  # fmt: skip
# TFJob and MPIJob share the pod builder with PyTorchJob: GPUs 0 and 2 cover their own part.
MATRIX = [(f, fw, g, m) for f, fw in KINDS for g in ((0, 1, 2) if fw == "pytorch" else (0, 2))
          for m in MOUNTS]  # fmt: skip


@pytest.mark.parametrize(("flavor", "framework", "gpus", "mounts"), MATRIX)
def test_every_manifest_validates_and_agrees(
    flavor: str, framework: str, gpus: int, mounts: str
) -> None:
    spec = make(workers=3, gpus=gpus, mounts=mounts, framework=framework)
    job = rendered(spec, flavor)
    for obj in job.display_manifests():
        validate(obj)
        for name in _names(obj):
            assert DNS1123_SUBDOMAIN.match(name) and len(name) <= 253, name
        assert DNS1123_LABEL.match(obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63
    pods = [t for obj in job.manifests for t in pod_templates(obj)]
    assert pods, "a workload with a pod template"
    if framework == "mpi":  # the launcher runs mpirun only: no GPUs, no data
        launcher = pods.pop(0)["spec"]
        assert "nvidia.com/gpu" not in launcher["containers"][0]["resources"]["limits"]
        assert "volumes" not in launcher and "initContainers" not in launcher
    for tmpl in pods:
        pod = tmpl["spec"]
        assert pod["restartPolicy"] == "Never"
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            assert DNS1123_LABEL.match(c["name"])
            for p in c.get("ports", []):
                assert IANA_SVC_NAME.match(p["name"]) and len(p["name"]) <= 15
        main = pod["containers"][0]
        limits = main["resources"]["limits"]
        assert limits.get("nvidia.com/gpu") == (str(gpus) if gpus else None)
        volumes = {v["name"] for v in pod.get("volumes", [])}
        assert {m["name"] for m in main.get("volumeMounts", [])} == volumes
        assert (pod["serviceAccountName"], pod["priorityClassName"]) == ("trainer", "high")
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert pod["nodeSelector"] == dict(OPTIONS.node_selector)
        assert pod["tolerations"] == [dict(t) for t in OPTIONS.tolerations]
        assert tmpl["metadata"]["labels"][LABEL_JOB] == "mnist-1"
    kinds = [o["kind"] for o in job.manifests]
    if flavor == "indexed":
        assert sorted(kinds) == ["Job", "Service"]
        _check_indexed(job, spec)
    elif framework == "pytorch":
        assert kinds == ["PyTorchJob"]
        replicas = job.manifests[0]["spec"]["pytorchReplicaSpecs"]
        assert sum(r["replicas"] for r in replicas.values()) == spec.workers
        assert replicas["Master"]["replicas"] == 1
        assert replicas["Master"]["template"]["spec"]["containers"][0]["name"] == "pytorch"
    elif framework == "tensorflow":
        assert kinds == ["TFJob"]
        replicas = job.manifests[0]["spec"]["tfReplicaSpecs"]
        assert (replicas["Chief"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
        for r in replicas.values():  # what the operator reads TF_CONFIG's port from
            (main,) = r["template"]["spec"]["containers"]
            assert main["name"] == "tensorflow"
            assert main["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    else:
        assert kinds == ["MPIJob"]
        body = job.manifests[0]["spec"]
        assert body["slotsPerWorker"] == (spec.procs_per_worker or 1)
        assert body["runPolicy"]["cleanPodPolicy"] == "Running"
        replicas = body["mpiReplicaSpecs"]
        assert (replicas["Launcher"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    for obj in job.manifests:
        assert obj["metadata"]["namespace"] == "team-a"
    _check_mount(job, mounts)
    _check_no_secret_values(job)


def _names(obj: Any) -> list[str]:
    """metadata.name, secret/claim/service references: every name that must be DNS-1123."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if (
                k in ("name", "claimName", "serviceAccountName", "subdomain", "priorityClassName")
                and isinstance(v, str)
                and not k.isupper()
            ):
                out.append(v)
            out += _names(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _names(v)
    # env var names are C identifiers, not DNS names
    return [n for n in out if not (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)
                                   and re.search(r"[A-Z_]", n))]  # fmt: skip


def _check_indexed(job: RenderedJob, spec: TrainSpec) -> None:
    service = next(o for o in job.manifests if o["kind"] == "Service")
    batch = next(o for o in job.manifests if o["kind"] == "Job")
    s = batch["spec"]
    assert s["completionMode"] == "Indexed"
    assert s["completions"] == s["parallelism"] == spec.workers
    tmpl = s["template"]
    labels = tmpl["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    assert tmpl["spec"]["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["publishNotReadyAddresses"] is True


def _check_mount(job: RenderedJob, mounts: str) -> None:
    pod = pod_templates(job.manifests[-1])[-1]["spec"]  # a worker's
    main = pod["containers"][0]
    if mounts == "none":
        assert "volumes" not in pod and "volumeMounts" not in main
        return
    (volume,) = pod["volumes"]
    (mount,) = main["volumeMounts"]
    assert mount["mountPath"] == "/data"
    if mounts == "pvc":
        assert volume["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
        assert mount["subPath"] == "imagenet"
    elif mounts == "nas":
        assert volume["nfs"] == {
            "server": "10.0.0.5",
            "path": "/exports/imagenet",
            "readOnly": True,
        }
    else:
        assert volume == {"name": volume["name"], "emptyDir": {}}
        (prefetch,) = [c for c in pod["initContainers"] if c["name"].startswith("prefetch-")]
        assert prefetch["command"][:4] == ["python", "-m", "workbench.data", "prefetch"]
        assert prefetch["command"][4] == "s3://bucket-a/train"  # no userinfo
        assert prefetch["volumeMounts"][0]["name"] == volume["name"]
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"] for e in prefetch["env"] if "valueFrom" in e
        }
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN"} <= set(refs)
        assert job.secret is not None
        data = job.secret["stringData"]
        assert data[refs["AWS_ACCESS_KEY_ID"]["key"]] == S3_KEY
        assert data[refs["AWS_SECRET_ACCESS_KEY"]["key"]] == S3_SECRET
        assert {r["name"] for r in refs.values()} == {job.secret["metadata"]["name"]}


def _check_no_secret_values(job: RenderedJob) -> None:
    assert job.secret is not None and ENV_TOKEN in job.secret["stringData"].values()
    for key in job.secret["stringData"]:
        assert SECRET_KEY.match(key)
    dumps = job.to_yaml() + json.dumps(job.manifests) + repr(job)
    for value in (S3_KEY, S3_SECRET, ENV_TOKEN, "s3cr3t", quote(S3_SECRET, safe="")):
        assert value not in dumps
    main = pod_templates(job.manifests[-1])[0]["spec"]["containers"][0]
    env = {e["name"]: e for e in main["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "mnist-1-credentials",
        "key": "HF_TOKEN",
    }
    assert env["LR"] == {"name": "LR", "value": "0.1"}


def _resolve(env: list[dict[str, Any]], index: int) -> dict[str, str]:
    """What a pod at completion index ``index`` sees (the downward API resolved)."""
    out = {}
    for e in env:
        if "value" in e:
            out[e["name"]] = e["value"]
        elif (
            e["valueFrom"].get("fieldRef", {}).get("fieldPath")
            == f"metadata.annotations['{INDEX_ANNOTATION}']"
        ):
            out[e["name"]] = str(index)
    return out


@pytest.mark.parametrize("procs", [1, 2])
def test_indexed_pods_get_the_local_env_contract(procs: int) -> None:
    spec = make(workers=3, gpus=procs, procs_per_worker=procs)
    job = rendered(spec, "indexed")
    main = job.manifests[1]["spec"]["template"]["spec"]["containers"][0]
    hosts = tuple(f"mnist-1-{i}.workbench-ranks" for i in range(3))
    world = World(3, procs, hosts[0], 23456, hosts, (23456,) * 3)
    for index in range(3):
        seen = _resolve(main["env"], index)
        expected = worker_env("pytorch", world, index, "mnist-1")
        assert {k: seen.get(k) for k in expected} == expected
        assert seen["WORLD_SIZE"] == str(3 * procs) and seen["PET_NPROC_PER_NODE"] == str(procs)
        assert seen["RANK"] == seen["PET_NODE_RANK"] == seen["WORKBENCH_RANK"] == str(index)


@pytest.mark.parametrize("procs", [1, 2])
def test_kubeflow_pods_get_the_local_env_contract(procs: int) -> None:
    spec = make(workers=3, gpus=procs, procs_per_worker=procs)
    job = rendered(spec, "kubeflow").manifests[0]
    world = World(3, procs, "mnist-1-master-0", 23456, ("mnist-1-master-0",), (23456,))
    ranks = [("Master", "master", 0), ("Worker", "worker", 0), ("Worker", "worker", 1)]
    for rtype, lower, index in ranks:
        main = job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]
        ours = {e["name"]: e.get("value") for e in main["env"]}
        operator = {e["name"]: e["value"] for e in operator_env(job, lower, index)}
        assert not set(ours) & set(operator), "a variable set twice hides one of them"
        seen = {**operator, **{k: v for k, v in ours.items() if v is not None}}
        # the shell wrapper copies RANK into WORKBENCH_RANK
        assert (
            main["command"][:2] == ["sh", "-c"] and 'WORKBENCH_RANK="$RANK"' in main["command"][2]
        )
        seen["WORKBENCH_RANK"] = seen["RANK"]
        rank = int(seen["RANK"])
        expected = worker_env("pytorch", world, rank, "mnist-1")
        assert {k: seen.get(k) for k in expected} == expected
    assert [r for r in ranks if r[0] == "Worker"]


@pytest.mark.parametrize("flavor", ["indexed", "kubeflow"])
def test_ranks_wait_for_the_master_dns_name(flavor: str) -> None:
    job = rendered(make(workers=2), flavor)
    templates = pod_templates(job.manifests[-1])
    waits = [
        c
        for t in templates
        for c in t["spec"].get("initContainers", [])
        if c["name"] == "wait-for-master"
    ]
    assert len(waits) == 1
    script = waits[0]["command"][2]
    host = {e["name"]: e.get("value") for e in waits[0]["env"]}["MASTER_HOST"]
    assert "nslookup" in script and "exit 1" in script and "600" in script
    assert host == ("mnist-1-0.workbench-ranks" if flavor == "indexed" else "mnist-1-master-0")
    single = rendered(make(workers=1), flavor)
    single_waits = [
        c["name"]
        for t in pod_templates(single.manifests[-1])
        for c in t["spec"].get("initContainers", [])
    ]
    if flavor == "kubeflow":  # only the Worker replica waits: the operator makes Services first
        master = job.manifests[0]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        assert "initContainers" not in master
        assert single_waits == []
    else:  # every rank, rank 0 and a lone worker too: the Service comes after the Job
        assert "WORKBENCH_RANK" not in {e["name"] for e in waits[0]["env"]}
        assert single_waits == ["wait-for-master"]


def test_command_is_kept_literal_and_secret_arguments_go_through_the_secret() -> None:
    spec = make(command=["python", "t.py", "--price=$(cost)", "--db", "postgres://u:pw-0123@db/x"])
    job = rendered(spec, "indexed")
    main = job.manifests[1]["spec"]["template"]["spec"]["containers"][0]
    assert main["command"][:3] == ["python", "t.py", "--price=$$(cost)"]
    assert main["command"][4] == "$(WORKBENCH_SECRET_ARG_4)"
    ref = {e["name"]: e for e in main["env"]}["WORKBENCH_SECRET_ARG_4"]["valueFrom"]["secretKeyRef"]
    assert (
        job.secret is not None
        and job.secret["stringData"][ref["key"]] == "postgres://u:pw-0123@db/x"
    )
    assert "pw-0123" not in job.to_yaml()


def test_indexed_jobs_share_one_headless_service_per_namespace() -> None:
    """Every indexed job renders the same Service, whatever its name (a digit-led one
    too, which a Service could not be named after): it selects all indexed jobs' pods
    and no one job's, so the jobs share it, and each pod's subdomain names it."""
    first, second = rendered(make(name="7b-run"), "indexed"), rendered(make(name="a"), "indexed")
    service = first.manifests[0]
    validate(service)
    assert service == second.manifests[0]
    assert service["metadata"]["name"] == "workbench-ranks"
    assert LABEL_JOB not in service["metadata"]["labels"]  # the watches select on its presence
    assert LABEL_JOB not in service["spec"]["selector"]
    assert "ownerReferences" not in service["metadata"] and "ports" not in service["spec"]
    for job in (first, second):
        pod = job.manifests[1]["spec"]["template"]
        assert pod["spec"]["subdomain"] == "workbench-ranks"
        assert all(pod["metadata"]["labels"].get(k) == v
                   for k, v in service["spec"]["selector"].items())  # fmt: skip
    with pytest.raises(SpecError) as e:
        rendered(make(name="7b-run"), "kubeflow")
    assert e.value.field == "name"


@pytest.mark.parametrize("flavor", ["indexed", "kubeflow"])
def test_object_store_outputs_upload_through_the_wrapper(flavor: str) -> None:
    """An s3:// output: an emptyDir written by the pod, the main command run under
    ``python -m workbench.data run`` (uploads at any exit), credentials only by reference."""
    url = f"s3://{S3_KEY}:{quote(S3_SECRET, safe='')}@bucket-b/ckpt"
    spec = make(mounts="s3", outputs=[f"{url}:ckpt", "pvc://keep/run:/keep:rw"],
                working_dir="/workspace")  # fmt: skip
    job = rendered(spec, flavor)
    for obj in job.manifests:
        validate(obj)
    _check_no_secret_values(job)
    assert job.secret is not None
    for tmpl in pod_templates(job.manifests[-1]):
        pod = tmpl["spec"]
        main = pod["containers"][0]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["name"]: m for m in main["volumeMounts"]}
        assert volumes["output-0"] == {"name": "output-0", "emptyDir": {}}
        assert mounts["output-0"] == {"name": "output-0", "mountPath": "/workspace/ckpt",
                                      "readOnly": False}  # fmt: skip
        cmd = main["command"]
        assert cmd[:8] == ["python", "-m", "workbench.data", "run", "--upload",
                           "/workspace/ckpt", "s3://bucket-b/ckpt", "--"]  # fmt: skip
        assert cmd[8:] == (["torchrun", "train.py", "--epochs", "3"] if flavor == "indexed"
                           else ["sh", "-c", 'export WORKBENCH_RANK="$RANK"; exec "$0" "$@"',
                                 "torchrun", "train.py", "--epochs", "3"])  # fmt: skip
        env = {e["name"]: e for e in main["env"]}
        key, secret = (env[f"WORKBENCH_UPLOAD_0_{n}"]["valueFrom"]["secretKeyRef"]
                       for n in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))  # fmt: skip
        assert job.secret["stringData"][key["key"]] == S3_KEY
        assert job.secret["stringData"][secret["key"]] == S3_SECRET
        # The training command itself gets no AWS_* credentials from the output's URL.
        assert "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env


@pytest.mark.parametrize(
    ("extra", "flavor", "field"),
    [
        ({"data": ["./local:/data"]}, "indexed", "data"),
        ({"data": ["s3://bucket-a/x:data"]}, "indexed", "data"),  # relative, no working_dir
        ({"outputs": ["s3://bucket-a/out?secret=abcdef:/out"]}, "indexed", "outputs"),
        ({"outputs": ["gs://user:abcdef@bucket-a/out:/out"]}, "indexed", "outputs"),
        ({"gpus": 0.5}, "indexed", "gpus"),
        ({"image": "tensorflow"}, "indexed", "backend_options.flavor"),
        ({"framework": "mpi"}, "indexed", "backend_options.flavor"),
        ({"data": ["s3://bucket-a/x?secret=abcdef:/data"]}, "indexed", "data"),
    ],
)
def test_what_a_cluster_cannot_honour_is_a_spec_error(
    extra: dict[str, Any], flavor: str, field: str
) -> None:
    with pytest.raises(SpecError) as e:
        rendered(make(**extra), flavor)
    assert e.value.field == field
    assert "abcdef" not in str(e.value)


def test_unknown_flavor_is_a_spec_error() -> None:
    with pytest.raises(SpecError) as e:
        rendered(make(), "slurm")
    assert e.value.field == "flavor"


def test_outputs_on_pvc_are_writable_and_relative_paths_join_working_dir() -> None:
    job = rendered(make(outputs=["pvc://ckpt/run1:ckpt:rw"], working_dir="/workspace"), "indexed")
    pod = job.manifests[1]["spec"]["template"]["spec"]
    (mount,) = pod["containers"][0]["volumeMounts"]
    assert mount == {
        "name": "output-0",
        "mountPath": "/workspace/ckpt",
        "readOnly": False,
        "subPath": "run1",
    }
    assert pod["containers"][0]["workingDir"] == "/workspace"
    validate(job.manifests[1])


@pytest.mark.parametrize(
    ("flavor", "breakage"),
    [
        ("indexed", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(envv=[])),
        ("indexed", lambda o: o["spec"].update(completions="3")),
        ("kubeflow", lambda o: o["spec"].update(nprocPerNodes="1")),
        ("kubeflow", lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas="1")),
        (
            "kubeflow",
            lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"].update(
                hostNetwork="yes"
            ),
        ),
        (
            "kubeflow",
            lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][
                0
            ].update(imagePullPolicy=1),
        ),
        ("tensorflow", lambda o: o["spec"].update(tfReplicaSpec=o["spec"].pop("tfReplicaSpecs"))),
        ("tensorflow", lambda o: o["spec"]["tfReplicaSpecs"]["Chief"].update(replicas="1")),
        ("mpi", lambda o: o["spec"].update(slotsPerWorker="1")),
        (
            "mpi",
            lambda o: o["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][
                0
            ].update(command="mpirun"),
        ),
    ],
)
def test_the_validation_catches_a_broken_manifest(flavor: str, breakage: Any) -> None:
    """The checks above can fail: one wrong field or type in a rendered object is caught."""
    framework = flavor if flavor in ("tensorflow", "mpi") else "pytorch"
    flavor = "indexed" if flavor == "indexed" else "kubeflow"
    obj = copy.deepcopy(rendered(make(framework=framework), flavor).manifests[-1])
    validate(obj)
    breakage(obj)
    with pytest.raises((kubernetes_validate.ValidationError, jsonschema.ValidationError)):
        validate(obj)


def test_tfjob_pods_see_tf_config_as_the_operator_sets_it() -> None:
    """Chief + Worker replicas: the operator's TF_CONFIG names every replica by its
    Service; the shell gives WORKBENCH_RANK = Chief 0, Worker i + 1."""
    job = rendered(make(workers=3, framework="tensorflow"), "kubeflow").manifests[0]
    specs = job["spec"]["tfReplicaSpecs"]
    hosts = {"chief": ["mnist-1-chief-0.team-a.svc:2222"],
             "worker": ["mnist-1-worker-0.team-a.svc:2222", "mnist-1-worker-1.team-a.svc:2222"]}  # fmt: skip
    for rank, (rtype, index) in enumerate([("chief", 0), ("worker", 0), ("worker", 1)]):
        main = specs[rtype.capitalize()]["template"]["spec"]["containers"][0]
        env = {e["name"]: e for e in main["env"]}
        assert "TF_CONFIG" not in env, "the operator sets it: a second one would hide it"
        config = json.loads(tf_config(job, rtype, index) or "")
        assert config == {"cluster": hosts, "task": {"type": rtype, "index": index},
                          "environment": "cloud"}  # fmt: skip
        assert env["WORKBENCH_WORLD_SIZE"]["value"] == "3"
        if rtype == "chief":
            assert env["WORKBENCH_RANK"]["value"] == "0"
            assert main["command"] == ["torchrun", "train.py", "--epochs", "3"]
        else:  # the pod's replica-index label, through the downward API, plus one
            ref = env["WORKBENCH_REPLICA_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
            assert ref == "metadata.labels['training.kubeflow.org/replica-index']"
            assert "$$((WORKBENCH_REPLICA_INDEX + 1))" in main["command"][2]
            script = main["command"][2].replace("$$", "$").replace('exec "$0" "$@"', "")
            out = subprocess.run(["sh", "-c", script + ' echo "$WORKBENCH_RANK"'], text=True,
                                 env={"WORKBENCH_REPLICA_INDEX": str(index)}, capture_output=True)  # fmt: skip
            assert out.stdout.strip() == str(rank)
    single = rendered(make(workers=1, framework="tensorflow"), "kubeflow").manifests[0]
    assert list(single["spec"]["tfReplicaSpecs"]) == ["Chief"]
    assert tf_config(single, "chief", 0) is None  # one replica: a local job, no TF_CONFIG


@pytest.mark.parametrize(
    "command", [["python", "allreduce.py"], ["mpirun", "-np", "4", "python", "a.py"]]
)
def test_mpijob_launcher_runs_mpirun_over_the_operators_hostfile(command: list[str]) -> None:
    spec = make(workers=2, procs_per_worker=2, gpus=2, framework="mpi", command=command)
    job = rendered(spec, "kubeflow").manifests[0]
    replicas = job["spec"]["mpiReplicaSpecs"]
    launcher = replicas["Launcher"]["template"]["spec"]["containers"][0]
    worker = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert job["spec"]["slotsPerWorker"] == 2
    cm = config_map({**job, "metadata": {**job["metadata"], "uid": "u1"}}, [])["data"]
    assert cm["hostfile"] == "mnist-1-worker-0 slots=2\nmnist-1-worker-1 slots=2\n"
    if command[0] == "mpirun":
        assert launcher["command"] == command  # the user's own mpirun, as given
    else:
        assert launcher["command"] == ["mpirun", "-np", "4", "python", "allreduce.py"]
    lenv = {e["name"]: e.get("value") for e in launcher["env"]}
    wenv = {e["name"]: e for e in worker["env"]}
    # the operator's launcher variables are the operator's: never set twice
    assert not {"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_agent"} & set(lenv)
    assert {k: lenv[k] for k in MPI_AS_ROOT} == MPI_AS_ROOT  # images run as root
    assert "command" not in worker  # the operator lets it sleep until mpirun comes
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "2"
    ref = wenv["WORKBENCH_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert ref == "metadata.labels['training.kubeflow.org/replica-index']"
    assert wenv["WORKBENCH_MPI_NP"]["value"] == "4" and wenv["HF_TOKEN"]["valueFrom"]
    validate(job)
