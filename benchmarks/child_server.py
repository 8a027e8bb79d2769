"""A server the benchmarks start in a child process on a free loopback port: `recallql serve` or
`chroma run`. The tests have their own (tests/support.py), with pytest's skips and CI rules."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChildServer:
    """`command` (given the port) in a child process, logging to `log_path`; ready once `ready_path`
    answers 200."""

    def __init__(
        self,
        name: str,
        command: list[str],
        *,
        port: int,
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        ready_path: str,
    ) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._ready_path = ready_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}{self._ready_path}", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready in {timeout}s:\n{self.log_path.read_text()[-3000:]}")

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the process (Linux /proc), all its threads included."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def stop(self, grace: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def recallql_server(data_dir: Path, overrides: dict[str, str]) -> ChildServer:
    """`recallql serve`, one worker. Settings come from `overrides` only: RECALLQL_* variables of this
    environment are not passed on, and the server runs in the data folder, so no .env file applies
    either (an embedding model configured there would otherwise embed every saved message)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("RECALLQL_")}
    python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**inherited, "PYTHONPATH": python_path, "RECALLQL_DATA_DIR": str(data_dir), **overrides}
    command = [sys.executable, "-m", "web.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    return ChildServer(
        "recallql serve",
        [*command, "--workers", "1"],
        port=port,
        env=env,
        cwd=data_dir,
        log_path=data_dir / "server.log",
        ready_path="/readyz",
    )


def chroma_server(path: Path, log_path: Path) -> ChildServer:
    """`chroma run` (the venv's CLI) storing under `path`."""
    port = free_port()
    chroma = Path(sys.executable).parent / "chroma"
    return ChildServer(
        "chroma run",
        [str(chroma), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        port=port,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
        cwd=path.parent,
        log_path=log_path,
        ready_path="/api/v2/heartbeat",
    )


@contextlib.contextmanager
def running(server: ChildServer) -> Iterator[ChildServer]:
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
