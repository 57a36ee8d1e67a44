"""The Kubernetes backend's settings: the ``kubernetes:`` section of the workbench config
file, overridden by WORKBENCH_K8S_* variables, and the client made from them.

Example (``~/.config/workbench/config.yaml``)::

    kubernetes:
      kubeconfig: ~/.kube/ack.yaml      # default: $KUBECONFIG, then ~/.kube/config
      context: ack-prod                 # default: the kubeconfig's current context
      namespace: team-a
      service_account: trainer
      image_pull_secrets: [registry-cred]
      flavor: auto                      # auto | indexed | kubeflow | volcano
      volcano_queue: research           # Volcano Jobs' queue when --queue is not given
      scheduler_name: hami-scheduler    # pods' schedulerName (Volcano Jobs: volcano)
      gpu_sharing: gpushare             # none | gpushare | hami: how --gpus 0.5 is asked
      csi_drivers:                      # scheme -> CSI volume (else: init-container copy)
        oss: {driver: ossplugin.csi.alibabacloud.com}
        cpfs: {driver: nasplugin.csi.alibabacloud.com,
               volume_attributes: {server: "{bucket}", path: "/{key}", vers: "3"}}
      instance_specs:                   # per catalogue instance spec
        gpu.a10:
          node_selector: {node.kubernetes.io/instance-type: ecs.gn7i-c8g1.2xlarge}
          tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
          priority_class: high
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import SpecError
from .csi import check_drivers
from .manifests import FLAVORS
from .sharing import check_scheme

ENV_PREFIX = "WORKBENCH_K8S_"
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


@dataclass(frozen=True)
class Placement:
    """Where pods of one instance spec go: node selectors, tolerations, a priority class."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    priority_class: str | None = None


@dataclass(frozen=True)
class KubeSettings:
    """Everything the backend reads from config and env."""

    kubeconfig: str | None = None  # a file; None: $KUBECONFIG, then ~/.kube/config
    context: str | None = None
    in_cluster: bool | None = None  # None: in-cluster when no kubeconfig and a token exists
    namespace: str = "default"
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    flavor: str = "auto"  # auto: kubeflow where the cluster serves PyTorchJobs, else indexed
    wait_image: str = "busybox:1.36"
    master_wait_seconds: int = 600
    master_port: int = 23456  # Kubeflow's default PyTorchJob port
    ttl_seconds_after_finished: int | None = None
    instance_specs: Mapping[str, Placement] = field(default_factory=dict)
    volcano_queue: str | None = None  # None: Volcano's "default" queue
    scheduler_name: str | None = None
    gpu_sharing: str = "none"  # none: a fraction of a GPU is refused
    csi_drivers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def kubeconfig_file(self) -> Path | None:
        """The kubeconfig to load, or None when there is none (nothing to contact)."""
        raw = self.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        path = Path(raw).expanduser() if raw else Path.home() / ".kube" / "config"
        return path if path.is_file() else None

    def use_in_cluster(self) -> bool:
        """True when the client should use the pod's service account."""
        if self.in_cluster is not None:
            return self.in_cluster
        return (
            self.kubeconfig_file() is None
            and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
            and IN_CLUSTER_TOKEN.is_file()
        )


