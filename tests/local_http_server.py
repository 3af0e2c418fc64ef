"""A threaded HTTP server on 127.0.0.1 serving a folder, recording the requests it saw, honouring
Range requests with an ``ETag`` (or ``Last-Modified``) validator and ``If-Range`` (a range that
starts at or past the end is answered ``416`` with ``Content-Range: bytes */<size>``, as nginx
and Apache answer it), and able to misbehave on request: cut its first response off half way (an
interrupted download), fail the first requests with 503 (or another status), send bodies without
``Content-Length``, answer a resume with a 206 that starts at byte 0, or trickle a body one byte
at a time."""

from __future__ import annotations

import hashlib
import threading
import time
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        server = self.server
        server.seen.append({"path": self.path, "range": self.headers.get("Range"),
                            "if_range": self.headers.get("If-Range"),
                            "authorization": self.headers.get("Authorization")})
        if server.failures_left > 0:
            server.failures_left -= 1
            self.send_error(server.fail_status, "try again")
            return
        path = Path(self.translate_path(self.path))  # the query string is ignored
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        if server.last_modified_only:  # a server that sends no ETag: its date is the validator
            validator = self.date_time_string(int(path.stat().st_mtime))
        else:
            validator = f'"{hashlib.sha256(data).hexdigest()[:16]}"'
        start = 0
        requested = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if requested and requested.startswith("bytes=") and if_range in (None, validator):
            start = int(requested.removeprefix("bytes=").split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if server.bad_range_start:  # a broken server: says 206 but sends from byte 0
                start = 0
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Last-Modified" if server.last_modified_only else "ETag", validator)
        if not server.no_length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if server.truncate_next:
            server.truncate_next = False
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if server.trickle:
            self._trickle(body, server.trickle)
            return
        self.wfile.write(body)

    def _trickle(self, body: bytes, seconds: float) -> None:
        """One byte every ``seconds``, until the body ends or the client hangs up."""
        for index in range(len(body)):
            try:
                self.wfile.write(body[index:index + 1])
                self.wfile.flush()
            except OSError:
                return
            time.sleep(seconds)


@contextmanager
def serving(folder: Path, truncate_first: bool = False, fail_first: int = 0,
            no_length: bool = False, bad_range_start: bool = False, trickle: float = 0,
            fail_status: int = 503, last_modified_only: bool = False):
    """Yields (base_url, server); ``server.seen`` lists {"path", "range", "if_range",
    "authorization"} of every request. HTTP/1.0: each response closes its connection, so a body
    needs no length. ``trickle``: send bodies one byte every that many seconds. ``fail_status``:
    the status of the ``fail_first`` failures. ``last_modified_only``: send ``Last-Modified``
    instead of ``ETag`` as the validator."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(folder)))
    server.seen, server.truncate_next, server.failures_left = [], truncate_first, fail_first
    server.no_length, server.bad_range_start = no_length, bad_range_start
    server.trickle, server.fail_status = trickle, fail_status
    server.last_modified_only = last_modified_only
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()
