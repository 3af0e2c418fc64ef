"""A real ``mlflow server`` for the tests (on 127.0.0.1 unless told), stopped when the test ends.

It is started without ``--allowed-hosts``: MLflow's own defaults, which allow loopback and private
addresses but no host name.
"""

import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_mlflow_server(folder: Path, bind: str = "127.0.0.1", store: str | None = None,
                          port: int | None = None):
    """Yield the server's URL on 127.0.0.1; ``bind`` is the address it listens on, ``store``
    the backend store URI (default: a new SQLite file in ``folder``), as ``mlflow ui
    --backend-store-uri`` serves an embedded store; ``port`` (default: a free one)."""
    port = port or free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    process = subprocess.Popen(
        [str(mlflow), "server", "--host", bind, "--port", str(port), "--workers", "1",
         "--backend-store-uri", store or f"sqlite:///{folder / 'server.db'}",
         "--artifacts-destination", str(folder / "artifacts")],
        stdout=subprocess.DEVNULL, stderr=open(folder / "server.log", "w"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "mlflow server did not start: "
                        + (folder / "server.log").read_text()[-2000:]
                    ) from None
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
