"""In-process controllers and a "kubelet" for the fake API server.

* The Indexed Job controller turns a batch/v1 Job with ``completionMode: Indexed`` into
  pods ``JOB-INDEX-xxxxx`` as the real one does: the completion index as the
  ``batch.kubernetes.io/job-completion-index`` annotation and label, JOB_COMPLETION_INDEX
  in every container, hostname ``JOB-INDEX``, an owner reference to the Job; it retries
  failed indexes up to ``backoffLimit`` and writes the Job's counters and its Complete
  or Failed condition.
* The PyTorchJob, TFJob and MPIJob controllers (kube_pytorchjob.py, kube_tfjob.py,
  kube_mpijob.py) do the training-operator's part, and kube_volcano.py Volcano's job
  controller and gang admission.
* The kubelet runs each pod's init containers, then its first container, as local
  processes (the image is ignored: the host's Python runs everything), resolving env as
  Kubernetes does (values, the downward API, secretKeyRef, ``$(VAR)`` in commands), fills
  the pod's log buffer, and moves the pod through Pending, Running, Succeeded and Failed.
  A pod it runs carries its finalizer, so deleting the pod (or the Job, in the
  foreground) waits until the kubelet has killed the process group.

Cluster DNS is loopback. An ``nslookup`` on the processes' PATH answers from the names
the cluster has published (pods with a hostname and subdomain whose headless Service
exists and selects them: ``HOST.SUBDOMAIN``, with or without ``.NS``, ``.NS.svc``, ``.NS.svc.cluster.local``),
so init containers wait as they would on a cluster. In the main container, MASTER_ADDR
and PET_MASTER_ADDR holding such a name, and each such name in Volcano's VC_*_HOSTS
lists, get 127.0.0.1 instead (torch resolves names in C, past any Python patch), and
TF_CONFIG's ``HOST:PORT`` entries naming such a host get ``127.0.0.1:P``, one free port P
per host (pods share the host's network here): the places its env differs from the
rendered manifest. configMap and emptyDir volumes are folders (kube_volumes.py); other
volumes are not mounted. A container without a command runs the entrypoint of the images
the fake knows (kube_mpijob.entrypoint), and each running main container is registered
(WORKDIR/exec/NS/POD.json: env, cwd) for the fake ``kubectl exec``.
Every process binds and dials 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from . import kube_volumes
from .kube_apiserver import KUBELET_FINALIZER, FakeKubeAPIServer
from .kube_mpijob import entrypoint, prepare_node, reconcile_mpijobs
from .kube_pytorchjob import reconcile_pytorchjobs
from .kube_state import ApiError, now_rfc3339, selector_matches
from .kube_tfjob import loopback_tf_config, reconcile_tfjobs
from .kube_volcano import reconcile_volcano, serve_volcano

PODS = ("", "v1", "pods")
JOBS = ("batch", "v1", "jobs")
SERVICES = ("", "v1", "services")
SECRETS = ("", "v1", "secrets")
CONFIGMAPS = ("", "v1", "configmaps")
NODES = ("", "v1", "nodes")
GPU = "nvidia.com/gpu"
INDEX = "batch.kubernetes.io/job-completion-index"
ADDRESS_VARS = frozenset({"MASTER_ADDR", "PET_MASTER_ADDR"})  # the contract's host names
HOSTS_LIST = re.compile(r"VC_[A-Z0-9_]+_HOSTS\Z")  # Volcano's svc plugin: comma-separated names
_FIELD = re.compile(r"metadata\.(annotations|labels)\['([^']+)'\]\Z")
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: ``$$`` is a literal ``$``; unknown names stay."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


class FakeCluster:
    """The controllers and one node's kubelet, reconciling in a daemon thread."""

    def __init__(self, fake: FakeKubeAPIServer, workdir: Path, grace: float = 3.0,
                 nodes: dict[str, int] | None = None, volcano: bool = False,
                 node_extra: dict[str, dict[str, Any]] | None = None) -> None:  # fmt: skip
        self.fake, self.state = fake, fake.state
        # With ``nodes`` (name -> nvidia.com/gpu), Node objects exist and a scheduler binds
        # each pod to a node with the GPUs it asks for, or records FailedScheduling.
        self.nodes = nodes
        # node -> {"resources": {name: quantity}, "labels": {...}}: more of a Node (GPU
        # shares, GPU feature discovery labels).
        self.node_extra = node_extra or {}
        self.volcano = volcano  # discovery lists batch.volcano.sh (the controller always runs)
        self._unschedulable: set[tuple[str, str]] = set()
        self.workdir = workdir
        self.grace = grace
        self.procs: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
        self._starting: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bin = workdir / "bin"
        self.dns_file = workdir / "dns-names"
        self.dns_names: set[str] = set()
        self.tf_ports: dict[str, int] = {}  # TF_CONFIG host -> its loopback port
        # (workbench job, rank) -> text: the first pod of that rank to print a line holding
        # the text is killed at once (SIGKILL, as the OOM killer does), and only that one.
        self.fail_once: dict[tuple[str, int], str] = {}
        self._oom_killed: set[tuple[str, str]] = set()

    def fail_pod_once(self, job: str, rank: int, after: str) -> None:
        """Kill the first pod of ``job``'s ``rank`` once it prints a line holding ``after``:
        it ends Failed (exit code 137, OOMKilled), so a gang retry replaces the pods."""
        self.fail_once[(job, rank)] = after

    def start(self) -> FakeCluster:
        """Begin reconciling."""
        self.bin.mkdir(parents=True, exist_ok=True)
        self.dns_file.write_text("")
        shim = self.bin / "nslookup"
        shim.write_text(f'#!/bin/sh\ngrep -qxF "$1" {self.dns_file}\n')
        shim.chmod(0o755)
        prepare_node(self.workdir)
        for node, gpus in (self.nodes or {}).items():
            extra = self.node_extra.get(node) or {}
            # CPU and memory grow with the GPUs, as on cloud GPU nodes (a 2-GPU node holds
            # a gpu.2x worker of the catalogue: the capacity check counts both).
            res = {"cpu": str(16 + 16 * gpus), "memory": f"{64 + 64 * gpus}Gi", GPU: str(gpus),
                   **(extra.get("resources") or {})}  # fmt: skip
            labels = {"kubernetes.io/hostname": node, **(extra.get("labels") or {})}
            self.state.create(NODES, None, {"metadata": {"name": node, "labels": labels},
                                            "status": {"capacity": res, "allocatable": res}})  # fmt: skip
        if self.volcano:
            serve_volcano(self.state)
        self._thread = threading.Thread(target=self._loop, name="fake-cluster", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reconciling and kill every process still running."""
        self._stop.set()
        with self.state.lock:
            self.state.lock.notify_all()
        if self._thread:
            self._thread.join(5)
        for proc in list(self.procs.values()):
            _kill(proc, 0)

    def _loop(self) -> None:
        seen = -1
        while not self._stop.is_set():
            with self.state.lock:
                if self.state.rv == seen:
                    self.state.lock.wait(0.2)
                seen = self.state.rv
            try:
                self._reconcile_jobs()
                reconcile_pytorchjobs(self.state)
                reconcile_tfjobs(self.state)
                reconcile_mpijobs(self.state)
                reconcile_volcano(self.fake)
                self._publish_dns()
                self._reconcile_pods()
            except ApiError:  # raced with a delete: the next pass sees the new state
                continue

    # -- Indexed Job controller --
    def _reconcile_jobs(self) -> None:
        jobs, _ = self.state.list(JOBS, None)
        for job in jobs:
            spec = job.get("spec") or {}
            if spec.get("completionMode") != "Indexed" or job["metadata"].get("deletionTimestamp"):
                continue
            ns, name, uid = (
                job["metadata"]["namespace"],
                job["metadata"]["name"],
                job["metadata"]["uid"],
            )
            status = job.get("status") or {}
            if any(c.get("type") in ("Complete", "Failed") for c in status.get("conditions") or []):
                continue
            pods = [p for p in self.state.list(PODS, ns)[0]
                    if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]  # fmt: skip
            by_index: dict[int, list[dict[str, Any]]] = {}
            for p in pods:
                by_index.setdefault(int(p["metadata"]["annotations"][INDEX]), []).append(p)
            completions = int(spec.get("completions") or 1)
            succeeded = {
                i for i, ps in by_index.items() if any(_phase(p) == "Succeeded" for p in ps)
            }
            failed = sum(1 for p in pods if _phase(p) == "Failed")
            active = [p for p in pods if _phase(p) in ("Pending", "Running")
                      and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
            new_status: dict[str, Any] = {
                "startTime": status.get("startTime") or now_rfc3339(),
                "active": len(active),
                "succeeded": len(succeeded),
                "failed": failed,
                "completedIndexes": _ranges(sorted(succeeded)),
            }
            if failed > int(spec.get("backoffLimit", 6)):
                new_status["conditions"] = [_condition("Failed", "BackoffLimitExceeded",
                                                       "Job has reached the specified backoff limit")]  # fmt: skip
                for p in active:
                    self.state.delete(PODS, ns, p["metadata"]["name"])
            elif len(succeeded) == completions:
                new_status["conditions"] = [_condition("Complete", "CompletionsReached",
                                                       "Reached expected number of succeeded pods")]  # fmt: skip
                new_status["completionTime"] = now_rfc3339()
            else:
                for i in range(completions):
                    if i not in succeeded and not any(p in active for p in by_index.get(i, [])):
                        self._create_pod(job, i)
            if {k: status.get(k) for k in new_status} != new_status:
                self.state.patch(JOBS, ns, name, {"status": new_status}, subresource="status")

    def _create_pod(self, job: dict[str, Any], index: int) -> None:
        meta, tmpl = job["metadata"], job["spec"]["template"]
        spec = _copy(tmpl.get("spec") or {})
        spec["hostname"] = f"{meta['name']}-{index}"
        for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            c["env"] = [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": f"metadata.annotations['{INDEX}']"}}}, *c.get("env", [])]  # fmt: skip
        labels = {**(tmpl.get("metadata") or {}).get("labels", {}), INDEX: str(index),
                  "batch.kubernetes.io/job-name": meta["name"],
                  "batch.kubernetes.io/controller-uid": meta["uid"]}  # fmt: skip
        body = {
            "metadata": {
                "name": f"{meta['name']}-{index}-{uuid.uuid4().hex[:5]}",
                "labels": labels,
                "annotations": {INDEX: str(index)},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
                "finalizers": [KUBELET_FINALIZER],
            },
            "spec": spec,
        }
        self.state.create(PODS, meta["namespace"], body)

    # -- DNS --
    def _publish_dns(self) -> None:
        names = set()
        # A pod's own record (HOSTNAME.SUBDOMAIN) exists, as cluster DNS makes it from the
        # Service's endpoints, only while the headless Service named by its subdomain
        # selects it: a Service shared by many jobs' pods must select each of them.
        selectors = {
            (s["metadata"]["namespace"], s["metadata"]["name"]):
                [(k, "=", {v}) for k, v in ((s.get("spec") or {}).get("selector") or {}).items()]
            for s in self.state.list(SERVICES, None)[0]
        }  # fmt: skip
        for p in self.state.list(PODS, None)[0]:
            ns, spec = p["metadata"]["namespace"], p.get("spec") or {}
            reqs = selectors.get((ns, spec.get("subdomain") or ""))
            if (
                spec.get("hostname")
                and reqs
                and selector_matches(reqs, p["metadata"].get("labels") or {})
            ):
                base = f"{spec['hostname']}.{spec['subdomain']}"
                names |= {
                    base,
                    f"{base}.{ns}",
                    f"{base}.{ns}.svc",
                    f"{base}.{ns}.svc.cluster.local",
                }
        pods = self.state.list(PODS, None)[0]
        for svc in self.state.list(SERVICES, None)[0]:  # a Service resolves once it has pods
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            selector = (svc.get("spec") or {}).get("selector") or {}
            reqs = [(k, "=", {v}) for k, v in selector.items()]
            backed = any(p["metadata"]["namespace"] == ns
                         and selector_matches(reqs, p["metadata"].get("labels") or {}) for p in pods)  # fmt: skip
            if selector and backed:
                names |= {
                    name,
                    f"{name}.{ns}",
                    f"{name}.{ns}.svc",
                    f"{name}.{ns}.svc.cluster.local",
                }
        text = "".join(f"{n}\n" for n in sorted(names))
        # The names the kubelet rewrites to loopback first, then the file nslookup reads:
        # an init container that sees a name resolve starts a main container whose env
        # the kubelet rewrites with that name known (the other order lost that race once).
        self.dns_names = names
        if self.dns_file.read_text() != text:
            tmp = self.dns_file.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(self.dns_file)

    # -- kubelet --
    def _reconcile_pods(self) -> None:
        for p in self.state.list(PODS, None)[0]:
            key = (p["metadata"]["namespace"], p["metadata"]["name"])
            if p["metadata"].get("deletionTimestamp"):
                self._terminate(key, p)
            elif _phase(p) == "Pending" and key not in self.procs and key not in self._starting:
                node = self._schedule(p)
                if node is None:
                    continue
                self._starting.add(key)
                if (p.get("spec") or {}).get("nodeName") != node:
                    p = self.state.patch(PODS, key[0], key[1], {"spec": {"nodeName": node}})
                threading.Thread(target=self._run_pod, args=(p,), daemon=True).start()

    def _schedule(self, pod: dict[str, Any]) -> str | None:
        """The node for ``pod`` (GPUs only), or None after a FailedScheduling event."""
        if (pod.get("spec") or {}).get("nodeName"):  # bound already (Volcano binds its own)
            return str(pod["spec"]["nodeName"])
        if not self.nodes:
            return "fake-node-0"
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        used = dict.fromkeys(self.nodes, 0)
        for p in self.state.list(PODS, None)[0]:
            node = (p.get("spec") or {}).get("nodeName")
            if node in used and _phase(p) in ("Pending", "Running"):
                used[node] += _gpus(p)
        need = _gpus(pod)
        for node, gpus in self.nodes.items():
            if gpus - used[node] >= need:
                return node
        if key not in self._unschedulable:
            self._unschedulable.add(key)
            short = sum(1 for n, g in self.nodes.items() if g - used[n] < need)
            self.fake.record_event(key[0], {"kind": "Pod", "apiVersion": "v1", **pod},
                                   "FailedScheduling", f"0/{len(self.nodes)} nodes are available: "
                                   f"{short} Insufficient {GPU}.")  # fmt: skip
        return None

    def _terminate(self, key: tuple[str, str], pod: dict[str, Any]) -> None:
        """Kill the pod's process; release the pod once its runner thread has ended (it
        checks for deletion before each container, so nothing starts after this)."""
        proc = self.procs.get(key)
        if proc is not None:
            _kill(proc, self.grace)
        if key in self._starting:
            return  # the next pass releases it
        if KUBELET_FINALIZER in (pod["metadata"].get("finalizers") or []):
            with contextlib.suppress(ApiError):
                self.fake.release_pod(*key)

    def _run_pod(self, pod: dict[str, Any]) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        key = (ns, name)
        try:
            spec = pod.get("spec") or {}
            volumes = kube_volumes.materialize(self.state, pod, self.workdir)
            for c in spec.get("initContainers", []):
                code = self._run_container(pod, c, volumes)
                if code != 0:
                    self._finish(pod, code, "Init:Error")
                    return
            main = spec["containers"][0]
            if not self._alive(key):
                return
            running = _cstatus(main, {"running": {"startedAt": now_rfc3339()}})
            self.fake.set_pod_phase(
                ns, name, "Running", startTime=now_rfc3339(), containerStatuses=[running]
            )
            code = self._run_container(pod, main, volumes)
            killed = key in self._oom_killed
            self._finish(
                pod, code, "Completed" if code == 0 else "OOMKilled" if killed else "Error"
            )
        except ApiError:
            pass  # the pod was deleted meanwhile
        finally:
            self._starting.discard(key)

    def _alive(self, key: tuple[str, str]) -> bool:
        """The pod exists and is not being deleted."""
        try:
            return not self.state.get(PODS, *key)["metadata"].get("deletionTimestamp")
        except ApiError:
            return False

    def _finish(self, pod: dict[str, Any], code: int | None, reason: str) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        current = self.state.get(PODS, ns, name)
        if current["metadata"].get("deletionTimestamp"):
            return  # killed by a delete: the pod goes, its phase no longer matters
        main = pod["spec"]["containers"][0]
        term = {"terminated": {"exitCode": code if code is not None else 137, "reason": reason,
                               "finishedAt": now_rfc3339()}}  # fmt: skip
        self.fake.set_pod_phase(ns, name, "Succeeded" if code == 0 else "Failed",
                                containerStatuses=[_cstatus(main, term)])  # fmt: skip

    def _run_container(self, pod: dict[str, Any], container: dict[str, Any],
                       volumes: dict[str, Path] | None = None) -> int | None:  # fmt: skip
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if self._stop.is_set() or not self._alive((ns, name)):
            return None
        main = container is pod["spec"]["containers"][0]
        mounts = kube_volumes.mount_map(pod, volumes or {}, container)
        env = {k: kube_volumes.rewrite(v, mounts)
               for k, v in self._env(pod, container, loopback_names=main).items()}  # fmt: skip
        command = container.get("command") or entrypoint(container.get("image", ""), self.workdir)
        argv = [
            kube_volumes.rewrite(expand(a, env), mounts)
            for a in [*(command or []), *(container.get("args") or [])]
        ]
        if argv and argv[0] == "python":
            argv[0] = sys.executable  # the host's Python plays the image's
        cwd = container.get("workingDir")
        if not cwd or not os.path.isdir(cwd):
            cwd = str(self.workdir)
        full_env = {"PATH": f"{self.bin}:{os.path.dirname(sys.executable)}:/usr/bin:/bin",
                    "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "HOME": str(self.workdir), **env}  # fmt: skip
        proc = subprocess.Popen(argv, env=full_env, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        self.procs[(ns, name)] = proc
        registered = self.workdir / "exec" / ns / f"{name}.json"
        if main:  # what `kubectl exec` into this container runs with
            registered.parent.mkdir(parents=True, exist_ok=True)
            registered.touch(mode=0o600)  # the env may hold the pod's Secret values
            registered.write_text(json.dumps({"env": full_env, "cwd": cwd}))
        if not self._alive((ns, name)):  # deleted while it started: _terminate saw no process
            _kill(proc, 0)
        assert proc.stdout is not None
        fail = _rank_key(pod) if main else None
        for line in iter(proc.stdout.readline, b""):
            self.state.append_log(ns, name, line, container=container["name"])
            after = self.fail_once.get(fail) if fail else None
            if after is not None and after.encode() in line:
                del self.fail_once[fail]  # type: ignore[arg-type]
                self._oom_killed.add((ns, name))
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
        if main:
            registered.unlink(missing_ok=True)
        self.procs.pop((ns, name), None)
        return code if code >= 0 else None

    def _env(
        self, pod: dict[str, Any], container: dict[str, Any], loopback_names: bool
    ) -> dict[str, str]:
        ns = pod["metadata"]["namespace"]
        out: dict[str, str] = {}
        for e in container.get("env") or []:
            if "value" in e:
                value = expand(e["value"], out)
            else:
                value = self._value_from(pod, ns, e["valueFrom"])
            loopback = loopback_names and e["name"] in ADDRESS_VARS and value in self.dns_names
            if loopback_names and HOSTS_LIST.match(e["name"]):
                value = ",".join("127.0.0.1" if h in self.dns_names else h
                                 for h in value.split(","))  # fmt: skip
            if loopback_names and e["name"] == "TF_CONFIG":
                value = loopback_tf_config(value, self.dns_names, self.tf_ports)
            out[e["name"]] = "127.0.0.1" if loopback else value
        return out

    def _value_from(self, pod: dict[str, Any], ns: str, source: dict[str, Any]) -> str:
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            m = _FIELD.match(path)
            if m:
                return str((pod["metadata"].get(m.group(1)) or {}).get(m.group(2), ""))
            return {"metadata.name": pod["metadata"]["name"], "metadata.namespace": ns}.get(
                path, ""
            )
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            return str(self.state.get(CONFIGMAPS, ns, ref["name"])["data"][ref["key"]])
        ref = source["secretKeyRef"]
        secret = self.state.get(SECRETS, ns, ref["name"])
        return base64.b64decode(secret["data"][ref["key"]]).decode()


def _kill(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    # A container ends whole: what is left of the group after the grace (a grandchild
    # that ignores SIGTERM, holding the log pipe) is killed too, as the runtime would.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(5)


def _rank_key(pod: dict[str, Any]) -> tuple[str, int] | None:
    """(workbench job, rank) of a pod: its completion index, or Master 0 / Worker i+1."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    job = labels.get("workbench.io/job")
    index = (meta.get("annotations") or {}).get(INDEX)
    if job is None:
        return None
    if index is not None:
        return job, int(index)
    kind, i = labels.get("training.kubeflow.org/replica-type"), labels.get(
        "training.kubeflow.org/replica-index")  # fmt: skip
    if kind is None or i is None:
        return None
    return job, int(i) + (0 if kind.lower() == "master" else 1)


def _gpus(pod: dict[str, Any]) -> int:
    return sum(int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0))
               for c in (pod.get("spec") or {}).get("containers") or [])  # fmt: skip


def _phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def _condition(kind: str, reason: str, message: str) -> dict[str, Any]:
    now = now_rfc3339()
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": now, "lastTransitionTime": now}  # fmt: skip


def _cstatus(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    return {"name": container["name"], "image": container.get("image", ""), "imageID": "",
            "ready": "running" in state, "restartCount": 0, "state": state}  # fmt: skip


def _ranges(indexes: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the Job status' completedIndexes)."""
    out: list[str] = []
    for i in indexes:
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def _copy(obj: Any) -> Any:
    import copy

    return copy.deepcopy(obj)


def wait_until(check: Any, timeout: float = 30.0) -> None:
    """Poll ``check()`` until true (AssertionError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.05)