def load_settings(section: Mapping[str, Any] | None) -> KubeSettings:
    """KubeSettings from the config file's ``kubernetes`` section and WORKBENCH_K8S_* env;
    a bad value raises SpecError naming ``kubernetes.<key>``."""
    values = dict(section or {})
    for key in ("kubeconfig", "context", "namespace", "flavor", "service_account"):
        env = os.environ.get(ENV_PREFIX + key.upper())
        if env:
            values[key] = env
    known = {f for f in KubeSettings.__dataclass_fields__}
    unknown = sorted(set(values) - known)
    if unknown:
        raise SpecError(
            f"kubernetes.{unknown[0]}", "unknown setting", f"known: {', '.join(sorted(known))}"
        )
    out: dict[str, Any] = {}
    for key in ("kubeconfig", "context", "service_account", "wait_image", "scheduler_name"):
        if values.get(key) is not None:
            out[key] = _text(values[key], key)
    if "namespace" in values:
        out["namespace"] = check_namespace(values["namespace"], "kubernetes.namespace")
    if "flavor" in values:
        out["flavor"] = check_flavor(values["flavor"], "kubernetes.flavor", allow_auto=True)
    if values.get("volcano_queue") is not None:
        queue = _text(values["volcano_queue"], "volcano_queue")
        if len(queue) > 253 or not DNS1123_SUBDOMAIN.match(queue):
            raise SpecError("kubernetes.volcano_queue", f"{queue!r} is not a queue name",
                            "use lowercase letters, digits, '-' and '.', e.g. research")  # fmt: skip
        out["volcano_queue"] = queue
    if "gpu_sharing" in values:
        out["gpu_sharing"] = check_scheme(values["gpu_sharing"], "kubernetes.gpu_sharing")
    if values.get("csi_drivers"):
        out["csi_drivers"] = check_drivers(values["csi_drivers"], "kubernetes.csi_drivers")
    if values.get("in_cluster") is not None:
        out["in_cluster"] = bool(values["in_cluster"])
    if "image_pull_secrets" in values:
        out["image_pull_secrets"] = tuple(
            _text(s, "image_pull_secrets")
            for s in _list(values["image_pull_secrets"], "image_pull_secrets")
        )
    for key in ("master_wait_seconds", "master_port", "ttl_seconds_after_finished"):
        if values.get(key) is not None:
            out[key] = _int(values[key], key)
    if values.get("instance_specs"):
        specs = values["instance_specs"]
        if not isinstance(specs, Mapping):
            raise SpecError(
                "kubernetes.instance_specs", "must map instance spec names to placement"
            )
        out["instance_specs"] = {str(k): _placement(str(k), v) for k, v in specs.items()}
    return KubeSettings(**out)


def check_namespace(value: Any, where: str) -> str:
    """A namespace name (DNS-1123 label) or SpecError on ``where``."""
    if not isinstance(value, str) or len(value) > 63 or not DNS1123_LABEL.match(value):
        raise SpecError(where, f"{value!r} is not a namespace name",
                        "use lowercase letters, digits and '-', e.g. team-a")  # fmt: skip
    return value


def check_flavor(value: Any, where: str, allow_auto: bool = False) -> str:
    """A flavour name or SpecError on ``where``."""
    choices = (*FLAVORS, "auto") if allow_auto else FLAVORS
    if value not in choices:
        raise SpecError(where, f"unknown flavour {value!r}", f"use one of {', '.join(choices)}")
    return str(value)


def _placement(name: str, raw: Any) -> Placement:
    where = f"kubernetes.instance_specs.{name}"
    if not isinstance(raw, Mapping):
        raise SpecError(where, "must be a mapping (node_selector, tolerations, priority_class)")
    unknown = sorted(set(raw) - {"node_selector", "tolerations", "priority_class"})
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", "unknown setting",
                        "known: node_selector, tolerations, priority_class")  # fmt: skip
    selector = raw.get("node_selector") or {}
    if not isinstance(selector, Mapping):
        raise SpecError(f"{where}.node_selector", "must map label names to values")
    tolerations = _list(raw.get("tolerations") or [], f"instance_specs.{name}.tolerations")
    if not all(isinstance(t, Mapping) for t in tolerations):
        raise SpecError(f"{where}.tolerations", "must be a list of toleration mappings")
    priority = raw.get("priority_class")
    return Placement(
        node_selector={str(k): str(v) for k, v in selector.items()},
        tolerations=tuple(dict(t) for t in tolerations),
        priority_class=None if priority is None else str(priority),
    )


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(f"kubernetes.{key}", f"must be text, got {value!r}")
    return value


def _int(value: Any, key: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0:
        raise SpecError(f"kubernetes.{key}", f"{value!r} is not a whole number of seconds")
    return number


def _list(value: Any, key: str) -> list[Any]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"kubernetes.{key}", "must be a list")
    return list(value)
