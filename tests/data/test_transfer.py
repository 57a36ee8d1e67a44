"""``python -m workbench.data prefetch|upload`` as a pod runs it, against real S3 (moto) and
OSS (the bridge): contents byte for byte, progress on stderr, one-line errors with exit
codes, credentials from the environment only, and the command line the manifests render."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from workbench.backends.kubernetes.manifests import ClusterOptions, render
from workbench.catalog import load_catalog
from workbench.spec import TrainSpec

OBJECTS = {
    "train/a.txt": b"alpha\n",
    "train/sub/b.bin": os.urandom(300_000),
    "train/sub/deeper/c.csv": b"x,y\n1,2\n",
}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench.data", *args], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip


def fill(client: Any, bucket: str) -> None:
    for key, body in OBJECTS.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("scheme", ["s3", "oss"])
def test_prefetch_copies_a_prefix_into_dest(scheme: str, oss, bucket: str, tmp_path: Path) -> None:
    fill(oss, bucket)
    dest = tmp_path / "stage" / "data-0"
    out = run("prefetch", f"{scheme}://{bucket}/train", str(dest))
    assert out.returncode == 0, out.stderr
    assert tree(dest) == {k.removeprefix("train/"): v for k, v in OBJECTS.items()}
    assert f"prefetching {scheme}://{bucket}/train: 3/3 files" in out.stderr
    assert out.stdout.startswith(f"prefetch 3 file(s), 0.3 MB (fetched 3) -> {dest}")
    assert not (dest / ".workbench-cache").exists()  # the staging cache is gone
    (dest / "a.txt").write_bytes(b"the job may write its copy\n")


def test_prefetch_single_object_and_a_shared_node_cache(
    s3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3.put_object(Bucket=bucket, Key="one/train.csv", Body=b"a,b\n1,2\n")
    monkeypatch.setenv("WORKBENCH_DATA_CACHE", str(tmp_path / "node-cache"))
    first = run("prefetch", f"s3://{bucket}/one/train.csv", str(tmp_path / "p1"))
    assert first.returncode == 0, first.stderr
    assert tree(tmp_path / "p1") == {"train.csv": b"a,b\n1,2\n"}
    second = run("prefetch", f"s3://{bucket}/one/train.csv", str(tmp_path / "p2"))
    assert second.returncode == 0, second.stderr
    assert "(fetched 0)" in second.stdout  # the second pod on the node reads the cache
    assert tree(tmp_path / "p2") == {"train.csv": b"a,b\n1,2\n"}


def test_upload_sends_a_folder_and_a_file(s3, bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "out"
    (src / "ckpt").mkdir(parents=True)
    (src / "ckpt" / "model.pt").write_bytes(os.urandom(200_000))
    (src / "metrics.json").write_text('{"acc": 0.9}')
    out = run("upload", str(src), f"s3://{bucket}/runs/r1")
    assert out.returncode == 0, out.stderr
    assert "uploading outputs to" in out.stderr
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"runs/r1/ckpt/model.pt", "runs/r1/metrics.json"}
    body = s3.get_object(Bucket=bucket, Key="runs/r1/ckpt/model.pt")["Body"].read()
    assert body == (src / "ckpt" / "model.pt").read_bytes()
    one = run("upload", str(src / "metrics.json"), f"s3://{bucket}/single.json")
    assert one.returncode == 0, one.stderr
    assert s3.get_object(Bucket=bucket, Key="single.json")["Body"].read() == b'{"acc": 0.9}'


def one_error_line(out: subprocess.CompletedProcess[str], code: int) -> str:
    assert out.returncode == code, (out.returncode, out.stderr)
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("python -m workbench.data ")
    return lines[0]


def test_failures_are_one_line_with_an_exit_code(s3, bucket: str, tmp_path: Path) -> None:
    missing = one_error_line(run("prefetch", "s3://no-such-bucket-x/a", str(tmp_path / "d")), 1)
    assert "does not exist" in missing or "not found" in missing
    assert "upload: error: output:" in one_error_line(
        run("upload", str(tmp_path / "nothing-here"), f"s3://{bucket}/x"), 1
    )
    assert "not an object-store URL" in one_error_line(run("prefetch", "/etc", str(tmp_path)), 2)
    assert "malformed URL" in one_error_line(run("prefetch", "s3:/bucket", str(tmp_path)), 2)
    assert run("prefetch", "s3://b-x/a").returncode == 2  # argparse: DEST missing


def test_credentials_only_from_env_never_echoed(
    moto_with_auth: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    in_url = one_error_line(run("prefetch", f"s3://AKIDX:{secret}@locked/x", str(tmp_path)), 2)
    assert secret not in in_url and "holds credentials" in in_url
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OSS_"))}
    env.update(AWS_ENDPOINT_URL=moto_with_auth["endpoint"], AWS_DEFAULT_REGION="us-east-1",
               AWS_ACCESS_KEY_ID="AKIDUNKNOWN", AWS_SECRET_ACCESS_KEY=secret,
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_CONFIG_FILE=str(tmp_path / "none"))  # fmt: skip
    wrong = one_error_line(run("prefetch", "s3://locked/x", str(tmp_path / "d"), env=env), 1)
    assert "wrong credentials" in wrong and secret not in wrong


def test_no_config_file_is_consulted(
    s3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod only the environment counts: the settings file is never loaded."""
    from workbench.data import transfer
    from workbench.settings import Settings

    def refuse(*_: Any, **__: Any) -> Settings:
        raise AssertionError("Settings.load() was called")

    monkeypatch.setattr(Settings, "load", classmethod(refuse))
    fill(s3, bucket)
    done = transfer.prefetch(f"s3://{bucket}/train", tmp_path / "d")
    assert (done.files, done.fetched) == (3, 3)
    assert transfer.upload(tmp_path / "d", f"s3://{bucket}/back").files == 3


