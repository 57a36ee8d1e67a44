"""Backend.admit -> Plan (every check, no side effects), launch(plan), and the dry run on
the Python API, the CLI and the magic; backend_options validated by the backend."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import workbench
from tests.data.conftest import bucket, moto_endpoint, s3  # noqa: F401 (fixtures)
from tests.monitor.conftest import clock, install_fake  # noqa: F401 (fixtures)
from workbench.cli import main
from workbench.errors import MountError, SpecError, SubmitError
from workbench.manager import JobManager
from workbench.plan import Plan
from workbench.spec import JobStatus, TrainSpec

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TOKEN = "hf_" + "s3cr3t" * 4  # an env value that must never be shown
DB_PW = "pw-" + uuid.uuid4().hex


def created_nothing(manager: JobManager, home: Path) -> None:
    """No row in the store and no job folder under the home."""
    assert manager.list() == []
    assert manager.store.count(None) == 0
    jobs = home / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == []


def ok_spec(**kw: object) -> TrainSpec:
    data = {"command": ["python", "fail_rank.py"], "working_dir": str(SCRIPTS), "workers": 2}
    data.update(kw)
    return TrainSpec.from_dict(data)


def test_admit_creates_nothing_then_launch_runs_the_plan(manager, wb_home):
    plan = manager.admit(ok_spec(name="planned", env={"FAIL_RANK": "9"}))
    assert isinstance(plan, Plan)
    created_nothing(manager, wb_home)
    wire = plan.to_dict()
    assert wire["backend"] == "local" and wire["name"] == "planned"
    assert wire["runtime"] == "process" and wire["workers"] == 2
    assert wire["procs_per_worker"] == 1 and wire["gpus_per_worker"] == 0.0
    assert [p["rank"] for p in wire["placement"]] == [0, 1]
    assert all(p["node"] and p["gpu_devices"] is None for p in wire["placement"])
    assert wire["env_names"] == ["FAIL_RANK"] and wire["manifests"] == []
    record = manager.launch(plan)
    # at once: Pending, or Running when the supervisor started the ranks before launch
    # read the record back (seen once on a loaded 2-core CI machine)
    assert record.name == "planned" and record.status in (JobStatus.PENDING, JobStatus.RUNNING)
    done = manager.wait("planned", timeout=90)
    assert done.status is JobStatus.SUCCEEDED, done.message


def test_admit_generates_a_name_without_reserving_it(manager, wb_home):
    plan = manager.admit(ok_spec(env={"FAIL_RANK": "9"}))
    first = plan.name
    assert first.startswith("fail-rank-")
    created_nothing(manager, wb_home)
    # The name race is settled at launch by the insert: a job that takes the generated name
    # meanwhile makes the launch pick a fresh one (nothing half made, nobody refused).
    manager.submit(ok_spec(name=first, env={"FAIL_RANK": "9"}))
    record = manager.launch(plan)
    assert record.name != first and record.name.startswith("fail-rank-")
    assert sorted(r.name for r in manager.list()) == sorted([first, record.name])
    assert manager.wait(record.name, timeout=90).status is JobStatus.SUCCEEDED


def test_a_chosen_name_taken_between_admit_and_launch_is_refused(manager, wb_home):
    plan = manager.admit(ok_spec(name="mine", env={"FAIL_RANK": "9"}))
    manager.submit(ok_spec(name="mine", env={"FAIL_RANK": "9"}))
    with pytest.raises(SpecError) as taken:
        manager.launch(plan)
    assert taken.value.field == "name"
    assert [r.name for r in manager.list()] == ["mine"]


@pytest.mark.parametrize(
    ("change", "error", "field"),
    [
        ({"command": ["python", "no_such_script.py"]}, SpecError, "command"),
        ({"command": ["no-such-program-xyz"]}, SpecError, "command"),
        ({"working_dir": "/no/such/dir"}, SpecError, "working_dir"),
        ({"workers": 0}, SpecError, "workers"),
        ({"gpus": 1}, SubmitError, None),  # this host has no GPU
        ({"data": ["/no/such/data:/data"]}, MountError, None),
        ({"backend_options": {"namespace": "x"}}, SpecError, "backend_options.namespace"),
        ({"backend_options": {"runtime": "vm"}}, SpecError, "backend_options.runtime"),
        ({"backend": "nope"}, SpecError, "backend"),
    ],
)
def test_admit_makes_every_submit_check_and_creates_nothing(manager, wb_home, change, error, field):
    for dry in (True, False):  # the dry run refuses exactly what a real submit refuses
        spec = ok_spec(**change)
        with pytest.raises(error) as info:
            manager.admit(spec) if dry else manager.submit(spec)
        if field is not None:
            assert info.value.field == field, str(info.value)
        created_nothing(manager, wb_home)


def test_taken_name_is_refused_at_admit(manager, wb_home):
    manager.submit(ok_spec(name="taken", env={"FAIL_RANK": "9"}))
    with pytest.raises(SpecError) as info:
        manager.admit(ok_spec(name="taken"))
    assert info.value.field == "name" and "already exists" in str(info.value)


def test_unknown_backend_option_lists_the_valid_keys(manager):
    with pytest.raises(SpecError) as info:
        manager.admit(ok_spec(backend_options={"flavour": "volcano"}))
    assert info.value.field == "backend_options.flavour"
    assert "valid options: runtime" in str(info.value)


def test_runtime_option_container_without_an_engine_is_a_spec_error(manager, monkeypatch):
    # No engine answers here (an empty DOCKER_HOST socket): the option names itself.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SpecError) as info:
        manager.admit(ok_spec(backend_options={"runtime": "container"}))
    assert info.value.field == "backend_options.runtime"
    assert "container" in str(info.value) and "runtime=process" in str(info.value)


def test_runtime_option_forces_processes_and_is_stored(manager, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    plan = manager.admit(ok_spec(backend_options={"runtime": "process"}))
    assert plan.runtime == "process"
    # Forced: the "no container engine" warning of the automatic choice is not given.
    assert not any("container engine" in w for w in plan.warnings)
    auto = manager.admit(ok_spec())
    assert any("no container engine answers" in w for w in auto.warnings)
    record = manager.submit(ok_spec(name="opt", backend_options={"runtime": "process"},
                                    env={"FAIL_RANK": "9"}))  # fmt: skip
    assert record.spec["backend_options"] == {"runtime": "process"}
    assert manager.get("opt").spec["backend_options"] == {"runtime": "process"}


def test_backend_options_must_be_a_mapping():
    with pytest.raises(SpecError) as info:
        TrainSpec.from_dict({"command": ["python", "x.py"], "backend_options": ["runtime"]})
    assert info.value.field == "backend_options"


def test_python_api_dry_run_returns_the_plan(manager, wb_home):
    plan = workbench.submit(
        ["python", "fail_rank.py"], working_dir=str(SCRIPTS), dry_run=True, manager=manager
    )
    assert isinstance(plan, Plan) and plan.backend == "local"
    created_nothing(manager, wb_home)
    assert "Dry run: nothing was created" in plan.describe()


def test_no_secret_in_any_form_of_the_plan(manager, wb_home, s3, bucket, capsys):  # noqa: F811
    s3.put_object(Bucket=bucket, Key="train/a.txt", Body=b"alpha")
    key_secret = f"sk/{uuid.uuid4().hex}"
    spec = ok_spec(
        name="secretive",
        data=[f"s3://AKIDPLAN:{key_secret}@{bucket}/train:inp"],
        env={"HF_TOKEN": TOKEN, "DATABASE_URL": f"postgres://u:{DB_PW}@db/x"},
        command=["python", "fail_rank.py", f"--db=postgres://u:{DB_PW}@db/x"],
    )
    plan = manager.admit(spec)
    created_nothing(manager, wb_home)
    forms = {
        "to_dict": json.dumps(plan.to_dict()),
        "describe": plan.describe(),
        "repr": repr(plan),
    }
    code = main(
        ["submit", "--dry-run", "--name", "secretive", "--workdir", str(SCRIPTS),
         "--data", f"s3://AKIDPLAN:{key_secret}@{bucket}/train:inp",
         "--env", f"HF_TOKEN={TOKEN}", "--env", f"DATABASE_URL=postgres://u:{DB_PW}@db/x",
         "--", "python", "fail_rank.py", f"--db=postgres://u:{DB_PW}@db/x"]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    forms["cli"] = out.out + out.err
    code = main(
        ["submit", "--dry-run", "-o", "json", "--workdir", str(SCRIPTS),
         "--data", f"s3://AKIDPLAN:{key_secret}@{bucket}/train:inp", "--env", f"HF_TOKEN={TOKEN}",
         "--", "python", "fail_rank.py", f"--db=postgres://u:{DB_PW}@db/x"]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    forms["cli json"] = out.out + out.err
    assert json.loads(out.out)["env_names"] == ["HF_TOKEN"]
    for where, text in forms.items():
        for secret in (key_secret, "AKIDPLAN", TOKEN, DB_PW):
            assert secret not in text, f"{secret!r} in the plan's {where}"
    wire = plan.to_dict()
    assert wire["mounts"] == [{"source": f"s3://***@{bucket}/train", "target": "inp", "mode": "ro"}]
    assert wire["env_names"] == ["DATABASE_URL", "HF_TOKEN"]
    assert "HF_TOKEN" in forms["cli"] and "s3://***@" in forms["cli"]
    created_nothing(manager, wb_home)


def test_cli_dry_run_text_and_json(manager, wb_home, capsys):
    args = ["submit", "--dry-run", "--workers", "2", "--workdir", str(SCRIPTS)]
    assert main([*args, "--", "python", "fail_rank.py"]) == 0
    out = capsys.readouterr().out
    assert "Dry run: nothing was created" in out and "Rank 1:" in out
    assert main([*args, "-o", "json", "--", "python", "fail_rank.py"]) == 0
    wire = json.loads(capsys.readouterr().out)
    assert wire["workers"] == 2 and len(wire["placement"]) == 2
    created_nothing(manager, wb_home)
    # Bad input: the same one-line error and exit 2 as a real submit, and still nothing.
    assert main(["submit", "--dry-run", "--workdir", str(SCRIPTS), "--", "python", "nope.py"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: command: script 'nope.py' does not exist") and err.count("\n") == 1
    )
    assert main(["submit", "--dry-run", "--backend-opt", "zone=a", "--", "python", "x.py"]) == 2
    assert "backend_options.zone" in capsys.readouterr().err
    assert main(["submit", "--dry-run", "--backend-opt", "novalue", "--", "python", "x.py"]) == 2
    assert "backend_options: 'novalue' is not KEY=VALUE" in capsys.readouterr().err
    created_nothing(manager, wb_home)


def test_cli_backend_opt_is_stored_and_shown_by_get(manager, capsys):
    code = main(["submit", "--name", "withopt", "--backend-opt", "runtime=process",
                 "--workdir", str(SCRIPTS), "--env", "FAIL_RANK=9", "--", "python", "fail_rank.py"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["get", "withopt"]) == 0
    assert "Options:    runtime=process (backend_options)" in capsys.readouterr().out
    manager.wait("withopt", timeout=90)


def test_magic_dry_run_returns_the_plan(manager, wb_home, monkeypatch):
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    # The process's one shell, as tests/notebook/test_magics.py uses it: a second kind
    # (globalipapp's terminal shell) cannot be made once that one exists.
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    monkeypatch.chdir(SCRIPTS)
    # default_manager() keys on WORKBENCH_*: it is a manager over this test's home.
    plan = ip.run_line_magic(
        "gpu_train", f"--dry-run --workers 2 --env HF_TOKEN={TOKEN} fail_rank.py"
    )
    assert isinstance(plan, Plan) and plan.workers == 2
    assert TOKEN not in plan.describe() and "HF_TOKEN" in plan.describe()
    created_nothing(manager, wb_home)
    with pytest.raises(UsageError, match=r"backend_options\.zone"):
        ip.run_line_magic("gpu_train", "--dry-run --backend-opt zone=a fail_rank.py")
    created_nothing(manager, wb_home)


def test_plan_of_a_gpu_job_places_ranks_on_free_gpus(manager, wb_home, install_fake):  # noqa: F811
    install_fake({"gpus": [{"name": "NVIDIA L4", "memory_total": 24 * 2**30}] * 2}, use_clock=False)
    plan = manager.admit(ok_spec(gpus=1, workers=2, runtime="process"))
    assert [p.gpu_devices for p in plan.placement] == ["0", "1"]
    half = manager.admit(ok_spec(gpus=0.5, workers=2, runtime="process"))
    assert [p.gpu_devices for p in half.placement] == ["0", "0"]  # packed onto one GPU
    with pytest.raises(SubmitError, match="3 worker"):
        manager.admit(ok_spec(gpus=1, workers=3, runtime="process"))
    created_nothing(manager, wb_home)
