"""Every route needs an authenticated, authorized user; mutating verbs need XSRF."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.utils import JupyterServerAuthWarning
from tornado.httpclient import HTTPClientError
from tornado.websocket import websocket_connect

# (method, path under {base_url}) for every route of the extension.
ROUTES = [
    ("GET", "workbench/api/jobs"),
    ("POST", "workbench/api/jobs"),
    ("GET", "workbench/api/jobs/x"),
    ("DELETE", "workbench/api/jobs/x"),
    ("GET", "workbench/api/jobs/x/logs"),
    ("GET", "workbench/api/jobs/x/metrics"),
    ("POST", "workbench/api/jobs/x/rerun"),
    ("GET", "workbench/api/gpus"),
    ("GET", "workbench/api/nodes"),
    ("GET", "workbench/api/backends"),
    ("GET", "workbench/api/datasets?url=/tmp"),
    ("GET", "workbench/api/datasets/stores"),
    ("GET", "workbench/api/datasets/usage?url=/tmp"),
    ("GET", "workbench/api/datasets/preview?url=/tmp/x"),
    ("GET", "workbench/api/images"),
    ("GET", "workbench/api/specs"),
    ("GET", "workbench/metrics"),
]
EVENTS = "workbench/api/events"


class DenyWorkbench(Authorizer):
    """Authenticated users may do anything except touch the ``workbench`` resource."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "workbench"


@pytest.fixture
def authorizer_denies_workbench() -> bool:
    """Requested by a test to run its server with the DenyWorkbench authorizer."""
    return True


@pytest.fixture
def jp_server_config(manager, request):
    extensions = {"workbench": True, "jupyter_server_terminals": False}
    config: dict[str, Any] = {
        "ServerApp": {"jpserver_extensions": extensions, "allow_unauthenticated_access": False},
    }
    if "authorizer_denies_workbench" in request.fixturenames:
        config["ServerApp"]["authorizer_class"] = DenyWorkbench
    return config


def test_routes_cover_every_handler(jp_serverapp):
    app = jp_serverapp.extension_manager.extension_apps["workbench"]
    registered = {pattern for pattern, *_ in next(iter(app)).handlers}
    covered = {path.split("?")[0].replace("/x", "/(?P<name>[^/]+)") for _, path in ROUTES} | {
        EVENTS
    }
    assert registered == covered


def test_no_auth_warning_and_every_method_decorated(
    jp_server_config, jp_configurable_serverapp, jp_argv
):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        app = jp_configurable_serverapp(config=jp_server_config, argv=jp_argv)
    assert app.allow_unauthenticated_access is False
    assert [
        str(w.message) for w in caught if issubclass(w.category, JupyterServerAuthWarning)
    ] == []
    handlers = [r for r in app.web_app.default_router.rules for r in r.target.rules]
    ours = [r for r in handlers if "workbench" in str(r.matcher.regex.pattern)]
    assert len(ours) == len({path for _, path in ROUTES}) + 1  # one handler per path, + events
    for rule in ours:
        assert app.web_app._check_handler_auth(rule.matcher, rule.target) == []


async def test_every_route_is_403_without_a_token(http_server_client, jp_base_url, jp_http_port):
    for method, path in ROUTES:
        with pytest.raises(HTTPClientError) as info:
            await http_server_client.fetch(
                jp_base_url + path, method=method, body="{}" if method == "POST" else None,
                follow_redirects=False,
            )  # fmt: skip
        assert info.value.code == 403, (method, path, info.value.code)
        assert "Traceback" not in info.value.response.body.decode()
    with pytest.raises(HTTPClientError) as info:
        await websocket_connect(f"ws://127.0.0.1:{jp_http_port}{jp_base_url}{EVENTS}")
    assert info.value.code == 403


async def test_authorizer_is_asked_for_the_workbench_resource(
    authorizer_denies_workbench, http_server_client, jp_base_url, jp_auth_header, jp_http_port
):
    for method, path in ROUTES:
        with pytest.raises(HTTPClientError) as info:
            await http_server_client.fetch(
                jp_base_url + path, method=method, headers=jp_auth_header,
                body="{}" if method == "POST" else None,
            )  # fmt: skip
        assert info.value.code == 403, (method, path)
    from tornado.httpclient import HTTPRequest

    request = HTTPRequest(
        f"ws://127.0.0.1:{jp_http_port}{jp_base_url}{EVENTS}", headers=jp_auth_header
    )
    with pytest.raises(HTTPClientError) as ws:
        await websocket_connect(request)
    assert ws.value.code == 403
    # The same user may still use the server's own API: only our resource is refused.
    ok = await http_server_client.fetch(jp_base_url + "api/status", headers=jp_auth_header)
    assert ok.code == 200


async def test_cookie_sessions_need_xsrf_for_mutations(
    http_server_client, jp_base_url, jp_serverapp
):
    token = jp_serverapp.identity_provider.token
    login = await http_server_client.fetch(f"{jp_base_url}api/status?token={token}")
    cookies = "; ".join(c.split(";")[0] for c in login.headers.get_list("Set-Cookie"))
    assert cookies, "the server did not set a login cookie"
    listed = await http_server_client.fetch(
        jp_base_url + "workbench/api/jobs", headers={"Cookie": cookies}
    )
    assert json.loads(listed.body)["total"] == 0  # reads work with the cookie alone
    with pytest.raises(HTTPClientError) as info:
        await http_server_client.fetch(
            jp_base_url + "workbench/api/jobs", method="POST", headers={"Cookie": cookies},
            body=json.dumps({"command": ["python", "-c", "pass"]}),
        )  # fmt: skip
    assert info.value.code == 403 and "xsrf" in info.value.response.body.decode().lower()