def test_the_init_container_the_manifests_render_runs_as_is(
    s3, bucket: str, moto_endpoint: str, tmp_path: Path
) -> None:
    """The prefetch init container's command and env (Secret references resolved as the
    kubelet would) fill the volume; only DEST moves from /workbench/stage to a temp dir."""
    fill(s3, bucket)
    spec = TrainSpec.from_dict({
        "name": "mnist-1", "command": ["python", "train.py"], "image": "pytorch",
        "data": [f"s3://testing:testing-secret@{bucket}/train:/data"],
        "env": {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_DEFAULT_REGION": "us-east-1"},
    }).validate(load_catalog())  # fmt: skip
    catalog = load_catalog()
    job = render(spec, catalog.spec(spec.instance_spec or ""), spec.image_ref(catalog),
                 ClusterOptions(namespace="team-a"), "indexed")  # fmt: skip
    pod = next(m for m in job.manifests if m["kind"] == "Job")["spec"]["template"]["spec"]
    (init,) = [c for c in pod["initContainers"] if c["name"].startswith("prefetch-")]
    assert job.secret is not None
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "OSS_")) and k not in ("WORKBENCH_CONFIG",)}  # fmt: skip
    for e in init["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        env[e["name"]] = job.secret["stringData"][ref["key"]] if ref else e["value"]
    assert env["AWS_SECRET_ACCESS_KEY"] == "testing-secret"  # from the Secret, not the URL
    command = init["command"]
    assert command[:4] == ["python", "-m", "workbench.data", "prefetch"]
    dest = tmp_path / "stage"
    out = subprocess.run([sys.executable, *command[1:-1], str(dest)], capture_output=True,
                         text=True, timeout=120, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert tree(dest) == {k.removeprefix("train/"): v for k, v in OBJECTS.items()}


def test_run_uploads_what_a_stopped_command_wrote(s3, bucket: str, tmp_path: Path) -> None:
    """``run`` as a pod's PID 1 on cancel: SIGTERM goes on to the command, what it wrote is
    uploaded with the credentials only the upload sees, and the exit code is 128+15."""
    out = tmp_path / "ckpt"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    env |= {"WORKBENCH_UPLOAD_0_AWS_ACCESS_KEY_ID": "testing",
            "WORKBENCH_UPLOAD_0_AWS_SECRET_ACCESS_KEY": "testing-secret"}  # fmt: skip
    script = ('env | grep -q WORKBENCH_UPLOAD_ && exit 9; mkdir -p "$0"; echo step-7 > "$0/partial"; '
              'echo ready; exec sleep 60')  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "workbench.data", "run", "--upload", str(out),
                             f"s3://{bucket}/stopped", "--", "sh", "-c", script, str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "command exited with code 143; uploading outputs" in err
    assert s3.get_object(Bucket=bucket, Key="stopped/partial")["Body"].read() == b"step-7\n"
