"""A vocabulary too large for the STM32H750's 128 KiB internal flash goes into
the weights blob in QSPI (codegen/vocab.py) instead of overflowing the
FLASH region at link time (SmolLM2's 49,152 tokens are 530 KB).  The
firmware under Unicorn prints each token's bytes from there, and its tokens
are the reference's."""
import json

import pytest

from firmware_harness import GREEDY, N_NEW, need
from tinyllm_gen.board import load_board
from tinyllm_gen.build.cmake import build
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.vocab import CODE_RESERVE_BYTES, Vocabulary, vocab_in_weights
from tinymodels import make_hf_model
from bounds import BACKSTOP_S

pytestmark = pytest.mark.emu
VOCAB = 6000


def long_piece_tokenizer(model_dir, vocab_size):
    """A byte-level BPE tokenizer.json whose pieces are long (24 bytes), so
    the table is ~170 KB: the 256 byte symbols, then whole words, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<s>": 0, "</s>": 1}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    i = 0
    while len(vocab) < vocab_size:
        vocab[f"\u0120word{i:06d}abcdefghijklmn"] = len(vocab)
        i += 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(model_dir / "tokenizer.json"))


def test_placement_rule():
    board = load_board("weact-h750")
    small = Vocabulary((b"ab",) * 512)
    code = next(r for r in board.memory.regions if r.use == "code" and r.kind == "flash")
    big = Vocabulary((b"x" * 20,) * ((code.size - CODE_RESERVE_BYTES) // 24 + 1))
    assert not vocab_in_weights(board, small) and vocab_in_weights(board, big)
    assert not vocab_in_weights(load_board("qemu-mps2-an500"), big)  # 4 MiB of code memory
    assert not vocab_in_weights(load_board("host"), big)  # linked into the executable


def test_large_vocabulary_runs_from_qspi_under_unicorn(tmp_path):
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    model_dir = make_hf_model(tmp_path / "model", vocab=VOCAB, dim=64, hidden=96, layers=2, heads=4, kv_heads=2,
                              context=64, eos=None, seed=21)
    long_piece_tokenizer(model_dir, VOCAB)
    out = tmp_path / "out"
    compiled = compile_path(model_dir, CompileOptions(board="weact-h750", max_seq=64))
    assert any(e.name == "vocab" for e in compiled.program.blob.entries)
    write_tree(compiled.tree, out)
    res = build(out)
    assert res.size["flash_bytes"] < 128 * 1024  # would be ~190 KB with the table in .rodata
    m = load_model(model_dir)
    ids = m.tokenizer.encode("word000001abcdefghijklmn word000002abcdefghijklmn")
    fw = run_firmware(out, ids, 12, GREEDY, timeout_s=BACKSTOP_S)
    qg = quantize(m, CompileOptions(board="weact-h750", max_seq=64), load_board("weact-h750"))
    ref = generate(Executor(m.graph, QuantKernels(qg, 64)), ids, 12, 64, (), GREEDY).generated_ids
    assert fw.output.generated_ids == ref
    assert fw.output.token_texts == [m.tokenizer.token_bytes(t) for t in ref]
    assert json.loads((out / "manifest.json").read_text())["board"] == "weact-h750"
    assert N_NEW >= 12
