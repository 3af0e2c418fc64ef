"""A real ``mlflow server`` on 127.0.0.1 for the tests, stopped when the test ends."""

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
def running_mlflow_server(folder: Path):
    port = free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    process = subprocess.Popen(
        [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
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
                        "mlflow server did not start: " + (folder / "server.log").read_text()[-2000:]
                    )
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
