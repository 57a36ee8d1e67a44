"""The local backend's container runtime: engine discovery, submit-time checks, cleanup.

Workers run as containers through the Docker Engine API (the ``docker`` SDK), which Docker
and Podman's service (``podman system service``) both speak. At submit the backend asks
:func:`plan_job` which runtime a job gets; a container job has every check done before
anything starts (engine answers, image present or pullable, GPUs passable) and its plan
saved in the job folder, where each rank's wrapper (``_container_rank``) reads it.
Everything this runtime creates carries ``workbench.job=NAME``, so :func:`remove_job_objects`
can sweep it away whatever happened to the wrapper.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailableError, SpecError, SubmitError

BACKEND = "local"
RUNTIMES = ("auto", "process", "container")
PLAN_FILE = "container.json"
LABEL_JOB = "workbench.job"
# An image with this label runs `python -m workbench.monitor.agent -- CMD` (our Dockerfiles set it).
AGENT_LABEL = "org.workbench.agent"
LABEL_RANK = "workbench.rank"
LABEL_ATTEMPT = "workbench.attempt"
PROBE_TIMEOUT = 2.0  # seconds an engine gets to answer a ping when `auto` looks for one
# Pinned so a client skips version negotiation (a /version call: ~0.3 s on Podman, per
# client). 1.41 is served by Docker 20.10+ and Podman 3+, and has device requests.
API_VERSION = "1.41"
INSTALL_HINT = "pip install 'jupyter-gpu-workbench[container]' (the docker SDK)"


@dataclass
class ContainerPlan:
    """How a container job runs: which engine, which image, how GPUs pass."""

    engine: str  # Docker Engine API URL, e.g. unix:///run/podman/podman.sock
    flavour: str  # "docker" or "podman" (they pass GPUs differently)
    image: str
    gpu_mode: str = "none"  # "none" | "device_requests" (Docker) | "cdi" (Podman, Docker 25+)
    pull: bool = False  # True when the image is not local yet (the first rank pulls it)

    def save(self, job_dir: Path) -> None:
        """Write the plan where the rank wrappers find it."""
        (Path(job_dir) / PLAN_FILE).write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, job_dir: Path | str) -> ContainerPlan:
        """Read the plan saved at submit."""
        return cls(**json.loads((Path(job_dir) / PLAN_FILE).read_text()))


def docker_sdk() -> Any:
    """The ``docker`` module, or BackendUnavailableError with the install hint."""
    try:
        import docker
    except ImportError:
        raise BackendUnavailableError(
            BACKEND, "the container runtime needs the docker SDK", INSTALL_HINT
        ) from None
    return docker


def engine_candidates(environ: dict[str, str] | None = None) -> list[str]:
    """Engine URLs to try, in order: DOCKER_HOST, then the usual Docker and Podman sockets."""
    env = os.environ if environ is None else environ
    if env.get("DOCKER_HOST"):
        return [env["DOCKER_HOST"]]
    sockets = ["/var/run/docker.sock"]
    if env.get("XDG_RUNTIME_DIR"):
        sockets.append(os.path.join(env["XDG_RUNTIME_DIR"], "podman", "podman.sock"))
    sockets.append("/run/podman/podman.sock")
    return [f"unix://{s}" for s in sockets]


def connect(url: str, timeout: float = 60.0) -> Any:
    """A DockerClient for ``url`` (no request made yet)."""
    return docker_sdk().DockerClient(base_url=url, timeout=timeout, version=API_VERSION)


def find_engine(timeout: float = PROBE_TIMEOUT) -> tuple[str | None, str]:
    """The first engine URL that answers a ping, or (None, why none did)."""
    tried = []
    for url in engine_candidates():
        if url.startswith("unix://") and not os.path.exists(url[len("unix://") :]):
            tried.append(f"{url}: no such socket")
            continue
        try:
            client = connect(url, timeout)
            try:
                client.ping()
            finally:
                client.close()
            return url, ""
        except BackendUnavailableError:
            raise
        except Exception as e:  # the SDK raises requests/urllib3/docker errors alike
            tried.append(f"{url}: {_short(e)}")
    return None, "; ".join(tried)


def engine_flavour(client: Any) -> str:
    """ "podman" when the engine is Podman's service, else "docker"."""
    # Podman's service says so in its ping headers (cheap); else ask for the version.
    headers = client.api.get(client.api._url("/_ping")).headers
    if "Libpod-Api-Version" in headers or "libpod" in headers.get("Server", "").lower():
        return "podman"
    version = client.version()
    names = [str(c.get("Name", "")) for c in version.get("Components") or []]
    return "podman" if any("podman" in n.lower() for n in names) else "docker"


def resolve_runtime(requested: str) -> tuple[str, str | None, str]:
    """(runtime, engine URL or None, why no engine) for a spec's ``runtime`` field."""
    if requested not in RUNTIMES:
        raise SpecError(
            "runtime", f"unknown runtime {requested!r}", "use auto, process or container"
        )
    if requested == "process":
        return "process", None, ""
    try:
        url, why = find_engine()
    except BackendUnavailableError:
        if requested == "container":
            raise
        return "process", None, "the docker SDK is not installed"
    if url is None:
        if requested == "container":
            raise BackendUnavailableError(
                BACKEND,
                f"--runtime container, but no container engine answers ({why})",
                "start Docker or `podman system service`, set DOCKER_HOST to its socket, "
                "or use --runtime process",
            )
        return "process", None, why
    return "container", url, ""


