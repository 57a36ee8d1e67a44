"""Credentials given in a spec reach the job and appear nowhere else in clear.

A real job, submitted over REST to a real Jupyter server, mounts data from a local HTTP
server that demands Basic auth (``http://user:PASS@127.0.0.1``), gets credential env vars
and a credential URL on its command line. Afterwards every file under WORKBENCH_HOME, the
REST replies and ``workbench get`` (text and JSON) are searched for each secret: the only
place any may appear is the job's 0600 secret file. A rerun still gets the real values.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import body, submit, wait_done
from workbench.cli import main as cli

DATA = b"rows of training data\n" * 20
JOB = """
import hashlib, json, os, pathlib, sys
digest = lambda s: hashlib.sha256(s.encode()).hexdigest()
data = pathlib.Path("inp").read_bytes()
pathlib.Path(f"got-{os.environ['WORKBENCH_JOB_NAME']}.json").write_text(json.dumps({
    "data": hashlib.sha256(data).hexdigest(),
    "env": {k: digest(os.environ[k]) for k in ("DB_PASS", "HF_AUTH", "DATABASE_URL")},
    "arg": digest(sys.argv[1]),
}))
print("read", len(data), "bytes", flush=True)
"""


class AuthServer:
    """HTTP on 127.0.0.1 serving one file to one user:password (Basic auth), else 401."""

    def __init__(self, user: str, password: str) -> None:
        want = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.authorized = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, with_body: bool) -> None:
                if self.headers.get("Authorization") != want or self.path != "/d/file.bin":
                    self.send_response(401 if self.path == "/d/file.bin" else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                outer.authorized += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(DATA)))
                self.end_headers()
                if with_body:
                    self.wfile.write(DATA)

            def do_HEAD(self) -> None:
                self._reply(False)

            def do_GET(self) -> None:
                self._reply(True)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Shut the server down."""
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def secrets() -> dict[str, str]:
    """One unique secret per place a credential can be given."""
    return {k: f"{k}-{uuid.uuid4().hex}" for k in ("urlpw", "dbpass", "hfauth", "dburlpw", "argpw")}


@pytest.fixture
def http_data(secrets: dict[str, str]) -> Iterator[AuthServer]:
    """The data server, accepting only reader:<urlpw>."""
    server = AuthServer("reader", secrets["urlpw"])
    yield server
    server.stop()


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text if isinstance(text, bytes) else text.encode()).hexdigest()


async def test_credentials_reach_the_job_and_nothing_else(
    jp_fetch, manager, http_data: AuthServer, secrets: dict[str, str], tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.py").write_text(JOB)
    env = {"DB_PASS": secrets["dbpass"], "HF_AUTH": secrets["hfauth"], "LR": "0.1",
           "DATABASE_URL": f"postgres://app:{secrets['dburlpw']}@db:5432/app"}  # fmt: skip
    arg = f"postgres://app:{secrets['argpw']}@db/x"
    url = f"http://reader:{secrets['urlpw']}@127.0.0.1:{http_data.port}/d/file.bin"
    spec = {"command": [sys.executable, "job.py", arg], "working_dir": str(work),
            "data": [f"{url}:inp"], "env": env}  # fmt: skip

    created = await submit(jp_fetch, spec)
    done = await wait_done(jp_fetch, created["name"], timeout=90)
    assert done["status"] == "Succeeded", (done["message"], done["events"])

    # The job saw the real values and read the data with the real password.
    got = json.loads((work / f"got-{done['name']}.json").read_text())
    assert got["data"] == _sha(DATA)
    assert got["env"] == {k: _sha(env[k]) for k in ("DB_PASS", "HF_AUTH", "DATABASE_URL")}
    assert got["arg"] == _sha(arg)
    assert http_data.authorized >= 1

    # What is shown: masked, yet still says where.
    assert done["spec"]["data"] == [f"http://***@127.0.0.1:{http_data.port}/d/file.bin:inp:ro"]
    assert done["spec"]["env"]["DATABASE_URL"] == "postgres://***@db:5432/app"
    assert done["spec"]["env"]["DB_PASS"] == "***" and done["spec"]["env"]["LR"] == "0.1"
    assert done["spec"]["command"][2] == "postgres://***@db/x"

    # A rerun gets the real values back from the secret file (and reclaims the DST).
    again = manager.wait(manager.rerun(done["name"]).name, timeout=90)
    assert again.status.value == "Succeeded", again.message
    assert json.loads((work / f"got-{again.name}.json").read_text()) == got

    shown = [json.dumps(created), json.dumps(done)]
    for name in (done["name"], again.name):
        shown.append((await jp_fetch("workbench", "api", "jobs", name)).body.decode())
        shown.append((await jp_fetch("workbench", "api", "jobs", name, "logs")).body.decode())
    shown.append((await jp_fetch("workbench", "api", "jobs")).body.decode())
    capsys.readouterr()
    for argv in (["get", "-o", "json", done["name"]], ["get", done["name"]], ["list"]):
        assert cli(argv) == 0
        shown.append(capsys.readouterr().out)
    assert body(await jp_fetch("workbench", "api", "jobs", done["name"]))["name"] == done["name"]

    home = Path(os.environ["WORKBENCH_HOME"])
    secret_files = []
    files = [f for f in home.rglob("*") if f.is_file()]
    assert any(f.name == "jobs.db" for f in files) and any(f.name == "spec.yaml" for f in files)
    for f in files:
        content = f.read_bytes()
        holds = [k for k, s in secrets.items() if s.encode() in content]
        if f.name == "secret-env.json":
            assert stat.S_IMODE(f.stat().st_mode) == 0o600
            secret_files.append(f)
            assert sorted(holds) == sorted(secrets), f  # every real value is kept here
        else:
            assert holds == [], f"{f} holds {holds}"
    assert len(secret_files) == 2  # the job and its rerun
    for text in shown:
        assert not [k for k, s in secrets.items() if s in text], text
