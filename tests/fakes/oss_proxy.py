"""A local OSS-protocol endpoint: a stateless bridge in front of a real moto S3 server.

OSS speaks nearly S3. The differences ossfs/oss2 trip over, bridged here: list results
without the S3 xmlns and with a <Type> per entry; ``?bucketInfo``; an empty
``continuation-token=``; ``x-oss-*`` headers for ``x-amz-*``; AppendObject (``POST
?append&position=N``, used by ``open('wb')``). OSS signs with ``OSS key:signature``: the
bridge rejects an unknown access key with OSS's own InvalidAccessKeyId error, then
forwards with a placeholder signature (moto runs without auth). Binds 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

XMLNS = re.compile(rb'\s+xmlns="[^"]*"')


def oss_error(code: str, message: str, status: int) -> tuple[int, bytes]:
    """An OSS error document."""
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><RequestId>proxy</RequestId></Error>").encode()  # fmt: skip
    return status, body


class OssProxy:
    """Serves OSS on 127.0.0.1:port, forwarding to the S3 server at ``target``."""

    def __init__(self, target: str, access_key: str | None = None) -> None:
        parts = urlsplit(target)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.access_key = access_key
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """http://127.0.0.1:PORT"""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> OssProxy:
        """Serve in a background thread."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()

    # ---- one request ----------------------------------------------------------------------
    def _s3(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            r = conn.getresponse()
            return r.status, {k: v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        """Translate one OSS request to S3 and the answer back."""
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        url = urlsplit(h.path)
        query = [(k, v) for k, v in parse_qsl(url.query, keep_blank_values=True)
                 if not (k == "continuation-token" and not v)]  # fmt: skip
        keys = {k for k, _ in query}
        auth = h.headers.get("Authorization", "")
        if self.access_key and not auth.startswith(f"OSS {self.access_key}:"):
            self._reply(h, *oss_error("InvalidAccessKeyId", "The OSS Access Key Id you provided "
                                      "does not exist in our records.", 403), {})  # fmt: skip
            return
        headers = {}
        for k, v in h.headers.items():
            lk = k.lower()
            if lk in ("authorization", "host", "content-length", "connection", "expect"):
                continue
            headers[re.sub(r"^x-oss-", "x-amz-", lk)] = v
        # moto serves objects only to signed requests; it checks no signature (no auth mode).
        headers["Authorization"] = (
            "AWS4-HMAC-SHA256 Credential=proxy/20240101/us-east-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=0"
        )
        method = h.command
        # oss2 escapes '/' inside keys; moto wants it literal.
        url = url._replace(path=quote(unquote(url.path), safe="/~"))
        if "bucketInfo" in keys:
            status, _, _ = self._s3("HEAD", url.path, b"", {})
            if status != 200:
                self._reply(
                    h, *oss_error("NoSuchBucket", "The specified bucket does not exist.", 404), {}
                )
                return
            name = url.path.strip("/")
            info = (f"<BucketInfo><Bucket><Name>{name}</Name><Location>oss-local</Location>"
                    "<CreationDate>2024-01-01T00:00:00.000Z</CreationDate><StorageClass>Standard"
                    "</StorageClass><ExtranetEndpoint>127.0.0.1</ExtranetEndpoint><IntranetEndpoint>"
                    "127.0.0.1</IntranetEndpoint><Owner><DisplayName>local</DisplayName><ID>local</ID>"
                    "</Owner><AccessControlList><Grant>private</Grant></AccessControlList></Bucket>"
                    "</BucketInfo>").encode()  # fmt: skip
            self._reply(h, 200, info, {"Content-Type": "application/xml"})
            return
        if method == "POST" and "append" in keys:
            position = int(dict(query).get("position", "0"))
            current = b""
            if position:
                status, _, current = self._s3("GET", url.path, b"", {})
                if status != 200 or len(current) != position:
                    self._reply(h, *oss_error("PositionNotEqualToLength", "Position is not equal "
                                              "to file length", 409), {})  # fmt: skip
                    return
            data = current + body
            status, rh, out = self._s3("PUT", url.path, data, headers)
            extra = {"x-oss-next-append-position": str(len(data)), "ETag": rh.get("ETag", "")}
            self._reply(h, status, out, extra)
            return
        path = url.path + (("?" + urlencode(query)) if query else "")
        status, rh, out = self._s3(method, path, body, headers)
        if out.startswith(b"<?xml") or out.startswith(b"<List"):
            out = XMLNS.sub(b"", out, count=1)
            out = (
                out.replace(b"</Key>", b"</Key><Type>Normal</Type>")
                if b"<Contents>" in out
                else out
            )
        reply = {}
        for k, v in rh.items():
            lk = k.lower()
            if lk in ("content-length", "transfer-encoding", "connection", "server", "date"):
                continue
            reply[re.sub(r"^x-amz-", "x-oss-", lk)] = v
        if "content-length" in {k.lower() for k in rh} and method == "HEAD":
            reply["Content-Length"] = rh.get("Content-Length") or rh.get("content-length") or "0"
        self._reply(h, status, out, reply, head=method == "HEAD")

    @staticmethod
    def _reply(h: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str],
               head: bool = False) -> None:  # fmt: skip
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        if not (head and "Content-Length" in headers):
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)
