"""`tinyllm-gen serve OUT`: an OpenAI-compatible HTTP server in front of one
device (codegen/backends.py: a board over --serial, else QEMU, Unicorn or the
host build, kept running between requests so a request that extends the
previous conversation continues it).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (both
streamed as server-sent events with ``"stream": true``, else one JSON body),
``GET /v1/models``, ``GET /health``.

One device, one generation at a time: a single worker thread owns the
backend; requests wait in a bounded queue (``--queue``), and one that finds
it full gets 429 at once. A generation the device fails gets 503. Errors
have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``.

Sampling: ``temperature`` defaults to 0 (greedy, the firmware's bit-exact
path; OpenAI's default is 1), ``top_p`` and ``seed`` (default 0) go to the
firmware's sampler; ``stop`` strings end the text on the host (the device
finishes its run). Each response carries ``x_tinyllm``: the token ids, the
board's count per token and the prefill count, and ``kept_tokens``: where a
request's prompt extends the previous request's prompt and tokens exactly
(token for token), the device continued the conversation it held and
prefilled only the rest (multi-turn KV reuse, run/session.py); otherwise 0,
a fresh prefill."""
from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .backends import (Backend, DeviceError, Generation, ModelInfo, TextStream, chat_prompt_ids, chat_stops)
from .protocol import TokenLine
from ..reference.sampler import SamplingOptions

