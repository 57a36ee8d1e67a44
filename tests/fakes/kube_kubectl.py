"""The two images the fake MPIJob launcher needs, as a standalone script (stdlib only):

* ``deliver --registry DIR --hostfile PATH``: what the operator's ``kubectl-delivery`` init
  container does: put a ``kubectl`` into $TARGET_DIR, then wait until every pod named in
  the hostfile runs (so mpirun never dials a worker that is not there yet);
* ``exec --registry DIR POD [--container C | -c C] -- CMD...``: that kubectl's ``exec``:
  run CMD as a local process with the env and working directory of POD's running
  container, as the real ``kubectl exec`` runs it inside the container. The fake kubelet
  registers each running main container in DIR/NAMESPACE/POD.json. Each exec appends one
  JSON line (pod, container, command) to DIR/exec.log, in a single O_APPEND write, so
  concurrent execs never interleave: the record a test reads, like an apiserver's audit
  log of ``pods/exec``. (The rsh agent's own ``set -x`` trace cannot serve: two agents
  share one stderr and their trace lines interleave mid-line.)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def _find(registry: Path, pod: str) -> dict[str, object] | None:
    # A pod name is unique per namespace; the fake's tests run one namespace per job.
    found = sorted(registry.glob(f"*/{pod}.json"))
    if len(found) != 1:
        return None
    try:
        entry: dict[str, object] = json.loads(found[0].read_text())
    except (OSError, ValueError):
        return None
    return entry


def deliver(registry: Path, hostfile: Path, timeout: float = 300.0) -> int:
    """Install kubectl into $TARGET_DIR and wait for the hostfile's pods."""
    target = Path(os.environ["TARGET_DIR"])
    target.mkdir(parents=True, exist_ok=True)
    kubectl = target / "kubectl"
    kubectl.write_text(
        f'#!/bin/sh\ncmd="$1"; shift\nexec {sys.executable} {Path(__file__).resolve()} '
        f'"$cmd" --registry {registry} "$@"\n'
    )
    kubectl.chmod(0o755)
    hosts = [line.split()[0] for line in hostfile.read_text().splitlines() if line.strip()]
    deadline = time.monotonic() + timeout
    while any(_find(registry, h) is None for h in hosts):
        if time.monotonic() > deadline:
            print(f"kubectl-delivery: workers not running after {timeout:g}s", file=sys.stderr)
            return 1
        time.sleep(0.1)
    return 0


def _audit(registry: Path, entry: dict[str, object]) -> None:
    line = (json.dumps(entry) + "\n").encode()
    fd = os.open(registry / "exec.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write on an O_APPEND fd: whole, never interleaved
    finally:
        os.close(fd)


def exec_log(registry: Path) -> list[dict[str, object]]:
    """Every ``kubectl exec`` the fake ran under REGISTRY, in order."""
    path = registry / "exec.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def kubectl_exec(registry: Path, args: list[str]) -> int:
    """``kubectl exec POD [-c C] -- CMD...``: exec CMD with the container's env."""
    if "--" not in args:
        print("error: you must specify a command after --", file=sys.stderr)
        return 1
    head, cmd = args[: args.index("--")], args[args.index("--") + 1 :]
    pods = [a for i, a in enumerate(head) if not a.startswith("-")
            and (i == 0 or head[i - 1] not in ("-c", "--container"))]  # fmt: skip
    entry = _find(registry, pods[0]) if pods and cmd else None
    if entry is None:
        print(f"error: unable to upgrade connection: pod {pods[:1]} is not running",
              file=sys.stderr)  # fmt: skip
        return 1
    container = next((head[i + 1] for i, a in enumerate(head[:-1])
                      if a in ("-c", "--container")), None)  # fmt: skip
    _audit(registry, {"pod": pods[0], "container": container, "command": cmd})
    env = {str(k): str(v) for k, v in dict(entry["env"]).items()}  # type: ignore[call-overload]
    os.chdir(str(entry["cwd"]))
    os.execvpe(cmd[0], cmd, env)
    return 127  # not reached


def main(argv: list[str]) -> int:
    """Dispatch ``deliver`` / ``exec``."""
    cmd, rest = argv[0], argv[1:]
    registry = Path(rest[rest.index("--registry") + 1])
    rest = rest[: rest.index("--registry")] + rest[rest.index("--registry") + 2 :]
    if cmd == "deliver":
        return deliver(registry, Path(rest[rest.index("--hostfile") + 1]))
    if cmd == "exec":
        return kubectl_exec(registry, rest)
    print(f"error: unknown command {cmd!r} for the fake kubectl", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
