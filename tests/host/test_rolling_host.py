"""Rolling context in the host build (gcc): 4 x max_seq tokens equal to the
reference's, int8, int4 and 8:4 KV; a prompt that does not fit is refused at the
host with one line."""
import pytest

from firmware_harness import need
from rolling import MAX_SEQ, built, check_rolls
from tinyllm_gen.errors import UserError
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.run.firmware import run_firmware

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("rolling-host")


@pytest.mark.parametrize("opts", [dict(context_policy="roll"), dict(context_policy="roll", kv_bits=4),
                                  dict(context_policy="roll", kv_bits="8:4")],
                         ids=["kv8", "kv4", "kv8v4"])
def test_rolling_context_on_the_host_is_the_references(root, opts):
    need("gcc")
    need("cmake")
    check_rolls(built(root, "host", **opts), opts)


def test_a_prompt_longer_than_the_context_is_refused(root):
    need("gcc")
    need("cmake")
    out = built(root, "host", context_policy="roll")
    with pytest.raises(UserError, match=f"the prompt is {MAX_SEQ} tokens.*rolling: the prompt must still fit"):
        run_firmware(out, [1] * MAX_SEQ, 4, SamplingOptions())


def test_serve_and_chat_report_the_rolls(root):
    """A rolling build served over HTTP says how often its window moved (x_tinyllm.context_shifts), as
    often as the same build's own end line says under `run` (check_rolls equates that with the
    reference's); chat's summary line says it too."""
    import io
    import json
    import threading
    import urllib.request

    from rolling import N_NEW, PROMPTS, STORY
    from bounds import BACKSTOP_S
    from tinyllm_gen.frontends import load_model
    from tinyllm_gen.run.backends import Generation, ModelInfo, open_backend
    from tinyllm_gen.run.chat import _report
    from tinyllm_gen.run.serve import make_server

    need("gcc")
    need("cmake")
    out = built(root, "host", context_policy="roll")
    ids = load_model(STORY).tokenizer.encode(PROMPTS[8])
    server = make_server(ModelInfo.load(out, "story"), open_backend(out, None, BACKSTOP_S), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host, port = server.server_address[:2]
        body = json.dumps({"model": "story", "prompt": ids, "max_tokens": N_NEW}).encode()
        req = urllib.request.Request(f"http://{host}:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=BACKSTOP_S) as r:
            x = json.loads(r.read())["x_tinyllm"]
    finally:
        server.shutdown()
        server.server_close()
        server.device.close()
    want = run_firmware(out, ids, N_NEW, SamplingOptions(), timeout_s=BACKSTOP_S).output
    assert x["generated_ids"] == want.generated_ids and x["context_shifts"] == want.shifts >= 3, x["context_shifts"]
    err = io.StringIO()
    _report(err, "summary", Generation(ids, want.generated_ids, [], [1, 1], "max_tokens", 1, "instructions",
                                       shifts=want.shifts), [], "instructions", False)
    assert f"the context rolled {want.shifts} times" in err.getvalue(), err.getvalue()
