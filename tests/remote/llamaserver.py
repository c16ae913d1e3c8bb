"""Building and starting llama-server for the tests (used by tests/remote/conftest.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from busyload import BUILD_PGID

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "packaging" / "build-llama-server.sh"
API_KEY = "specchat-test-key"
CTX = 1024
START_TIMEOUT_S = 300


class ServerBuild:
    """packaging/build-llama-server.sh running in the background (nice 10: it takes the CPU
    the tests before the remote ones leave idle); `result()` waits for the binary."""

    def __init__(self) -> None:
        self.log = Path(tempfile.mkdtemp(prefix="specchat-server-build-")) / "build.log"
        self.out = self.log.with_name("path.txt")
        env = dict(os.environ, PYTHON=sys.executable)
        with self.log.open("w") as err, self.out.open("w") as out:
            self.proc = subprocess.Popen(
                ["nice", "-n", "10", "bash", str(BUILD_SCRIPT)]
                if shutil.which("nice")
                else ["bash", str(BUILD_SCRIPT)],
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,  # stop() ends the compilers too
            )
        # tests that meter other programs' CPU time pause it meanwhile (busyload.py)
        os.environ[BUILD_PGID] = str(self.proc.pid)

    def result(self, timeout_s: float = 3600) -> Path:
        os.environ.pop(BUILD_PGID, None)  # never left stopped while this waits for it
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGCONT)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"building llama-server took more than {timeout_s:.0f} s ({self.log})")
        if self.proc.returncode != 0:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])
            pytest.fail(f"building llama-server failed (log: {self.log}):\n{tail}")
        lines = self.out.read_text().strip().splitlines()
        path = Path(lines[-1]) if lines else Path()
        if not path.is_file():
            pytest.fail(f"the llama-server build printed no binary ({self.log})")
        shutil.rmtree(self.log.parent, ignore_errors=True)  # kept only when the build failed
        return path

    def stop(self) -> None:
        os.environ.pop(BUILD_PGID, None)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except OSError:
                self.proc.terminate()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    proc: subprocess.Popen
    port: int
    log: Path
    api_key: str | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        os.environ.pop(BUILD_PGID, None)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def start_llama_server(
    binary: Path, args: list[str], log: Path, api_key: str | None
) -> LlamaServer:
    import httpx2

    port = free_port()
    threads = os.environ.get("SPECCHAT_TEST_THREADS") or str(min(2, os.cpu_count() or 1))
    cmd = [str(binary), "--host", "127.0.0.1", "--port", str(port), "-c", str(CTX), "-np", "1",
           "-t", threads, "-tb", threads, "--metrics", "--no-warmup", *args]  # fmt: skip
    if api_key:
        cmd += ["--api-key", api_key]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    server = LlamaServer(proc, port, log, api_key)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama-server exited ({proc.returncode}):\n{server.log_tail()}")
        try:
            if httpx2.get(server.url + "/health", timeout=2, trust_env=False).status_code == 200:
                return server
        except httpx2.HTTPError:
            pass
        time.sleep(0.25)
    server.stop()
    pytest.fail(f"llama-server did not become ready in {START_TIMEOUT_S} s:\n{server.log_tail()}")
