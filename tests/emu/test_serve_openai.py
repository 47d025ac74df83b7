"""`tinyllm-gen serve` against the real `openai` client (PyPI), with QEMU
behind it (one firmware run per request over QEMU's UART): completions and
chat, streamed and not, /v1/models, the queue's 429, a failing device's 503,
and malformed HTTP. The tokens must be the reference's; all traffic stays on
127.0.0.1 (an ephemeral port)."""
import http.client
import json
import socket
import threading
import time

import pytest

from firmware_harness import GREEDY, SHAPES_CONTEXT, build_case, need, reference_tokens
from tinyllm_gen.run.backends import Backend, DeviceError, Generation, ModelInfo, RunBackend, chat_prompt_ids
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.run.serve import make_server
from bounds import BACKSTOP_S

openai = pytest.importorskip("openai", reason="pip install openai (the test extra)")
pytestmark = pytest.mark.emu
N = 10
# past the server's own backstop: a stuck device comes back as the server's 503, not a client timeout
CLIENT_TIMEOUT_S = BACKSTOP_S + 60


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    return build_case(tmp_path_factory.mktemp("serve"), "llama-tied-gqa", 32, "qemu-mps2-an500")


def _start(info, backend, **kw):
    server = make_server(info, backend, "127.0.0.1", 0, **kw)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def server(built):
    info = ModelInfo.load(built.out, "tiny")
    srv = _start(info, RunBackend(built.out, timeout_s=BACKSTOP_S), queue_size=2)
    yield srv, info
    srv.shutdown()
    srv.server_close()
    srv.device.close()


@pytest.fixture(scope="module")
def client(server):
    srv, _ = server
    host, port = srv.server_address[:2]
    return openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="unused", max_retries=0,
                         timeout=CLIENT_TIMEOUT_S)


def ref(built, ids, sampling=GREEDY, n=N):
    return reference_tokens(built.model_dir, 32, ids, sampling, SHAPES_CONTEXT)[:n]


def text_of(info, ids):
    return b"".join(info.tokenizer.token_bytes(i) for i in ids).decode("utf-8", errors="replace")


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert client.models.retrieve("tiny").owned_by == "tinyllm-gen"


def test_completion(client, server, built):
    _, info = server
    prompt = "Once upon a time there was a cat"
    r = client.completions.create(model="tiny", prompt=prompt, max_tokens=N, temperature=0)
    ids = info.tokenizer.encode(prompt)
    want = ref(built, ids)
    assert r.model_extra["x_tinyllm"]["generated_ids"] == want
    assert r.choices[0].text == text_of(info, want)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == N
    assert all(c > 0 for c in r.model_extra["x_tinyllm"]["counts_per_token"])  # QEMU -icount counts


def test_completion_streamed_with_sampling(client, server, built):
    _, info = server
    prompt = "Once upon a time there was a cat"
    sampling = SamplingOptions(temperature=0.9, top_p=0.85, seed=1234)
    chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=N, temperature=0.9,
                                            top_p=0.85, seed=1234, stream=True,
                                            stream_options={"include_usage": True}))
    want = ref(built, info.tokenizer.encode(prompt), sampling)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == text_of(info, want)
    streamed_ids = [c.model_extra["x_tinyllm"]["token"] for c in chunks if c.choices and "token" in
                    c.model_extra.get("x_tinyllm", {})]
    assert len(streamed_ids) > 1  # more than one event: tokens arrived one by one
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].model_extra["x_tinyllm"]["generated_ids"] == want
    assert chunks[-1].usage.completion_tokens == N


