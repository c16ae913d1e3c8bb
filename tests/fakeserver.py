"""A tiny HTTP(S) server on 127.0.0.1 that replays recorded server responses, for the parts of
the remote engine no CPU-only CI can run for real (vLLM, SGLang) and for failures on demand
(a stream that stops, a slow stream, a self-signed certificate)."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "remote" / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@dataclass
class Route:
    status: int = 200
    body: str | bytes = ""
    content_type: str = "application/json"
    # streamed replies: chunks written one by one, `delay_s` apart; `drop_after` closes the
    # connection (without the end of the chunked body) after that many chunks
    chunks: list[str] | None = None
    delay_s: float = 0.0
    drop_after: int | None = None


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hanging up (stops, closed keep-alive connections) are expected here


@dataclass
class FakeServer:
    routes: dict[tuple[str, str], Route | list[Route] | Callable[[dict], Route]] = field(
        default_factory=dict
    )
    requests: list[tuple[str, str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    tls: ssl.SSLContext | None = None
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"

    def start(self) -> FakeServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else {}
                fake.requests.append((method, self.path, body, dict(self.headers)))
                spec = fake.routes.get((method, self.path))
                if isinstance(spec, list):
                    route = spec.pop(0) if len(spec) > 1 else spec[0]
                elif callable(spec):
                    route = spec(body)
                else:
                    route = spec or Route(404, '{"error": {"message": "not found"}}')
                if route.chunks is None:
                    data = route.body.encode() if isinstance(route.body, str) else route.body
                    self.send_response(route.status)
                    self.send_header("Content-Type", route.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(route.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for n, chunk in enumerate(route.chunks):
                    if route.drop_after is not None and n >= route.drop_after:
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    data = chunk.encode()
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    except OSError:
                        return  # the client went away (a stop)
                    if route.delay_s:
                        time.sleep(route.delay_s)
                self.wfile.write(b"0\r\n\r\n")

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

        server = _QuietServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        if self.tls is not None:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="fakeserver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def sse_chunks(text: str) -> list[str]:
    """A recorded SSE body split into its events (each written as one chunk)."""
    return [part + "\n\n" for part in text.strip().split("\n\n") if part.strip()]


def self_signed_context(tmp: Path) -> ssl.SSLContext | None:
    """A server context with a fresh self-signed certificate for 127.0.0.1 (openssl CLI, else
    the `cryptography` package); None when neither is available."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    openssl = shutil.which("openssl")
    if openssl:
        proc = subprocess.run(
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(key), "-out", str(cert)],
            capture_output=True,
            timeout=60,
        )  # fmt: skip
        if proc.returncode != 0:
            openssl = None
    if not openssl and not _cryptography_cert(cert, key):
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


def _cryptography_cert(cert: Path, key: Path) -> bool:
    try:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID
    except ImportError:
        return False
    pk = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    crt = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(pk.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(pk, hashes.SHA256())
    )
    cert.write_bytes(crt.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        pk.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    return True