MAX_BODY_BYTES = 1 << 20
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
FINISH = {"eos": "stop", "max_tokens": "length", "context": "length"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


# ---------------------------------------------------------------- the device queue


@dataclass
class Job:
    prompt_ids: list[int]
    max_new_tokens: int
    sampling: SamplingOptions
    events: "queue.Queue[tuple[str, Any]]" = field(default_factory=queue.Queue)  # ("token", TokenLine) ... ("done", Generation) | ("error", str)


class Device:
    """The one backend, a worker thread, and a bounded queue in front."""

    def __init__(self, backend: Backend, queue_size: int = 4):
        self.backend = backend
        self._jobs: "queue.Queue[Job | None]" = queue.Queue(maxsize=max(1, queue_size))
        self.failures = 0
        self.served = 0
        self.busy = False
        self._worker = threading.Thread(target=self._run, name="tinyllm-device", daemon=True)
        self._worker.start()

    def submit(self, job: Job) -> None:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise ApiError(429, f"the device is busy and {self._jobs.maxsize} request(s) are already waiting; "
                                "retry later", "rate_limit_error", code="queue_full", headers={"Retry-After": "1"}) \
                from None

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self.busy = True
            try:
                gen = self.backend.generate(job.prompt_ids, job.max_new_tokens, job.sampling,
                                            on_token=lambda t, job=job: job.events.put(("token", t)))
                self.served += 1
                job.events.put(("done", gen))
            except DeviceError as e:
                self.failures += 1
                job.events.put(("error", str(e)))
            except Exception as e:  # a bug must not kill the worker: the next request still runs
                self.failures += 1
                job.events.put(("error", f"{type(e).__name__}: {e}"))
            finally:
                self.busy = False

    def close(self) -> None:
        try:
            self._jobs.put_nowait(None)
        except queue.Full:
            pass
        self.backend.close()


# ---------------------------------------------------------------- request parsing


def _get(body: dict, key: str, kinds, default=None, check=None, what: str = ""):
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ApiError(400, f"'{key}' must be {what or kinds}", param=key)
    if not isinstance(v, kinds):
        raise ApiError(400, f"'{key}' must be {what or kinds}", param=key)
    if check is not None and not check(v):
        raise ApiError(400, f"'{key}' is out of range: {what}", param=key)
    return v


@dataclass(frozen=True)
class Params:
    max_tokens: int
    sampling: SamplingOptions
    stream: bool
    include_usage: bool
    stops: tuple[str, ...]


def _params(body: dict, info: ModelInfo, default_max: int) -> Params:
    model = body.get("model")
    if model is not None and model != info.model_id:
        raise ApiError(404, f"the model '{model}' does not exist; this server has '{info.model_id}'",
                       param="model", code="model_not_found")
    n = _get(body, "n", int, 1)
    if n != 1:
        raise ApiError(400, "only n=1 is supported (one device, one generation)", param="n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_tokens = _get({key: max_tokens}, key, int, default_max, lambda v: 0 <= v < 1 << 31,
                      "an integer >= 0")
    temperature = float(_get(body, "temperature", (int, float), 0.0, lambda v: 0 <= v <= 2, "a number in [0, 2]"))
    top_p = float(_get(body, "top_p", (int, float), 1.0, lambda v: 0 < v <= 1, "a number in (0, 1]"))
    seed = _get(body, "seed", int, 0, lambda v: 0 <= v < 1 << 64, "an integer in [0, 2^64)")
    stream = _get(body, "stream", bool, False, what="a boolean")
    opts = _get(body, "stream_options", dict, {}, what="an object")
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        stops = tuple(stop)
    else:
        raise ApiError(400, "'stop' must be a string or a list of up to 4 strings", param="stop")
    if info.greedy_only and temperature > 0:
        raise ApiError(400, "this firmware decodes greedily only (compiled with --sampler greedy): send "
                            "temperature 0", param="temperature")
    return Params(max_tokens, SamplingOptions(temperature, top_p, seed), stream,
                  bool(opts.get("include_usage")), stops)


def _check_context(info: ModelInfo, ids: list[int]) -> None:
    if not ids:
        raise ApiError(400, "the prompt is empty (the firmware needs at least one token)", param="prompt")
    if len(ids) >= info.max_seq:
        raise ApiError(400, f"the prompt is {len(ids)} tokens but the firmware's context is {info.max_seq}",
                       param="prompt", code="context_length_exceeded")
    bad = [i for i in ids if not 0 <= i < info.tokenizer.vocab_size]
    if bad:
        raise ApiError(400, f"prompt token id {bad[0]} is outside the vocabulary", param="prompt")


def completion_prompt(body: dict, info: ModelInfo) -> list[int]:
    if "prompt" not in body:
        raise ApiError(400, "missing required field 'prompt'", param="prompt")
    p = body["prompt"]
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        ids = info.tokenizer.encode(p)
    elif isinstance(p, list) and p and all(isinstance(i, int) and not isinstance(i, bool) for i in p):
        ids = list(p)  # token ids, as OpenAI accepts
    else:
        raise ApiError(400, "'prompt' must be a string, a list of token ids, or a list of one of those",
                       param="prompt")
    _check_context(info, ids)
    return ids


def chat_prompt(body: dict, info: ModelInfo) -> list[int]:
    msgs = body.get("messages")
    if msgs is None:
        raise ApiError(400, "missing required field 'messages'", param="messages")
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
        raise ApiError(400, "'messages' must be a non-empty list of message objects", param="messages")
    for m in msgs:
        if not isinstance(m.get("role"), str):
            raise ApiError(400, "every message needs a 'role' string", param="messages")
    try:
        ids = chat_prompt_ids(info, msgs)
    except ValueError as e:
        raise ApiError(400, str(e), param="messages") from None
    _check_context(info, ids)
    return ids


# ---------------------------------------------------------------- responses


def _usage(gen_or_prompt: list[int], n_completion: int) -> dict:
    return {"prompt_tokens": len(gen_or_prompt), "completion_tokens": n_completion,
            "total_tokens": len(gen_or_prompt) + n_completion}


def _extension(gen: Generation, backend: Backend) -> dict:
    return {"generated_ids": gen.generated_ids, "counts_per_token": gen.counts, "prefill_count": gen.prefill_count,
            "count_unit": gen.unit, "stop_reason": gen.stop_reason, "backend": backend.name,
            "kept_tokens": gen.reused,  # of the prompt, in the device's KV cache from the last request
            "context_shifts": gen.shifts}  # a rolling-context build's window moves (compile --context-policy roll)


class Handler(BaseHTTPRequestHandler):
    server_version = "tinyllm-gen"
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a client may take to send its request

    # set on the subclass by make_server
    info: ModelInfo
    device: Device
    max_body: int = MAX_BODY_BYTES
    quiet: bool = True

    def log_message(self, fmt, *args):  # noqa: D401 - BaseHTTPRequestHandler's hook
        if not self.quiet:
            super().log_message(fmt, *args)

    # ---- plumbing

    def _send_json(self, status: int, doc: dict, headers: dict | None = None) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code, message=None, explain=None):
        """http.server's own errors (a malformed request line, headers too
        long, an unsupported method) in OpenAI's JSON shape."""
        try:
            short = HTTPStatus(code).phrase
        except ValueError:
            short = "error"
        self.close_connection = True
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"  # an unparsable request line: still answer with a status line
        err = ApiError(code, message or short)
        try:
            self._send_json(code, err.body(), {"Connection": "close"})
        except OSError:
            pass

    def _error(self, e: ApiError) -> None:
        self._send_json(e.status, e.body(), e.headers)

    def _body(self) -> dict:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise ApiError(411, "send the body with a Content-Length (chunked bodies are not accepted)")
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            raise ApiError(411, "a POST needs a Content-Length header")
        try:
            n = int(length)
            if n < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise ApiError(400, f"bad Content-Length {length!r}") from None
        if n > self.max_body:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            raise ApiError(413, f"request body of {n} bytes is over the limit of {self.max_body} bytes",
                           code="body_too_large")
        raw = self.rfile.read(n)
        if len(raw) != n:
            self.close_connection = True
            raise ApiError(400, "the request body ended early")
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the body is not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise ApiError(400, "the body must be a JSON object")
        return doc

    # ---- routes

    ROUTES = {"/v1/completions": ("POST", "completions"), "/v1/chat/completions": ("POST", "chat"),
              "/v1/models": ("GET", "models"), "/health": ("GET", "health")}

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        if path.startswith("/v1/models/") and method == "GET":
            return self._model(path[len("/v1/models/"):])
        route = self.ROUTES.get(path)
        try:
            if route is None:
                raise ApiError(404, f"no route {path}; this server has {', '.join(sorted(self.ROUTES))}",
                               code="not_found")
            want, name = route
            if method != want:
                raise ApiError(405, f"{path} takes {want}, not {method}", code="method_not_allowed",
                               headers={"Allow": want})
            getattr(self, "_" + name)()
        except ApiError as e:
            if method == "POST" and "Content-Length" in self.headers and e.status in (404, 405):
                self.close_connection = True  # the body was not read
            self._error(e)

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PUT(self):
        self._route("PUT")

    def do_DELETE(self):
        self._route("DELETE")

    def do_PATCH(self):
        self._route("PATCH")

    def _models(self) -> None:
        self._send_json(200, {"object": "list", "data": [self._model_doc()]})

    def _model_doc(self) -> dict:
        return {"id": self.info.model_id, "object": "model", "created": 0, "owned_by": "tinyllm-gen",
                "x_tinyllm": {"backend": self.device.backend.name, "max_seq": self.info.max_seq}}

    def _model(self, name: str) -> None:
        if name != self.info.model_id:
            return self._error(ApiError(404, f"the model '{name}' does not exist", code="model_not_found"))
        self._send_json(200, self._model_doc())

    def _health(self) -> None:
        d = self.device
        self._send_json(200, {"status": "ok", "backend": d.backend.name, "busy": d.busy, "served": d.served,
                              "failures": d.failures, "waiting": d._jobs.qsize()})

    def _completions(self) -> None:
        body = self._body()
        p = _params(body, self.info, DEFAULT_MAX_TOKENS)
        ids = completion_prompt(body, self.info)
        self._generate(ids, p, chat=False)

    def _chat(self) -> None:
        body = self._body()
        p = _params(body, self.info, min(256, self.info.max_seq))
        ids = chat_prompt(body, self.info)
        self._generate(ids, p, chat=True)

    # ---- generation

    def _generate(self, ids: list[int], p: Params, chat: bool) -> None:
        job = Job(ids, p.max_tokens, p.sampling)
        self.device.submit(job)  # 429 when the queue is full
        stops = p.stops + (chat_stops(self.info) if chat else ())
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        if p.stream:
            self._stream(job, rid, created, chat, stops, p.include_usage)
        else:
            self._whole(job, rid, created, chat, stops)

    def _events(self, job: Job):
        while True:
            kind, value = job.events.get()
            yield kind, value
            if kind != "token":
                return

    def _whole(self, job: Job, rid: str, created: int, chat: bool, stops) -> None:
        text = TextStream(stops)
        gen = None
        for kind, value in self._events(job):
            if kind == "token":
                text.feed(value.text)
            elif kind == "error":
                raise ApiError(503, f"the device failed: {value}", "server_error", code="device_failed")
            else:
                gen: Generation = value
        text.feed(b"", final=True)
        finish = "stop" if text.stopped else FINISH.get(gen.stop_reason or "", "length")
        n = len(gen.generated_ids)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text.text}, "logprobs": None,
                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text.text, "logprobs": None, "finish_reason": finish}
        self._send_json(200, {"id": rid, "object": "chat.completion" if chat else "text_completion",
                              "created": created, "model": self.info.model_id, "choices": [choice],
                              "usage": _usage(job.prompt_ids, n),
                              "x_tinyllm": _extension(gen, self.device.backend)})

    def _sse(self, doc) -> None:
        data = b"data: " + (doc if isinstance(doc, bytes) else json.dumps(doc).encode()) + b"\n\n"
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, job: Job, rid: str, created: int, chat: bool, stops, include_usage: bool) -> None:
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(delta_text: str | None, finish: str | None, role: bool = False, extra: dict | None = None):
            if chat:
                delta: dict = {}
                if role:
                    delta["role"] = "assistant"
                if delta_text is not None:
                    delta["content"] = delta_text
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": delta_text or "", "logprobs": None, "finish_reason": finish}
            doc = {"id": rid, "object": obj, "created": created, "model": self.info.model_id, "choices": [choice]}
            if extra:
                doc.update(extra)
            return doc

        events = self._events(job)
        # The first event decides the status: a device that fails before any
        # token still gets a plain 503.
        first = next(events)
        if first[0] == "error":
            raise ApiError(503, f"the device failed: {first[1]}", "server_error", code="device_failed")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the stream ends with the connection
        self.end_headers()
        self.close_connection = True
        text = TextStream(stops)
        try:
            if chat:
                self._sse(chunk("", None, role=True))
            gen = None
            for kind, value in [first, *events]:
                if kind == "token":
                    tok: TokenLine = value
                    piece = text.feed(tok.text)
                    if piece:
                        self._sse(chunk(piece, None, extra={"x_tinyllm": {"token": tok.id, "count": tok.count}}))
                elif kind == "error":
                    self._sse({"error": ApiError(503, f"the device failed: {value}", "server_error",
                                                 code="device_failed").body()["error"]})
                    return
                else:
                    gen = value
            tail = text.feed(b"", final=True)
            if tail:
                self._sse(chunk(tail, None))
            finish = "stop" if text.stopped else FINISH.get(gen.stop_reason or "", "length")
            last = chunk(None if chat else "", finish, extra={"x_tinyllm": _extension(gen, self.device.backend)})
            if chat:
                last["choices"][0]["delta"] = {}
            self._sse(last)
            if include_usage:
                self._sse({"id": rid, "object": obj, "created": created, "model": self.info.model_id, "choices": [],
                           "usage": _usage(job.prompt_ids, len(gen.generated_ids))})
            self._sse(b"[DONE]")
        except OSError:
            pass  # the client went away; the device finishes its run regardless


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(info: ModelInfo, backend: Backend, host: str = "127.0.0.1", port: int = 8080,
                queue_size: int = 4, max_body: int = MAX_BODY_BYTES, quiet: bool = True) -> Server:
    """A ready (bound, not yet serving) server; ``port`` 0 picks a free one
    (``server.server_address``). ``server.device`` owns the backend."""
    handler = type("TinyllmHandler", (Handler,), {"info": info, "max_body": max_body, "quiet": quiet})
    server = Server((host, port), handler)  # bind first: a port in use starts no worker
    handler.device = server.device = Device(backend, queue_size)
    return server


def serve_forever(server: Server) -> None:
    try:
        server.serve_forever()
    finally:
        server.server_close()
        server.device.close()
