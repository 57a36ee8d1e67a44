"""Pod volumes on the fake node: ``configMap`` and ``emptyDir`` volumes become folders
under the kubelet's workdir (a ConfigMap's items written with their modes).

The processes share the host's filesystem (no mount namespace), so a container sees a
volume at its folder rather than at its ``mountPath``: the kubelet rewrites the
mountPaths in the container's env values and command, and in the ConfigMap files
themselves, to the folders (``/etc/mpi/hostfile`` -> ``WORKDIR/volumes/NS/POD/VOL/hostfile``).
Other volume kinds are not mounted.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from .kube_state import ClusterState

CONFIGMAPS = ("", "v1", "configmaps")


def materialize(state: ClusterState, pod: dict[str, Any], root: Path) -> dict[str, Path]:
    """Create ``pod``'s configMap and emptyDir volumes; volume name -> folder."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    base = root / "volumes" / ns / name
    shutil.rmtree(base, ignore_errors=True)
    out: dict[str, Path] = {}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        if "emptyDir" in vol:
            out[vol["name"]] = base / vol["name"]
            out[vol["name"]].mkdir(parents=True)
        elif "configMap" in vol:
            out[vol["name"]] = base / vol["name"]
            out[vol["name"]].mkdir(parents=True)
    mounts = mount_map(pod, out)
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        if "configMap" in vol:
            source = vol["configMap"]
            data = state.get(CONFIGMAPS, ns, source["name"]).get("data") or {}
            items = source.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                path = out[vol["name"]] / item["path"]
                path.write_text(rewrite(data[item["key"]], mounts))
                path.chmod(int(item.get("mode", source.get("defaultMode", 0o644))))
    return out


def mount_map(pod: dict[str, Any], volumes: dict[str, Path],
              container: dict[str, Any] | None = None) -> dict[str, str]:  # fmt: skip
    """mountPath -> folder, for ``container`` (or every container of the pod)."""
    spec = pod.get("spec") or {}
    containers = [container] if container else [*spec.get("initContainers", []),
                                                 *spec.get("containers", [])]  # fmt: skip
    return {m["mountPath"].rstrip("/"): str(volumes[m["name"]])
            for c in containers for m in c.get("volumeMounts") or [] if m["name"] in volumes}  # fmt: skip


def rewrite(text: str, mounts: dict[str, str]) -> str:
    """``text`` with each mountPath (as a whole path prefix) replaced by its folder."""
    if not mounts:
        return text
    pattern = "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True))
    return re.sub(rf"(?<![\w/.-])({pattern})(?=/|\b|$)", lambda m: mounts[m.group(1)], text)
