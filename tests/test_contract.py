"""The distributed env contract, per framework."""

from __future__ import annotations

import json

from workbench import contract

W = contract.World(
    workers=2,
    procs_per_worker=2,
    master_addr="127.0.0.1",
    master_port=29500,
    hosts=("h0", "h1"),
    ports=(2222, 2223),
)


def test_pytorch_env_matches_kubeflow():
    env = contract.pytorch_env(W, 1)
    assert env == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "4",
        "RANK": "1",
        "LOCAL_RANK": "0",
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_NPROC_PER_NODE": "2",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "29500",
        "PET_RDZV_ENDPOINT": "127.0.0.1:29500",  # torchrun --rdzv-backend=c10d meets here
    }
    p = contract.pytorch_process_env(W, 1, 1)
    assert (p["RANK"], p["LOCAL_RANK"], p["LOCAL_WORLD_SIZE"]) == ("3", "1", "2")


def test_tf_config():
    cfg = json.loads(contract.tensorflow_env(W, 1)["TF_CONFIG"])
    assert cfg["cluster"] == {"worker": ["h0:2222", "h1:2223"]}
    assert cfg["task"] == {"type": "worker", "index": 1}


def test_mpi_hostfile_and_env():
    assert contract.mpi_hostfile(W) == "h0 slots=2\nh1 slots=2\n"
    local = contract.World(2, 1, "127.0.0.1", 1, ("127.0.0.1", "127.0.0.1"), (0, 0))
    assert contract.mpi_hostfile(local) == "127.0.0.1 slots=2\n"
    env = contract.worker_env("mpi", W, 0, "j", hostfile="/x/hostfile")
    assert env["OMPI_MCA_orte_default_hostfile"] == "/x/hostfile"
    assert env["WORKBENCH_MPI_NP"] == "4"


def test_common_env_for_every_framework():
    for fw in ("pytorch", "tensorflow", "mpi", "plain"):
        env = contract.worker_env(fw, W, 1, "job-a", attempt=2, job_dir="/jobs/a")
        assert env["WORKBENCH_JOB_NAME"] == "job-a"
        assert env["WORKBENCH_RANK"] == "1"
        assert env["WORKBENCH_ATTEMPT"] == "2"
        assert env["WORKBENCH_JOB_DIR"] == "/jobs/a"
    assert "MASTER_ADDR" not in contract.worker_env("plain", W, 0, "j")
