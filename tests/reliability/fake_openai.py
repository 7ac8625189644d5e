"""A fake OpenAI-compatible chat server on 127.0.0.1 that misbehaves on purpose.

Modes (the path's first segment, so one server serves them all: ``http://127.0.0.1:PORT/<mode>/v1``):

* ``ok``      a normal reply (``FakeOpenAI.answer``), honouring nothing but the protocol (no log-probabilities)
* ``logprobs`` as ``ok``, but a request that asks for ``top_logprobs`` gets ``FakeOpenAI.top_logprobs`` (a dict
  {token: log-probability}, or a function of the request giving one) as its first token's top alternatives,
  and any other that asks for ``logprobs`` (a span answer's grammar too: it is ignored) gets each word of its
  reply as a token of probability ``FakeOpenAI.token_probability`` (the first word's: ``first_token_probability``)
* ``nologprobs`` as ``ok``, but a request that asks for ``logprobs`` gets a 400 naming it (as OpenAI's reasoning models)
* ``nogrammar`` as ``ok``, but a request with a GBNF ``grammar`` (llama-server's extension) gets a 400 naming it
* ``top20``   as ``logprobs`` (a grammar ignored), but a request for more than 20 ``top_logprobs`` gets a 400 (as OpenAI, vLLM)
* ``hang``    accepts the request and never answers (until the server stops)
* ``empty``   200 with ``"choices": []``
* ``broken``  200 with a body that is not JSON
* ``babble``  200 with a 2 MB reply and ``finish_reason: stop`` (a server that ignores max_tokens)
* ``error``   500 with an error body

``refused_url()`` gives a base URL where nothing listens (connection refused).
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BABBLE_BYTES = 2 * 1024 * 1024


def _completion(text: str, finish_reason: str = "stop") -> dict:
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": "fake",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": max(1, len(text) // 4), "total_tokens": 10 + len(text) // 4},
    }


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        mode = self.path.strip("/").split("/")[0]
        self.server.requests.append((mode, request))
        if mode == "hang":
            self.server.stopping.wait()
            return
        if mode == "empty":
            body = _completion("")
            body["choices"] = []
            return self._send(200, json.dumps(body).encode())
        if mode == "broken":
            return self._send(200, b'{"id": "chatcmpl-fake", "choices": [{"message": ')
        if mode == "babble":
            words = ("lorem ipsum dolor sit amet consectetur " * (BABBLE_BYTES // 38 + 1))[:BABBLE_BYTES]
            return self._send(200, json.dumps(_completion(words)).encode())
        if mode == "error":
            return self._send(500, json.dumps({"error": {"message": "internal error", "type": "server_error"}}).encode())
        if mode == "nogrammar" and "grammar" in request:
            error = {"message": "Unrecognized request argument supplied: grammar", "type": "invalid_request_error", "param": None}
            return self._send(400, json.dumps({"error": error}).encode())
        if mode == "top20" and int(request.get("top_logprobs") or 0) > 20:
            error = {"message": "Invalid 'top_logprobs': integer above maximum value. Expected a value <= 20.", "type": "invalid_request_error", "param": "top_logprobs"}
            return self._send(400, json.dumps({"error": error}).encode())
        mode = "logprobs" if mode == "top20" else mode
        if mode == "nologprobs" and "logprobs" in request:
            error = {"message": "Unsupported parameter: 'logprobs' is not supported with this model.", "type": "invalid_request_error", "param": "logprobs"}
            return self._send(400, json.dumps({"error": error}).encode())
        if mode == "logprobs" and request.get("top_logprobs") and "grammar" not in request:  # a yes/no read, not a span answer
            top = self.server.top_logprobs(request) if callable(self.server.top_logprobs) else self.server.top_logprobs
            ranked = sorted(top.items(), key=lambda kv: -kv[1])[: int(request.get("top_logprobs") or 1)]
            body = _completion(ranked[0][0], finish_reason="length")
            body["usage"]["prompt_tokens_details"] = {"cached_tokens": 7}  # as llama-server says what its prompt cache held
            body["choices"][0]["logprobs"] = {"content": [{"token": ranked[0][0], "logprob": ranked[0][1], "bytes": None,
                                                           "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in ranked]}]}
            return self._send(200, json.dumps(body).encode())
        schema = (request.get("response_format") or {}).get("json_schema", {}).get("schema", {})
        props = schema.get("properties", {})
        if "action" in props:  # an agent step: search with the question's last words while offered, then answer
            offered = props["action"]["enum"]
            question = next((m["content"] for m in request.get("messages", []) if m.get("role") == "user"), "")
            words = question.split("Question: ", 1)[-1].split("\n", 1)[0].rstrip("?").split()[-3:]
            text = json.dumps({"action": "search", "query": " ".join(words)} if "search" in offered else {"action": "answer", "query": ""})
        elif "label" in props:  # a constrained choice: the first allowed label
            text = json.dumps({"label": props["label"]["enum"][0]})
        elif "labels" in props:
            text = json.dumps({"labels": ["yes"] * int(props["labels"].get("minItems", 1))})
        elif "scores" in props:
            text = json.dumps({"scores": [5] * int(props["scores"].get("minItems", 1))})
        else:
            text = self.server.answer
        body = _completion(text)
        if mode == "logprobs" and request.get("logprobs"):  # the reply's own tokens, as a server lists them
            words = text.split(" ")
            p = [self.server.first_token_probability] + [self.server.token_probability] * (len(words) - 1)
            body["choices"][0]["logprobs"] = {"content": [{"token": (" " if i else "") + w, "logprob": math.log(q), "bytes": None, "top_logprobs": []}
                                                          for i, (w, q) in enumerate(zip(words, p))]}
        self._send(200, json.dumps(body).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answer: str, top_logprobs, token_probability: float, first_token_probability: float):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer, self.top_logprobs = answer, top_logprobs
        self.token_probability, self.first_token_probability = token_probability, first_token_probability
        self.requests: list[tuple[str, dict]] = []
        self.stopping = threading.Event()


class FakeOpenAI:
    """``with FakeOpenAI() as server: server.url("hang")`` → a base URL for ``RAGKIT_OPENAI_BASE_URL``."""

    def __init__(self, answer: str = "Nikola Tesla was born in Smiljan [1].", top_logprobs=None, token_probability: float = 0.9,
                 first_token_probability: float | None = None):
        self._server = _Server(answer, top_logprobs or {"Yes": -0.5, "No": -1.0}, token_probability,
                               token_probability if first_token_probability is None else first_token_probability)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    @property
    def requests(self) -> list[tuple[str, dict]]:
        return self._server.requests

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{mode}/v1"


def refused_url() -> str:
    """A base URL on a port that was free a moment ago: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