def plan_job(spec: Any, image_ref: str, runtime: str | None = None) -> ContainerPlan | None:
    """The container plan for ``spec`` (None: it runs as processes); checks everything first.

    ``runtime`` (a backend option) overrides the spec's ``runtime`` field."""
    runtime, url, _ = resolve_runtime(runtime or getattr(spec, "runtime", "auto") or "auto")
    if runtime == "process" or url is None:
        return None
    docker = docker_sdk()
    client = connect(url)
    try:
        try:
            flavour = engine_flavour(client)
        except Exception as e:
            raise BackendUnavailableError(
                BACKEND, f"the container engine at {url} does not answer: {_short(e)}"
            ) from None
        plan = ContainerPlan(engine=url, flavour=flavour, image=image_ref)
        plan.pull = not _image_present(client, docker, image_ref)
        if plan.pull:
            _check_pullable(client, image_ref)
        if float(spec.gpus) > 0:
            plan.gpu_mode = gpu_mode(client, flavour)
        return plan
    finally:
        client.close()


def _image_present(client: Any, docker: Any, ref: str) -> bool:
    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.APIError as e:
        raise SubmitError(
            BACKEND, f"the container engine cannot look up image {ref}: {_short(e)}"
        ) from None


def _check_pullable(client: Any, ref: str) -> None:
    """A missing image must be one the engine can pull; else say how to get it."""
    how = (
        f"build it (see docker/README.md: `podman build -f docker/pytorch.Dockerfile -t {ref} .` "
        f"or `docker build ...`), or `docker pull`/`podman pull` it, then submit again; "
        "--runtime process runs the job without a container"
    )
    if ref.startswith("localhost/"):  # a local-only name: no registry will ever have it
        raise SubmitError(BACKEND, f"image {ref} is not on this machine; {how}")
    try:
        client.api.inspect_distribution(ref)
    except Exception as e:
        raise SubmitError(
            BACKEND, f"image {ref} is not on this machine and cannot be pulled ({_short(e)}); {how}"
        ) from None


def nvidia_cdi_specs() -> list[Path]:
    """NVIDIA CDI spec files on this host (what `nvidia-ctk cdi generate` writes)."""
    found: list[Path] = []
    for d in ("/etc/cdi", "/var/run/cdi", "/run/cdi"):
        with contextlib.suppress(OSError):
            found += [p for p in Path(d).glob("*.*") if "nvidia" in p.read_text(errors="ignore")]
    return found


def gpu_mode(client: Any, flavour: str) -> str:
    """How this engine takes GPUs; SubmitError when it cannot take any."""
    if flavour == "podman":
        if nvidia_cdi_specs():
            return "cdi"
        raise SubmitError(
            BACKEND,
            "the job asks for GPUs but Podman has no NVIDIA CDI spec (nothing in /etc/cdi or "
            "/var/run/cdi names nvidia.com/gpu); install the NVIDIA Container Toolkit and run "
            "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`, or use --gpus 0",
        )
    info = client.info()
    if "nvidia" in (info.get("Runtimes") or {}) or shutil.which("nvidia-container-runtime-hook"):
        return "device_requests"
    if info.get("CDISpecDirs") and nvidia_cdi_specs():
        return "cdi"
    raise SubmitError(
        BACKEND,
        "the job asks for GPUs but the Docker engine has no NVIDIA runtime (no 'nvidia' in its "
        "runtimes, no nvidia-container-runtime-hook, no NVIDIA CDI spec); install the NVIDIA "
        "Container Toolkit and restart Docker, or use --gpus 0",
    )


def gpu_options(plan: ContainerPlan, host_gpus: list[str]) -> dict[str, Any]:
    """containers.create() keywords that pass exactly ``host_gpus`` (host indices)."""
    if not host_gpus or plan.gpu_mode == "none":
        return {}
    if plan.gpu_mode == "cdi":
        return {"devices": [f"nvidia.com/gpu={i}" for i in host_gpus]}
    docker = docker_sdk()
    request = docker.types.DeviceRequest(device_ids=list(host_gpus), capabilities=[["gpu"]])
    return {"device_requests": [request]}


def job_filter(name: str) -> dict[str, Any]:
    """The label filter that finds everything of one job."""
    return {"label": f"{LABEL_JOB}={name}"}


def remove_job_objects(job_dir: Path | str, name: str) -> list[str]:
    """Remove every container, network and volume labelled with job ``name``; what went."""
    try:
        plan = ContainerPlan.load(job_dir)
    except (OSError, ValueError):
        return []
    removed: list[str] = []
    client = connect(plan.engine, timeout=30)
    try:
        for c in client.containers.list(all=True, filters=job_filter(name)):
            with contextlib.suppress(Exception):  # already gone is fine
                c.remove(force=True)
                removed.append(f"container {c.name}")
        for n in client.networks.list(filters=job_filter(name)):
            with contextlib.suppress(Exception):
                n.remove()
                removed.append(f"network {n.name}")
        for v in client.volumes.list(filters=job_filter(name)):
            with contextlib.suppress(Exception):
                v.remove(force=True)
                removed.append(f"volume {v.name}")
    except Exception as e:  # an engine that went away leaves nothing we could remove
        removed.append(f"cleanup failed: {_short(e)}")
    finally:
        client.close()
    return removed


def supervisor_cleanup(sup: Any) -> None:
    """The supervisor's safety net: sweep the job's labelled objects (logged, never raised)."""
    for line in remove_job_objects(sup.files.dir, sup.name):
        print(f"[workbench] removed {line}", flush=True)


def rank_argv(sup: Any, argv: list[str], rank: int, proc: int) -> list[str]:
    """The wrapper command the supervisor runs for one rank's process instead of ``argv``."""
    import sys

    return [
        sys.executable, "-m", "workbench.backends._container_rank",
        "--home", str(sup.home), "--job", sup.name, "--rank", str(rank),
        "--proc", str(proc), "--attempt", str(sup.attempt), "--", *argv,
    ]  # fmt: skip


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]
