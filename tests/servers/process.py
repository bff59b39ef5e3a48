"""What the PostgreSQL and PgBouncer test servers share: start a server process (as the
non-root user when we are root), wait until psycopg can run ``SELECT 1`` through it,
stop it with SIGINT, read its log's tail, remove its folder."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg


class ServerProcess:
    """A server subprocess on 127.0.0.1 logging to ``logfile`` under ``root``.

    Subclasses set ``name``, ``user``, ``root``, ``logfile`` and ``proc = None`` and
    implement :meth:`probe_dsn`; :meth:`launch` starts the process.
    """

    host = "127.0.0.1"
    name = "server"
    stop_timeout = 30.0
    user: str | None
    root: Path
    logfile: Path
    proc: subprocess.Popen[bytes] | None

    def _run_as(self) -> dict[str, Any]:
        return {"user": self.user} if self.user is not None else {}

    def probe_dsn(self) -> str:
        """A libpq URI that answers ``SELECT 1`` once the server is up."""
        raise NotImplementedError

    def launch(self, argv: list[str], timeout: float, *, output_to_log: bool) -> None:
        """Start ``argv`` (its output appended to ``logfile`` when ``output_to_log``, else
        discarded) and wait until it accepts connections; ``RuntimeError`` with the log's
        tail when it exits or stays unreachable for ``timeout`` seconds."""
        log = open(self.logfile, "ab") if output_to_log else None  # noqa: SIM115 - to the child
        try:
            self.proc = subprocess.Popen(
                argv,
                stdout=log if log is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
                start_new_session=True,
                **self._run_as(),
            )
        finally:
            if log is not None:
                log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start-up:\n{self.log_tail()}")
            try:
                dsn = self.probe_dsn()
                with psycopg.connect(dsn, connect_timeout=2, prepare_threshold=None) as c:
                    c.execute("SELECT 1")
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.name} did not accept connections in {timeout}s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown (SIGINT): open connections are terminated."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
