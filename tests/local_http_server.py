"""A threaded HTTP server on 127.0.0.1 serving a folder, honouring Range requests, recording the
requests it saw, and able to cut its first response off half way (an interrupted download)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        server = self.server
        server.seen.append({"path": self.path, "range": self.headers.get("Range")})
        if server.failures_left > 0:
            server.failures_left -= 1
            self.send_error(503, "try again")
            return
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        requested = self.headers.get("Range")
        if requested and requested.startswith("bytes="):
            start = int(requested.removeprefix("bytes=").split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if server.truncate_next:
            server.truncate_next = False
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


@contextmanager
def serving(folder: Path, truncate_first: bool = False, fail_first: int = 0):
    """Yields (base_url, server); ``server.seen`` lists {"path", "range"} of every request."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(folder)))
    server.seen, server.truncate_next, server.failures_left = [], truncate_first, fail_first
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()
