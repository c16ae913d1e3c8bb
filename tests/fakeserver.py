"""A tiny HTTP(S) server on 127.0.0.1 that replays recorded server responses, for the parts of
the remote engine no CPU-only CI can run for real (vLLM, SGLang) and for failures on demand
(a stream that stops, a slow stream, a self-signed certificate, a stream that would not end, an
endless event line, a page that is not an event stream).

Streamed routes take any iterable of chunks, a generator included (always a bounded one: the
tests' misbehaving servers stop by themselves); `Route.broken` turns true when the client hung
up before the last chunk was written."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
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
    chunks: Iterable[str | bytes] | None = None
    delay_s: float = 0.0
    drop_after: int | None = None
    stream_type: str = "text/event-stream"
    written: int = 0  # bytes of the streamed body written so far
    broken: bool = False  # the client hung up before the last chunk
    done: threading.Event = field(default_factory=threading.Event)  # the handler is through


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
                try:
                    self._stream(route)
                finally:
                    route.done.set()

            def _stream(self, route: Route) -> None:
                assert route.chunks is not None
                self.send_response(route.status)
                self.send_header("Content-Type", route.stream_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for n, chunk in enumerate(route.chunks):
                    if route.drop_after is not None and n >= route.drop_after:
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    data = chunk.encode() if isinstance(chunk, str) else chunk
                    try:
                        self.wfile.write(b"%x\r\n" % len(data))
                        self.wfile.write(data)
                        self.wfile.write(b"\r\n")
                        self.wfile.flush()
                    except OSError:
                        route.broken = True
                        return  # the client went away (a stop)
                    route.written += len(data)
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


# -- misbehaving OpenAI-compatible servers, generated ------------------------------------------


def sse_event(obj: object) -> str:
    return "data: " + json.dumps(obj) + "\n\n"


def chat_chunk(text: str = "", finish: str | None = None, **extra: Any) -> str:
    """One streamed chat chunk (`extra`: "timings", "usage"…, sent as given, NaN included)."""
    delta = {"content": text} if text else {}
    obj = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    obj["choices"][0]["finish_reason"] = finish  # type: ignore[index]
    obj.update(extra)
    return sse_event(obj)


def endless_chunks(limit: int = 100_000, **extra: Any) -> Iterable[str]:
    """A server that ignores max_tokens: piece after piece, no finish (stops after `limit`)."""
    for i in range(limit):
        yield chat_chunk(f"w{i} ", **{k: v(i) if callable(v) else v for k, v in extra.items()})
    yield "data: [DONE]\n\n"


def llama_routes(chat: Route | Callable[[dict], Route]) -> dict:
    """llama-server's probe answers (recorded: draft-simple, speculating) and `chat`."""
    return {
        ("GET", "/v1/models"): Route(body=fixture("llama_models.json")),
        ("GET", "/props"): Route(body=fixture("llama_props.json")),
        ("GET", "/slots"): Route(body=fixture("llama_slots.json")),
        ("POST", "/v1/chat/completions"): chat,
    }
