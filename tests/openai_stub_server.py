"""A tiny OpenAI-compatible HTTP server for tests (standard library only).

    with StubServer() as stub:              # 127.0.0.1, ephemeral port, background thread
        stub.push_reply("```python\\n...\\n```", prompt_tokens=100, completion_tokens=50)
        stub.push(500, {"error": {"message": "boom"}})
        stub.push(200, "not json {")        # a str body is sent verbatim (malformed JSON)
        ... litellm.completion(model="openai/stub-model", api_base=stub.api_base, api_key="test")
        stub.requests                        # parsed JSON bodies of every POST received

Replies come from a queue of (status, body) pairs, or from `stub.handler`, a function
(request_json) -> (status, body) used when the queue is empty. With neither, the server
answers 500. `body` is a dict/list (sent as JSON) or a str/bytes (sent verbatim). An
optional `delay_s` per scripted reply lets tests exercise concurrency.

Hostile servers (`push_hostile(mode, body, interval_s)`, or `stub.mode` for every reply):
  "trickle"  headers, then the body one byte every interval_s (never idle long enough for
             an idle timeout)
  "stall"    headers, then nothing until the server stops
  "close"    headers and half the body, then the connection is closed
`stub.stop()` ends stalled and trickling replies.
"""
from __future__ import annotations

import collections
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chat_completion(content: str | None, *, prompt_tokens: int = 10, completion_tokens: int = 5,
                    model: str = "stub-model", finish_reason: str = "stop") -> dict:
    """The JSON body of a successful /v1/chat/completions response."""
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": finish_reason,
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class StubServer:
    def __init__(self, host: str = "127.0.0.1"):
        self._lock = threading.Lock()
        self._queue: collections.deque = collections.deque()
        self.handler = None  # optional callable(request_json) -> (status, body)
        self.requests: list = []  # parsed request bodies (or raw text if not JSON)
        self.paths: list[str] = []
        self.mode: tuple[str, float] | None = None  # (hostile mode, interval_s) for every reply
        self._stopping = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    req = json.loads(raw or b"null")
                except ValueError:
                    req = raw.decode("utf-8", "replace")
                with stub._lock:
                    stub.requests.append(req)
                    stub.paths.append(self.path)
                    item = stub._queue.popleft() if stub._queue else None
                    fn = stub.handler
                hostile = stub.mode
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    status, body, delay = 404, {"error": {"message": f"no route {self.path}"}}, 0.0
                elif item is not None:
                    status, body, delay = item[:3]
                    hostile = item[3] if len(item) > 3 else hostile
                elif fn is not None:
                    status, body = fn(req)
                    delay = 0.0
                else:
                    status, body, delay = 500, {"error": {"message": "stub: no scripted reply"}}, 0.0
                if delay:
                    time.sleep(delay)
                if isinstance(body, (dict, list)):
                    data = json.dumps(body).encode()
                elif isinstance(body, str):
                    data = body.encode()
                else:
                    data = bytes(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if hostile is None:
                    self.wfile.write(data)
                    return
                self._hostile(data, *hostile)

            def _hostile(self, data: bytes, mode: str, interval_s: float) -> None:
                self.close_connection = True
                self.wfile.flush()
                try:
                    if mode == "trickle":
                        for i in range(len(data)):
                            if stub._stopping.wait(interval_s):
                                return
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                    elif mode == "stall":
                        stub._stopping.wait()
                    elif mode == "close":
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                    else:
                        raise ValueError(f"unknown hostile mode {mode!r}")
                except OSError:  # the client gave up
                    pass

            def do_GET(self):  # noqa: N802
                data = json.dumps({"object": "list", "data": [{"id": "stub-model", "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        self.host, self.port = self._httpd.server_address[:2]
        self._thread: threading.Thread | None = None

    # -------------------------------------------------------------- scripting
    def push(self, status: int, body, delay_s: float = 0.0) -> None:
        with self._lock:
            self._queue.append((status, body, delay_s))

    def push_hostile(self, mode: str, body=None, interval_s: float = 0.2) -> None:
        """One reply sent the hostile way `mode` (module doc); body: a chat completion by default."""
        body = chat_completion("```python\nA = 1.0\n\ndef predict_step_time(P):\n    return A + P\n```") \
            if body is None else body
        with self._lock:
            self._queue.append((200, body, 0.0, (mode, interval_s)))

    def push_reply(self, content: str | None, delay_s: float = 0.0, **kw) -> None:
        self.push(200, chat_completion(content, **kw), delay_s)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -------------------------------------------------------------- lifecycle
    def start(self) -> "StubServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name=f"openai-stub-{self.port}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "StubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
