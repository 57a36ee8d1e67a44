"""What counts as a credential, how it is masked and restored, and the modes of what holds it."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.backends.local import LocalBackend
from workbench.errors import SpecError
from workbench.redaction import redact_url, redact_urls, url_secrets
from workbench.settings import Settings
from workbench.spec import REDACTED, Mount, TrainSpec


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pa55word@host:8080/x", "http://***@host:8080/x"),
        ("s3://AKIAKEY:SeCrEt@bucket/train", "s3://***@bucket/train"),
        # a pasted AWS secret with a raw '/': urlsplit would take 'AKIAKEY:ab' for the host
        ("s3://AKIAKEY:ab/cd+ef@bucket/train", "s3://***@bucket/train"),
        ("https://ghp_tokenvalue@github.com/o/r.git", "https://***@github.com/o/r.git"),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=AK%2F1"
            "&X-Amz-Signature=abc123&X-Amz-Security-Token=tok",
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=***"
            "&X-Amz-Signature=***&X-Amz-Security-Token=***",
        ),
        (
            "https://b.oss.aliyuncs.com/k?OSSAccessKeyId=AK&Expires=9&Signature=s%2Fg",
            "https://b.oss.aliyuncs.com/k?OSSAccessKeyId=***&Expires=9&Signature=***",
        ),
        (
            "https://acct.blob.core.windows.net/c/b?sv=2020&sig=xyz#frag",
            "https://acct.blob.core.windows.net/c/b?sv=2020&sig=***#frag",
        ),
        (
            "https://h/p?access_token=t0k&page=2&password=pw",
            "https://h/p?access_token=***&page=2&password=***",
        ),
    ],
)
def test_redact_url_masks_userinfo_and_credential_params(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "s3://bucket/train",
        "http://[::1]:8080/a",
        "./data",
        "/abs/path",
        "oss://b/k?versionId=3",
        "http://host:8080/x?page=2&limit=5",
    ],
)
def test_redact_url_leaves_plain_urls_alone(url: str) -> None:
    assert redact_url(url) == url


def test_redact_urls_in_text_and_url_secrets() -> None:
    text = "--db=postgres://app:hunter22@db:5432/x and 'http://a:b0b0@h/y' plain"
    assert redact_urls(text) == "--db=postgres://***@db:5432/x and 'http://***@h/y' plain"
    assert url_secrets("http://us%3Aer:p%40ss@h/x?sig=s1g") >= {"p%40ss", "p@ss", "s1g"}


def test_env_pattern_is_wider_and_urls_with_passwords_are_secret() -> None:
    env = {"DB_PASS": "a", "HF_AUTH": "b", "DB_PASSWORD": "c", "STRIPE_KEY": "d",
           "DATABASE_URL": "postgres://u:pw0rd@db/app", "CACHE_URL": "redis://cache:6379/0",
           "LR": "0.1", "GIT_AUTHOR_NAME": "me", "PASSES": "3"}  # fmt: skip
    spec = TrainSpec(command=["python", "t.py"], env=env)
    assert spec.secret_env() == {k: env[k] for k in
                                 ("DB_PASS", "HF_AUTH", "DB_PASSWORD", "STRIPE_KEY", "DATABASE_URL")}  # fmt: skip
    shown = spec.redacted().env
    assert shown["DATABASE_URL"] == "postgres://***@db/app"  # still says where, not how
    assert shown["DB_PASS"] == shown["HF_AUTH"] == REDACTED
    assert {k: shown[k] for k in ("CACHE_URL", "LR", "GIT_AUTHOR_NAME", "PASSES")} == {
        k: env[k] for k in ("CACHE_URL", "LR", "GIT_AUTHOR_NAME", "PASSES")
    }


def _credential_spec() -> TrainSpec:
    return TrainSpec(
        command=["python", "t.py", "--db", "postgres://u:argpw1@db/x", "--lr", "0.1"],
        data=[Mount.parse("s3://AKID:datasecret1@bucket/train:/data"), Mount.parse("./d:d")],
        outputs=[Mount.parse("https://h/up?sig=outsecret1:ckpt:rw")],
        env={"HF_TOKEN": "envsecret1", "LR": "0.1"},
    )


def test_redacted_spec_holds_no_secret_and_restore_gives_them_back() -> None:
    spec = _credential_spec()
    shown = spec.redacted().to_yaml()
    for secret in ("argpw1", "datasecret1", "AKID", "outsecret1", "envsecret1"):
        assert secret not in shown
    assert "s3://***@bucket/train:/data:ro" in shown and "./d:d:ro" in shown
    saved = spec.secrets()
    assert set(saved) == {"env", "data", "outputs", "command"}
    back = TrainSpec.from_dict(spec.redacted().to_dict()).restore_secrets(saved)
    assert back.to_dict() == spec.to_dict()


def test_restore_puts_nothing_where_the_spec_changed() -> None:
    """A saved value returns only to a slot whose masked form still matches."""
    spec = _credential_spec()
    edited = spec.redacted()
    edited.data.reverse()
    edited.command[3] = "postgres://other@db/x"
    edited.restore_secrets(spec.secrets())
    assert "datasecret1" not in edited.to_yaml() and "argpw1" not in edited.to_yaml()


# ---- modes ----------------------------------------------------------------------------
@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common default umask, under which plain creation gives 0644/0755."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_home_and_store_files_are_private(umask_022: None, wb_home: Path) -> None:
    backend = LocalBackend(Settings.load())
    assert _mode(wb_home) == 0o700 and _mode(wb_home / "jobs") == 0o700
    # A second connection keeps -wal/-shm on disk while we look at them.
    with sqlite3.connect(wb_home / "jobs.db") as other:
        other.execute("SELECT count(*) FROM jobs").fetchall()
        backend.store.list()
        for name in ("jobs.db", "jobs.db-wal", "jobs.db-shm"):
            assert _mode(wb_home / name) == 0o600, name


def test_older_world_readable_home_is_tightened(umask_022: None, wb_home: Path) -> None:
    wb_home.mkdir(mode=0o755)
    (wb_home / "jobs.db").touch(mode=0o644)
    LocalBackend(Settings.load())
    assert _mode(wb_home) == 0o700
    assert _mode(wb_home / "jobs.db") == 0o600


def test_job_files_are_private(umask_022: None, manager, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = TrainSpec(command=[sys.executable, "-c", "pass"], working_dir=str(tmp_path),
                     env={"DB_PASS": "x"})  # fmt: skip
    record = manager.wait(manager.submit(spec).name, timeout=60)
    job_dir = Path(record.job_dir)
    assert _mode(job_dir) == 0o700
    assert _mode(job_dir / "spec.yaml") == 0o600
    assert _mode(job_dir / "secret-env.json") == 0o600


def test_spec_errors_and_reprs_mask_credentials() -> None:
    """A bad mount's error, and a spec's repr in a traceback, never echo the secret."""
    from workbench.errors import SpecError

    bad = [["s3://K:Sekret1@b/x:/d:zz:"], [{"src": "s3://K:Sekret1@b/x"}]]
    for data in bad:
        with pytest.raises(SpecError) as e:
            TrainSpec.from_dict({"command": ["x"], "data": data}).validate()
        assert "Sekret1" not in str(e.value) and "***@b/x" in str(e.value)
    with pytest.raises(SpecError) as e:
        TrainSpec(command=["x"], data=[Mount("s3://K:Sekret1@b/x", "/d", "zz")]).validate()
    assert "Sekret1" not in str(e.value)
    spec = TrainSpec(command=["x"], env={"A": "Sekret1"}, data=[Mount("s3://K:Sekret1@b/x", "/d")])
    assert "Sekret1" not in repr(spec)


def test_free_text_is_masked_with_the_specs_secrets() -> None:
    """What the supervisor does to an unexpected error before it logs or records it."""
    from workbench.redaction import redact_text, secret_strings

    spec = _credential_spec()
    text = ("Traceback: ... ClientError for s3://AKID:datasecret1@bucket/train, "
            "env envsecret1, datasecret1 alone, argpw1 and outsecret1")  # fmt: skip
    masked = redact_text(text, secret_strings(spec.secrets()))
    for secret in ("datasecret1", "envsecret1", "argpw1", "outsecret1", "AKID"):
        assert secret not in masked
    assert "s3://***@bucket/train" in masked


@pytest.mark.timeout(30)  # a hang guard, not a benchmark: the old pattern was quadratic
def test_masking_a_huge_value_is_linear():
    """An unbounded scheme pattern scanned to the end from every letter: a 2 MB value with
    no '://' in an error message took minutes."""
    assert redact_urls("x" * 2_000_000) == "x" * 2_000_000
    masked = redact_urls("a" * 1_000_000 + "://user:pw@host/p")
    assert masked.endswith("://***@host/p") and "pw" not in masked
    with pytest.raises(SpecError) as info:
        TrainSpec(command=["python"], runtime="y" * 60_000).validate()
    assert info.value.field == "runtime"
