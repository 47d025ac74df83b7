"""The pieces behind serve and chat that need no device: the chat template
(a tokenizer's Jinja template, or the plain rendering), where OUT's template
is found, the text stream's UTF-8 and stop-string handling, and the console
line CRC and token-line parsing the streaming rests on."""
import json
import zlib

import pytest

from tinyllm_gen.run.backends import TextStream, find_chat_template, message_text, render_chat
from tinyllm_gen.run.protocol import check_line, parse_done, parse_output, parse_token_line

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_chatml_template():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render_chat(msgs, CHATML) == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                                         "<|im_start|>assistant\n")


def test_plain_rendering_and_content_parts():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "More"}]
    assert render_chat(msgs, None) == "User: Hello there\nAssistant: Hi.\nUser: More\nAssistant:"
    with pytest.raises(ValueError):
        message_text([{"type": "image_url", "image_url": "x"}])


def test_template_errors_are_value_errors():
    with pytest.raises(ValueError, match="refused"):
        render_chat([{"role": "user", "content": "x"}], "{{ raise_exception('no system role') }}")


def test_template_is_sandboxed():
    with pytest.raises(Exception):
        render_chat([{"role": "user", "content": "x"}], "{{ ''.__class__.__mro__[1].__subclasses__() }}")


def test_find_chat_template(tmp_path):
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "tokenizer.json").write_text("{}")
    manifest = {"tokenizer": {"file": "tokenizer/tokenizer.json"}}
    assert find_chat_template(tmp_path, manifest) is None
    (tmp_path / "tokenizer" / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    assert find_chat_template(tmp_path, manifest) == CHATML
    given = {"tokenizer": {"file": "tokenizer/tokenizer.json", "chat_template": "{{ messages }}"}}
    assert find_chat_template(tmp_path, given) == "{{ messages }}"


def test_text_stream_holds_back_a_possible_stop_and_whole_utf8():
    s = TextStream(["\nUser:"])
    assert s.feed(b"Hello") == "Hello"
    assert s.feed(b"\nUs") == ""  # could be the stop string
    assert s.feed(b"ually") == "\nUsually"
    assert s.feed("\u00e9".encode()[:1]) == ""  # half a character
    assert s.feed("\u00e9".encode()[1:]) == "\u00e9"
    assert s.feed(b" ok\nUser: next") == " ok"
    assert s.stopped and s.feed(b"more") == ""
    assert s.text == "Hello\nUsually\u00e9 ok"


def with_crc(line: str) -> str:
    return f"{line} crc={zlib.crc32(line.encode()):08x}"


def test_line_crc():
    line = '@TLLM tok 3 17 4560 "a\\x0a"'
    assert check_line(with_crc(line)) == (line, True)
    assert check_line(line) == (line, None)
    bad = with_crc(line).replace("4560", "4561")
    assert check_line(bad)[1] is False
    tok = parse_token_line(with_crc(line))
    assert (tok.index, tok.id, tok.count, tok.text) == (3, 17, 4560, b"a\n")
    assert parse_token_line(bad) is None


def test_parse_output_skips_corrupted_lines():
    lines = [with_crc('@TLLM tok 0 5 100 "x"'), with_crc('@TLLM tok 1 6 100 "y"').replace(" 6 ", " 7 "),
             with_crc("@TLLM end reason=max_tokens n=2 prefill_instructions=9"), with_crc("@TLLM text-begin"),
             "story", with_crc("@TLLM text-end")]
    out = parse_output("\n".join(lines))
    assert out.generated_ids == [5] and out.crc_errors == 1 and out.text == "story"
    assert out.stop_reason == "max_tokens" and out.prefill_instructions == 9


def test_parse_done():
    assert parse_done(with_crc("@TLLM done status=0 req=0000abcd")) == (0, 0xABCD)
    assert parse_done(with_crc("@TLLM done status=3 req=none")) == (3, None)
    assert parse_done(with_crc("@TLLM done status=3 req=none").replace("=3", "=0")) is None


def test_compiled_out_carries_the_models_chat_template(tmp_path):
    from tinyllm_gen.run.backends import ModelInfo, chat_prompt_ids, chat_stops
    from tinyllm_gen.compile import CompileOptions, compile_path, write_tree

    from tinymodels import make_hf_model

    model = make_hf_model(tmp_path / "m", context=64, seed=5)
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    out = tmp_path / "out"
    write_tree(compile_path(model, CompileOptions(board="host")).tree, out)
    info = ModelInfo.load(out)
    assert info.chat_template == CHATML and chat_stops(info) == ()
    msgs = [{"role": "user", "content": "hi"}]
    assert chat_prompt_ids(info, msgs) == info.tokenizer.encode(render_chat(msgs, CHATML))
