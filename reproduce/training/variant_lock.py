"""One writer per variant: ``<variant>/train.lock``, held with ``flock`` for a whole training run.

The kernel releases the lock when its holder exits, however it exits (kill -9 included), so a
stale lock file never blocks a rerun; the file holds the holder's pid, host and start time only
to name it in the refusal.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from reproduce.errors import ReproduceError


class VariantLockedError(ReproduceError):
    """Another process is training (or restarting) the same variant folder."""


class VariantLock:
    def __init__(self, variant_dir: Path):
        self.path = variant_dir / "train.lock"
        self._stream = None

    def __enter__(self) -> "VariantLock":
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            stream = self.path.open("a+")
        except OSError as error:
            raise VariantLockedError(
                f"{self.path}: cannot create the lock file ({error.strerror})") from None
        try:
            fcntl.flock(stream, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            stream.seek(0)
            holder = stream.read().strip() or "unknown holder"
            stream.close()
            raise VariantLockedError(
                f"{self.path}: another trainer is writing this variant ({holder}); wait for it to "
                f"finish or stop it"
            ) from None
        stream.seek(0)
        stream.truncate()
        stream.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
        stream.flush()
        self._stream = stream
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self._stream, fcntl.LOCK_UN)
        self._stream.close()
        self._stream = None
