"""TrainSpec -> a Volcano ``batch.volcano.sh/v1alpha1`` Job (gang scheduled). Pure dicts.

One task ``worker`` with a replica per worker and ``minAvailable`` equal to all of them,
so Volcano's gang plugin starts the whole job or nothing. The ``svc`` plugin gives each
pod the hostname ``JOB-worker-I`` under a headless Service named after the job, writes
the hosts ConfigMap (``/etc/volcano/worker.host``, ``VC_WORKER_HOSTS``,
``VC_WORKER_NUM``); the ``env`` plugin gives ``VC_TASK_INDEX``. The main container maps
those onto workbench's contract (RANK, MASTER_ADDR, WORLD_SIZE, PET_*, WORKBENCH_*)
before it runs the command, so the script a local job runs runs here unchanged
(learned from volcano-sh/volcano pkg/controllers/job/plugins/{svc,env}, not copied).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from ...contract import World, worker_env
from ...errors import SpecError
from ...spec import TrainSpec

if TYPE_CHECKING:
    from .manifests import ClusterOptions, _PodBuilder

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
API_VERSION = "batch.volcano.sh/v1alpha1"
GROUP, VERSION, PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
PODGROUPS = ("scheduling.volcano.sh", "v1beta1", "podgroups")
KIND_KEY = "Job.batch.volcano.sh"  # details["kind"]: batch/v1's Job is "Job"
SCHEDULER = "volcano"
TASK = "worker"
TASK_INDEX = "volcano.sh/task-index"  # annotation and label the job controller sets
HOSTS_FILE = f"/etc/volcano/{TASK}.host"
# What the mapping below sets from Volcano's variables: never rendered as static values.
MAPPED = frozenset({"RANK", "PET_NODE_RANK", "WORKBENCH_RANK", "MASTER_ADDR", "PET_MASTER_ADDR",
                    "PET_NNODES", "WORLD_SIZE", "WORKBENCH_WORLD_SIZE"})  # fmt: skip


def mapping_script(framework: str, procs: int) -> str:
    """A POSIX shell prologue: Volcano's variables -> the contract, then ``exec`` the
    command (``$0 $@``). ``$$`` is Kubernetes' escape for ``$`` in commands."""
    task = TASK.upper()
    lines = [
        'i="${VC_TASK_INDEX:?the volcano env plugin sets VC_TASK_INDEX}"',
        f'hosts="${{VC_{task}_HOSTS:-}}"',
        # --inject-hosts-env=false leaves only the hosts file (large jobs).
        f'if [ -z "$hosts" ] && [ -r {HOSTS_FILE} ]; then '
        f"hosts=\"$$(tr '\\n' , < {HOSTS_FILE})\"; fi",
        f'n="${{VC_{task}_NUM:?the volcano svc plugin sets VC_{task}_NUM}}"',
        'export WORKBENCH_RANK="$i" WORKBENCH_WORLD_SIZE="$n"',
    ]
    if framework == "pytorch":
        lines.append(
            'master="${hosts%%,*}"; export RANK="$i" PET_NODE_RANK="$i" PET_NNODES="$n" '
            f'WORLD_SIZE="$$((n * {procs}))" MASTER_ADDR="$master" PET_MASTER_ADDR="$master"'
        )
    lines.append('exec "$0" "$@"')
    return "; ".join(lines)


def render_volcano(spec: TrainSpec, options: ClusterOptions, builder: _PodBuilder,
                   labels: dict[str, str]) -> list[dict[str, Any]]:  # fmt: skip
    """The Volcano Job of ``spec`` (the svc plugin makes its Service and hosts ConfigMap)."""
    from .manifests import _meta

    framework = spec.framework or "pytorch"
    if framework not in ("pytorch", "plain"):
        raise SpecError("framework", f"{framework} jobs are not rendered for Volcano yet",
                        "use a pytorch or plain image")  # fmt: skip
    queue, priority = spec.queue or options.queue, spec.priority or options.priority_class
    for key, value in (("queue", queue), ("priority", priority)):
        if value is not None and (len(value) > 253 or not DNS1123_SUBDOMAIN.match(value)):
            raise SpecError(key, f"{value!r} cannot name a Volcano {key}",
                            "use lowercase letters, digits, '-' and '.', e.g. research")  # fmt: skip
    name, procs = spec.name or "", spec.procs_per_worker or 1
    hosts = tuple(f"{name}-{TASK}-{i}.{name}" for i in range(spec.workers))
    world = World(spec.workers, procs, hosts[0], options.master_port, hosts,
                  (options.master_port,) * spec.workers)  # fmt: skip
    contract = worker_env(framework, world, 0, name)
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    env += [{"name": k, "value": v} for k, v in contract.items() if k not in MAPPED]
    command = ["sh", "-c", mapping_script(framework, procs), *builder.args()]
    init = []
    if spec.workers > 1:
        index = {"fieldRef": {"fieldPath": f"metadata.annotations['{TASK_INDEX}']"}}
        init.append(builder.wait_for_master(hosts[0], skip_rank_zero=index))
    pod = builder.pod_spec(TASK, env, command, init, port_name="master")
    pod["restartPolicy"] = "Never"
    if spec.timeout:
        pod["activeDeadlineSeconds"] = math.ceil(spec.timeout)
    job_spec: dict[str, Any] = {
        "schedulerName": options.scheduler_name or SCHEDULER,
        "minAvailable": spec.workers,  # the gang: every worker or none
        "maxRetry": spec.max_retries,
        "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
        # A failed or evicted worker ends the gang (the backend restarts whole gangs).
        "policies": [
            {"event": "PodFailed", "action": "TerminateJob"},
            {"event": "PodEvicted", "action": "TerminateJob"},
        ],
        "tasks": [
            {
                "name": TASK,
                "replicas": spec.workers,
                "minAvailable": spec.workers,
                "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
            }
        ],
    }
    if queue:
        job_spec["queue"] = queue
    if priority:
        job_spec["priorityClassName"] = priority
    if options.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = options.ttl_seconds_after_finished
    meta = _meta(name, options, labels)
    return [{"apiVersion": API_VERSION, "kind": "Job", "metadata": meta, "spec": job_spec}]


def is_volcano(obj: dict[str, Any] | None) -> bool:
    """True for a Volcano Job object."""
    return bool(obj) and str((obj or {}).get("apiVersion", "")).startswith(GROUP + "/")
