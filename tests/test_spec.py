"""TrainSpec parsing, round trips and every validation error with its message."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.errors import SpecError
from workbench.spec import REDACTED, Mount, TrainSpec, parse_duration


def spec(**kw):
    kw.setdefault("command", ["python", "train.py"])
    return TrainSpec.from_dict(kw)


def test_defaults_fill_in_from_catalogue():
    s = spec().validate()
    assert s.framework == "pytorch"
    assert s.instance_spec == "cpu.4x"
    assert s.procs_per_worker == 1
    s = spec(gpus=2).validate()
    assert s.instance_spec == "gpu.2x" and s.procs_per_worker == 2
    s = spec(gpus=0.5).validate()
    assert s.instance_spec == "gpu.0.5x" and s.procs_per_worker == 1
    assert spec(image="tensorflow").validate().framework == "tensorflow"


def test_dict_and_yaml_round_trip(tmp_path: Path):
    s = spec(
        name="mnist-1",
        workers=2,
        gpus=1,
        image="pytorch:2.13",
        data=["oss://b/imagenet:/data"],
        outputs=["s3://b/run1:./ckpt:rw"],
        env={"LR": "0.1"},
        max_retries=2,
        timeout="1h30m",
        priority="high",
        queue="research",
    ).validate()
    again = TrainSpec.from_dict(s.to_dict()).validate()
    assert again == s
    path = tmp_path / "job.yaml"
    path.write_text(s.to_yaml())
    assert TrainSpec.from_yaml(path).validate() == s
    assert s.timeout == 5400
    assert s.data == [Mount("oss://b/imagenet", "/data", "ro")]


def test_yaml_aliases_and_relative_workdir(tmp_path: Path):
    (tmp_path / "code").mkdir()
    path = tmp_path / "job.yaml"
    path.write_text(
        "command: python train.py --epochs 3\nnprocPerNode: 2\nretry: 1\nspec: gpu.2x\nworkdir: code\n"
    )
    s = TrainSpec.from_yaml(path)
    assert s.command == ["python", "train.py", "--epochs", "3"]
    assert (s.procs_per_worker, s.max_retries, s.instance_spec) == (2, 1, "gpu.2x")
    assert s.working_dir == str(tmp_path / "code")


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ({"workers": -1}, "workers", "must be at least 1, got -1"),
        ({"workers": 0}, "workers", "must be at least 1"),
        ({"workers": "two"}, "workers", "must be a whole number"),
        ({"workers": 1.5}, "workers", "must be a whole number"),
        ({"image": "pytorchh"}, "image", "unknown image 'pytorchh'"),
        ({"image": "pytorch:9.9"}, "image", "has no tag '9.9'"),
        ({"instance_spec": "gpu.3x"}, "spec", "unknown instance spec 'gpu.3x'"),
        ({"env": {"1BAD": "x"}}, "env.1BAD", "not a valid variable name"),
        ({"env": {"RANK": "3"}}, "env.RANK", "set by workbench"),
        ({"name": "My_Job"}, "name", "not a valid job name"),
        ({"name": "-lead"}, "name", "not a valid job name"),
        ({"name": "x" * 51}, "name", "51 characters"),
        ({"gpus": 2, "instance_spec": "gpu.1x"}, "gpus", "more than spec gpu.1x offers (1)"),
        ({"gpus": -1}, "gpus", "must be 0 or more"),
        ({"gpus": 1.5}, "gpus", "neither whole nor a fraction"),
        ({"gpus": 16}, "gpus", "no instance spec offers 16"),
        ({"memory": "lots"}, "memory", "not a quantity"),
        ({"cpu": 0}, "cpu", "must be positive"),
        ({"framework": "jax"}, "framework", "unknown framework"),
        ({"max_retries": -2}, "max_retries", "at least 0"),
        ({"procs_per_worker": 0}, "procs_per_worker", "at least 1"),
        ({"timeout": "soon"}, "timeout", "not a duration"),
        ({"command": []}, "command", "non-empty list"),
    ],
)
def test_validation_errors_name_the_field(fields, field, text):
    with pytest.raises(SpecError) as e:
        spec(**fields).validate()
    assert e.value.field == field
    assert text in str(e.value)
    assert str(e.value).startswith(f"{field}: ")


@pytest.mark.parametrize("bad", ["just-a-path", "oss://bucket", ":/data", "src:", "a:b:xx:"])
def test_malformed_mounts(bad):
    with pytest.raises(SpecError) as e:
        spec(data=[bad])
    assert e.value.field == "data"
    assert "SRC:DST" in str(e.value)


def test_mount_forms():
    assert Mount.parse("oss://b/x:/data") == Mount("oss://b/x", "/data", "ro")
    assert Mount.parse("./d:/data:rw") == Mount("./d", "/data", "rw")
    assert Mount.parse("nas://srv/export/p:/mnt/nas").scheme == "nas"
    assert Mount.parse("/local/dir:data").scheme == ""
    with pytest.raises(SpecError, match="climbs out"):
        spec(data=["/x:../escape"]).validate()


@pytest.mark.parametrize(
    "bad", ["s3://AKID:Sekret9@bucket/x", "s3://AKID:Sekret9@bucket", "nas://h:2049/x"]
)
def test_a_mount_without_destination_never_splits_inside_the_url_authority(bad):
    # The colon of user:secret@ or host:port is not the SRC:DST colon: before the fix the
    # first case parsed as src "s3://AKID", dst "Sekret9@bucket/x" (the secret in clear).
    with pytest.raises(SpecError) as e:
        Mount.parse(bad)
    assert e.value.field == "data" and "SRC:DST" in str(e.value)
    assert "Sekret9" not in str(e.value)


def test_colons_inside_the_authority_still_allow_a_destination():
    assert Mount.parse("s3://AKID:Sekret9@bucket/x:/d").dst == "/d"
    assert Mount.parse("nas://h:2049/x:/d:rw") == Mount("nas://h:2049/x", "/d", "rw")
    assert Mount.parse("s3://bucket:/d") == Mount("s3://bucket", "/d", "ro")


def test_command_string_is_split_like_a_shell():
    assert spec(command="python train.py --name 'a b'").command == [
        "python",
        "train.py",
        "--name",
        "a b",
    ]
    with pytest.raises(SpecError, match="command: cannot split") as e:
        spec(command="python -c 'print(1)")
    assert e.value.field == "command"


def test_unknown_field_and_missing_command():
    with pytest.raises(SpecError, match="wrokers: unknown field"):
        TrainSpec.from_dict({"command": ["x"], "wrokers": 2})
    with pytest.raises(SpecError, match="command: is required"):
        TrainSpec.from_dict({"workers": 2})


def test_secret_env_is_redacted_but_kept_apart():
    s = spec(env={"OSS_ACCESS_KEY_SECRET": "s3cr3t", "HF_TOKEN": "tok", "LR": "0.1"}).validate()
    assert s.secret_env() == {"OSS_ACCESS_KEY_SECRET": "s3cr3t", "HF_TOKEN": "tok"}
    r = s.redacted()
    assert r.env == {"OSS_ACCESS_KEY_SECRET": REDACTED, "HF_TOKEN": REDACTED, "LR": "0.1"}
    assert "s3cr3t" not in r.to_yaml()
    assert s.env["OSS_ACCESS_KEY_SECRET"] == "s3cr3t"  # the original is untouched


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(90, 90), ("90", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("45s", 45)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_backend_must_be_known():
    with pytest.raises(SpecError, match="unknown backend 'k9s'"):
        spec(backend="k9s").validate(backends=("local",))