def test_completion_token_ids_and_stop(client, server, built):
    _, info = server
    ids = info.tokenizer.encode("Once upon a time there was a cat")
    want = ref(built, ids)
    full = text_of(info, want)
    stop = full[len(full) // 2:len(full) // 2 + 2]
    r = client.completions.create(model="tiny", prompt=ids, max_tokens=N, stop=[stop])
    assert r.choices[0].text == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_chat(client, server, built):
    _, info = server
    messages = [{"role": "system", "content": "Tell stories."}, {"role": "user", "content": "A cat"}]
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=N)
    ids = chat_prompt_ids(info, messages)
    want = ref(built, ids)
    assert r.model_extra["x_tinyllm"]["generated_ids"] == want
    assert r.choices[0].message.role == "assistant"
    content = text_of(info, want)
    if "\nUser:" in content:  # the plain template's turn marker ends the reply
        content = content[:content.index("\nUser:")]
    assert r.choices[0].message.content == content
    assert r.usage.prompt_tokens == len(ids)


def test_chat_streamed(client, server, built):
    _, info = server
    messages = [{"role": "user", "content": "Tell me about a dog"}]
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=N, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=N)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason in ("length", "stop")


def test_api_errors_through_the_client(client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="x " * 200, max_tokens=1)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", max_tokens=1, n=2)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", max_tokens=-1)


# ---------------------------------------------------------------- raw HTTP


def request(server, method, path, body=None, headers=None):
    host, port = server[0].server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=CLIENT_TIMEOUT_S)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else None
    finally:
        conn.close()


def assert_openai_error(doc):
    assert set(doc) == {"error"} and {"message", "type", "param", "code"} <= set(doc["error"]), doc


@pytest.mark.parametrize("method,path,body,status,param", [
    ("POST", "/v1/completions", b"{not json", 400, None),
    ("POST", "/v1/completions", b"[1, 2]", 400, None),
    ("POST", "/v1/completions", json.dumps({"model": "tiny"}).encode(), 400, "prompt"),
    ("POST", "/v1/chat/completions", json.dumps({"model": "tiny"}).encode(), 400, "messages"),
    ("POST", "/v1/chat/completions", json.dumps({"messages": "hi"}).encode(), 400, "messages"),
    ("POST", "/v1/chat/completions", json.dumps({"messages": [{"content": "hi"}]}).encode(), 400, "messages"),
    ("POST", "/v1/completions", json.dumps({"prompt": "x", "temperature": "hot"}).encode(), 400, "temperature"),
    ("POST", "/v1/completions", json.dumps({"prompt": "x", "stream": "yes"}).encode(), 400, "stream"),
    ("POST", "/v1/completions", json.dumps({"prompt": [99999]}).encode(), 400, "prompt"),
    ("GET", "/v1/completions", None, 405, None),
    ("POST", "/v1/models", b"{}", 405, None),
    ("DELETE", "/v1/chat/completions", None, 405, None),
    ("GET", "/v2/nothing", None, 404, None),
], ids=["bad-json", "not-an-object", "no-prompt", "no-messages", "messages-not-list", "no-role",
        "temperature-type", "stream-type", "id-outside-vocab", "get-completions", "post-models",
        "delete-chat", "unknown-path"])
def test_malformed_requests(server, method, path, body, status, param):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    got, doc = request(server, method, path, body, headers)
    assert got == status, doc
    assert_openai_error(doc)
    assert doc["error"]["param"] == param


def recv_all(s) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_oversized_body(server):
    host, port = server[0].server_address[:2]
    with socket.create_connection((host, port), timeout=300) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 5000000\r\n\r\n{\"prompt\": \"")
        data = recv_all(s)  # the server answers and closes without reading the body
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert_openai_error(json.loads(body))


def test_missing_content_length_and_garbage_request_line(server):
    host, port = server[0].server_address[:2]
    with socket.create_connection((host, port), timeout=300) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
        assert recv_all(s).startswith(b"HTTP/1.1 411")
    with socket.create_connection((host, port), timeout=300) as s:
        s.sendall(b"\x16\x03\x01 garbage \xff\r\n\r\n")
        data = recv_all(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b" 400 " in head.split(b"\r\n")[0], head
    assert_openai_error(json.loads(body))


def test_server_still_serves_after_malformed(client, server, built):
    _, info = server
    prompt = "Once upon a time there was a cat"
    r = client.completions.create(model="tiny", prompt=prompt, max_tokens=4)
    assert r.model_extra["x_tinyllm"]["generated_ids"] == ref(built, info.tokenizer.encode(prompt), n=4)


# ---------------------------------------------------------------- queue and device failure


class SlowBackend(Backend):
    """Holds the device until released: lets the test fill the queue."""

    name = "slow"

    def __init__(self):
        self.release = threading.Event()
        self.started = threading.Event()

    def generate(self, prompt_ids, max_new_tokens, sampling, on_token=None):
        self.started.set()
        self.release.wait(30)
        return Generation(list(prompt_ids), [], [], [], "max_tokens", 0, self.unit)


class BrokenBackend(Backend):
    name = "broken"

    def generate(self, prompt_ids, max_new_tokens, sampling, on_token=None):
        raise DeviceError("the board stopped answering")


def test_queue_full_gets_429(server):
    info = server[1]
    backend = SlowBackend()
    srv = _start(info, backend, queue_size=1)
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        c = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=CLIENT_TIMEOUT_S)
        results = []

        def call():
            results.append(c.completions.create(model="tiny", prompt="hi", max_tokens=1))

        running = threading.Thread(target=call)
        running.start()
        assert backend.started.wait(10)  # one on the device
        waiting = threading.Thread(target=call)
        waiting.start()
        deadline = time.monotonic() + 10
        while srv.device._jobs.qsize() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # one in the queue
        with pytest.raises(openai.RateLimitError) as e:
            c.completions.create(model="tiny", prompt="hi", max_tokens=1)
        assert e.value.body["code"] == "queue_full"
        assert e.value.response.headers["Retry-After"] == "1"
        backend.release.set()
        running.join(30)
        waiting.join(30)
        assert len(results) == 2  # both queued requests were served
    finally:
        backend.release.set()
        srv.shutdown()
        srv.server_close()


def test_device_failure_gets_503(server):
    srv = _start(server[1], BrokenBackend())
    try:
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", api_key="unused",
                          max_retries=0, timeout=CLIENT_TIMEOUT_S)
        with pytest.raises(openai.InternalServerError) as e:
            c.completions.create(model="tiny", prompt="hi", max_tokens=1)
        assert e.value.status_code == 503 and e.value.body["code"] == "device_failed"
        with pytest.raises(openai.InternalServerError):
            list(c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                           stream=True))
        status, doc = request((srv,), "GET", "/health")
        assert status == 200 and doc["failures"] == 2
    finally:
        srv.shutdown()
        srv.server_close()


def test_serial_backend_keeps_one_session(built):
    """serve --serial: a persistent session with one board (QEMU's UART0 on a
    socket standing in for it); requests one after another, streamed and
    not, over the same connection, without the exit flag."""
    from tinyllm_gen.run.backends import SerialBackend
    from tinyllm_gen.board import load_board
    from tinyllm_gen.run.qemu import qemu_uart_server

    info = ModelInfo.load(built.out, "tiny")
    with qemu_uart_server(built.out / "build" / "firmware.elf", load_board("qemu-mps2-an500"),
                          built.out / "weights.bin", count=False) as (url, qemu):
        backend = SerialBackend(url, timeout_s=BACKSTOP_S)
        srv = _start(info, backend)
        try:
            c = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", api_key="unused",
                              max_retries=0, timeout=CLIENT_TIMEOUT_S)
            prompt = "Once upon a time there was a cat"
            want = ref(built, info.tokenizer.encode(prompt))
            for stream in (False, True, False):
                if stream:
                    chunks = list(c.completions.create(model="tiny", prompt=prompt, max_tokens=N, stream=True))
                    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
                else:
                    r = c.completions.create(model="tiny", prompt=prompt, max_tokens=N)
                    assert r.model_extra["x_tinyllm"]["generated_ids"] == want
                    assert r.model_extra["x_tinyllm"]["backend"] == "serial"
                    text = r.choices[0].text
                assert text == text_of(info, want)
            assert qemu.poll() is None  # still serving: no request carried the exit flag
            assert srv.device.served == 3
        finally:
            srv.shutdown()
            srv.server_close()
            srv.device.close()
