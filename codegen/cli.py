"""Command-line wiring only: every command calls one pipeline function."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import __version__
from .abi import GROUP_SIZES
from .errors import UserError, one_line
from .quant.kv import (KV4, KV8, KV_BITS_CHOICES, KV_CENTERS, KV_ROTATIONS, kv_centering, kv_rotation,
                       kv_rotation_note, parse_kv_bits)

GROUP_CHOICES = [str(g) for g in GROUP_SIZES]  # --group-size, stated once (abi.py)
EVAL_KV_DEFAULT = (KV8, KV4)  # eval's comparison without --kv-bits (8:4 when asked for)



def _board_option(f):
    """--board: a click.Choice of the shipped boards (boards/*/board.json), so
    --help lists them and a typo is refused with the list."""
    from .board import board_names

    return click.option("--board", type=click.Choice(board_names()), default="qemu-mps2-an500", show_default=True,
                        help="Target board (boards/<name>/board.json).")(f)


class _CheckedFloat(click.ParamType):
    """A float checked by one of sampler.py's range rules (NaN and
    infinity are refused there, not passed on)."""

    def __init__(self, name: str, problem):
        self.name, self.problem = name, problem

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError, OverflowError):
            self.fail(f"{value!r} is not a number", param, ctx)
        why = self.problem(v)
        if why is not None:
            self.fail(why, param, ctx)
        return v


class _Size(click.ParamType):
    """A byte count: digits with an optional K/M suffix (compile.parse_size)."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        from .compile import parse_size

        try:
            return parse_size(value)
        except UserError as e:
            self.fail(str(e), param, ctx)


class _TextFile(click.Path):
    """A regular UTF-8 text file (calibration and evaluation text)."""

    def __init__(self):
        super().__init__(path_type=Path, exists=True, dir_okay=False)

    def convert(self, value, param, ctx):
        from .errors import read_regular_text

        path = super().convert(value, param, ctx)
        try:
            read_regular_text(path, "text file")
        except UserError as e:
            self.fail(str(e), param, ctx)
        return path


def _sampling_options(f):
    from .reference.sampler import MAX_NEW_TOKENS, temperature_problem, top_p_problem

    f = click.option("--seed", type=click.IntRange(0, 2**64 - 1), default=0, show_default=True,
                     help="RNG seed for sampling.")(f)
    f = click.option("--top-p", type=_CheckedFloat("P", top_p_problem), default=1.0, show_default=True,
                     help="Nucleus sampling threshold in (0, 1] (1 = full distribution).")(f)
    f = click.option("--temperature", type=_CheckedFloat("T", temperature_problem), default=0.0,
                     show_default=True, help="0 = greedy (argmax); otherwise 0.001 to 100.")(f)
    f = click.option("--max-new-tokens", type=click.IntRange(0, MAX_NEW_TOKENS), default=64, show_default=True,
                     help="Generation also stops at the end of the context.")(f)
    f = click.option("--prompt", default="Once upon a time", show_default=True)(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")(f)
    return f


class _MaxSeq(click.ParamType):
    """A positive token count or "auto"."""

    name = "N|auto"

    def convert(self, value, param, ctx):
        if value is None or value == "auto" or isinstance(value, int):
            return value
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            self.fail(f"{value!r} is not a positive integer or 'auto'", param, ctx)
        return n


MAX_SEQ = _MaxSeq()


class _KVBitsType(click.ParamType):
    """--kv-bits through quant/kv.parse_kv_bits: a typed KVBits, or click's one-line refusal naming the choices."""

    name = "|".join(KV_BITS_CHOICES)

    def convert(self, value, param, ctx):
        try:
            return parse_kv_bits(value)
        except UserError:
            self.fail(f"{value!r} is not one of {', '.join(KV_BITS_CHOICES)}", param, ctx)


KV_BITS = _KVBitsType()

_chat_option = click.option(
    "--chat", is_flag=True,
    help="Wrap --prompt as one user turn of the model's ChatML chat template, plus the assistant's start.")


def _prompt_ids(tok, prompt: str, chat: bool) -> list[int]:
    """The prompt's ids: BOS as the model says (add_bos), or its chat template's turn."""
    if chat:
        from .frontends.chat_template import chat_prompt_ids

        return chat_prompt_ids(tok, prompt)
    return tok.encode(prompt)


def _quant_options(f):
    f = click.option("--ram-budget", type=_Size(), default="512K", show_default=True,
                     help="RAM budget (bytes, K or M suffix).")(f)
    f = click.option("--max-seq", type=MAX_SEQ, default=None,
                     help="Context length (default: the model's, or where the board cannot hold it, the longest it can, in "
                          "SDRAM on a board with it under --kv-region auto; auto: the longest that fits).")(f)
    f = click.option("--kv-rotate", type=click.Choice(KV_ROTATIONS), default="auto", show_default=True,
                     help="Hadamard rotation of each head's k and q before the int4 KV cache quantizes them "
                          "(the same scores, far less int4 loss); auto: on for int4 KV where head_dim is a "
                          "power of two. int8 KV is never rotated.")(f)
    f = click.option("--kv-center", type=click.Choice(KV_CENTERS), default="auto", show_default=True,
                     help="Centre the rotated int4 KV cache: store k and v minus their mean over calibration "
                          "text (--calibration, default a built-in sample), the same attention with far less "
                          "int4 loss; auto: wherever the int4 keys are rotated.")(f)
    f = click.option("--kv-bits", type=KV_BITS, default="8", show_default=True,
                     help="KV cache precision: 8 (int8), 4 (group-wise int4), 8:4 (int8 K, group-wise int4 V).")(f)
    f = click.option("--group-size", type=click.Choice(GROUP_CHOICES), default="32", show_default=True,
                     help="INT4 weight group size along the input dimension.")(f)
    f = click.option("--tokenizer", type=click.Path(path_type=Path), default=None,
                     help="tokenizer.bin for llama2.c checkpoints.")(f)
    return f


def _scheme_options(f):
    f = click.option("--weight-quant", type=click.Choice(["auto", "gguf", "rtn", "clip", "awq", "gptq"]), default="auto",
                     show_default=True,
                     help="auto: gguf for a GGUF file with Q4_0/Q4_1/Q8_0 tensors, else rtn. gguf: keep llama.cpp's "
                          "blocks as they are (lossless; other matrices fall back to rtn). INT4 weights: "
                          "round-to-nearest, or calibrated on --calibration text: error-minimising "
                          "clipping (clip), activation-aware scales folded into the norms + clipping (awq), "
                          "second-order rounding with each column's error spread over the rest (gptq); "
                          "give --calibration a few thousand tokens of in-domain text.")(f)
    f = click.option("--calibration", type=_TextFile(), default=None,
                     help="Calibration text for --quant per-channel and --weight-quant clip|awq|gptq (default: a built-in sample).")(f)
    f = click.option("--quant", type=click.Choice(["group", "per-channel"]), default="group", show_default=True,
                     help="group: INT4 group-wise W4A8; per-channel: CMSIS-NN arithmetic (static int8 activations).")(f)
    return f


def _check_sampler(ctx, param, value: str) -> str:
    from .reference.sampler import sampler_problem

    if (why := sampler_problem(value)) is not None:
        raise click.BadParameter(why)
    return value


_sampler_option = click.option(
    "--sampler", default="full", show_default=True, metavar="full|greedy|topk:K", callback=_check_sampler,
    help="greedy: argmax only, streamed through the classifier (no logits vector or sampler scratch in RAM); "
    "requests with a temperature are refused. topk:K (K in 1..1024): the classifier's chunks feed a running set "
    "of the K largest logits (6*K bytes instead of the logits vector and the top-p scratch); a temperature "
    "samples within them, top_p within the K.")


def _compile_options(board, group_size, kv_bits, max_seq, ram_budget, kv_rotate="auto", kv_center="auto"):
    from .compile import CompileOptions, parse_size

    return CompileOptions(board=board, group_size=int(group_size), kv_bits=kv_bits, max_seq=max_seq,
                          ram_budget=parse_size(ram_budget), kv_rotate=kv_rotate, kv_center=kv_center)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tinyllm-gen")
def cli():
    """Compile small decoder-only language models into Cortex-M7 firmware whose
    tokens are bit-identical to tinyllm-gen's own reference."""


@cli.command()
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--tokenizer", type=click.Path(path_type=Path), default=None)
@click.option("--json", "as_json", is_flag=True)
def inspect(model, tokenizer, as_json):
    """Architecture, parameter count and weight bytes at each precision."""
    from .frontends import load_model
    from .describe import describe, describe_text

    info = describe(load_model(model, tokenizer))
    click.echo(json.dumps(info, indent=2) if as_json else describe_text(info))


_stream_option = click.option(
    "--stream", type=click.Choice(["off", "all", "auto"]), default="auto", show_default=True,
    help="Weight streaming (DWUP, every tiled matrix: q4x4 and llama.cpp's blocks in tiles): all = every matrix "
         "through two stream buffers; auto = on boards whose weights sit in external flash, pin what fits in the "
         "SRAM the plan leaves (copied once at boot) and stream the rest; elsewhere (weights linked in) off.")
_stream_chunk_option = click.option(
    "--stream-chunk", default=None, help="Bytes per stream chunk, e.g. 4K (default: the smallest within 0.5% of the timing model's best "
         "tokens/s on a QUADSPI board, 16K elsewhere; less when SRAM is short).")
_prefill_option = click.option(
    "--prefill-batch", default="auto", show_default=True,
    help="Prompt tokens per pass over the weights, 1..4 (batched prefill: each weight tile is read and unpacked "
         "once for them); auto = the largest whose activations fit beside the context (with --max-seq auto: "
         "the largest that keeps 90% of the context a batch of 1 gets).")


_speculate_option = click.option(
    "--speculate", default="off", show_default=True, metavar="off|auto|lookup[:k]|draft:MODEL[:k]",
    help="Speculative decoding: per pass over the weights, the model verifies up to k guessed tokens with the last "
         "one (P = k + 1 positions through every weight together, on the batched prefill's buffers) and keeps the "
         "ones it would have produced; greedy output is plain decoding's, sampling keeps its distribution. lookup: "
         "the guesses come from the context itself (prompt lookup: no weights), k by the timing model unless given "
         "(1..3, below --prefill-batch); auto: lookup where the timing model predicts more decode tokens/s on the "
         "board (flash-bound boards) and the plan fits beside the context, off elsewhere; draft:MODEL[:k] (a "
         "smaller model with the target's vocabulary, or a compress --prune-vocab student of it) is built into the "
         "same tree (greedy and sampled requests), k by the timing model unless "
         "given, at the pair's acceptance measured at compile time; --max-seq auto: the largest context at which "
         "both fit. See docs/speculative.md.")
_draft_option = click.option(
    "--draft", type=click.Path(path_type=Path), default=None, metavar="MODEL",
    help="Speculative decoding with this draft model: the same as --speculate draft:MODEL (k by the timing model).")


def _speculate_value(speculate: str, draft: Path | None) -> str:
    """--speculate, or draft:MODEL for --draft MODEL (refused in one line beside another --speculate)."""
    if draft is None:
        return speculate
    if speculate != "off":
        raise UserError(f"--draft {draft} and --speculate {speculate} both choose the draft: give one "
                        "(--speculate draft:MODEL:k to choose k as well)")
    return f"draft:{draft}"


_context_policy_option = click.option(
    "--context-policy", default="stop", show_default=True, metavar="stop|roll[:sinks]",
    help="When the KV cache is full: stop (reason context), or roll: keep the first sinks positions (default 4) "
         "and the most recent ones, dropping half of the rest and moving the cache down (keys re-rotated), so "
         "generation goes on past max_seq. The prompt must still fit the context. See docs/rolling-context.md.")


_kv_region_option = click.option(
    "--kv-region", type=click.Choice(["auto", "sram", "sdram"]), default="auto", show_default=True,
    help="Where the KV cache goes: sram (the --ram-budget plan); sdram: the board's external SDRAM (the "
         "STM32H750B-DK's 8 MB FMC SDRAM), outside the budget, for a longer context; auto: SRAM when the "
         "context asked for fits there, else SDRAM (without --max-seq, a model whose context fits nowhere gets "
         "the longest the SDRAM holds). Boards without SDRAM: SRAM. The report says where it went.")


_classifier_option = click.option(
    "--classifier-quant", type=click.Choice(["keep", "q4"]), default="keep", show_default=True,
    help="A GGUF's kept classifier (SmolLM2: its tied Q8_0 embedding, 31% of the bytes a token reads): keep its "
         "blocks (lossless), or q4: re-round it to Q4_0 blocks with scales calibrated on --calibration text "
         "(half its bytes; `eval --classifier-quant q4` measures the cost).")


_kernels_option = click.option(
    "--kernels", type=click.Choice(["auto", "portable", "cortex-m7"]), default="auto", show_default=True,
    help="Kernel set and weight layout (auto: the board's; cortex-m7 builds its C twin off-target).")


@cli.command("compile")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Output directory.")
@_board_option
@_kernels_option
@_quant_options
@_scheme_options
@_sampler_option
@_stream_option
@_stream_chunk_option
@_prefill_option
@_speculate_option
@_draft_option
@click.option("--unroll-layers", is_flag=True,
              help="Print every layer's kernel calls in tllm_model_step instead of one loop over the layer table.")
@_classifier_option
@_kv_region_option
@_context_policy_option
@click.option("--symbol-prefix", default="tllm_model_", show_default=True, metavar="tllm_NAME_",
              help="The prefix of the model's C symbols (tllm_model_step -> tllm_NAME_step, its arenas, weights "
                   "blob and vocabulary too), so that two models link into one image (a speculative draft "
                   "beside its target). A tree with another prefix is a library for tinyllm_add_model; its "
                   "console firmware is not built.")
def compile_cmd(model, out, board, kernels, tokenizer, group_size, kv_bits, kv_rotate, kv_center, max_seq, ram_budget,
                quant,
                calibration, weight_quant, sampler, stream, stream_chunk, prefill_batch, speculate, draft, unroll_layers,
                classifier_quant, kv_region, context_policy, symbol_prefix):
    """Quantize, plan and emit a firmware source tree into OUT."""
    from dataclasses import replace

    from .compile import check_out_dir, compile_path, parse_size, write_tree
    from .context import parse_context_policy
    from .kernels.c_names import check_symbol_prefix
    from .lower.prefill import parse_batch
    from .compile_draft import compile_draft_path
    from .lower.speculate import parse_draft, parse_speculate

    check_out_dir(out)  # a bad -o costs nothing to find out: before the work
    speculate = _speculate_value(speculate, draft)
    parse_speculate(speculate)
    parse_context_policy(context_policy)
    check_symbol_prefix(symbol_prefix)
    opts = replace(_compile_options(board, group_size, kv_bits, max_seq, ram_budget, kv_rotate, kv_center),
                   kernels=kernels, quant=quant,
                   calibration=calibration, weight_quant=weight_quant, sampler=sampler, stream=stream,
                   stream_chunk=parse_size(stream_chunk) if stream_chunk else None, unroll_layers=unroll_layers,
                   prefill_batch=parse_batch(prefill_batch), speculate=speculate, classifier_quant=classifier_quant,
                   kv_region=kv_region, context_policy=context_policy, symbol_prefix=symbol_prefix)
    compiled = (compile_draft_path if parse_draft(speculate) else compile_path)(model, opts, tokenizer)
    write_tree(compiled.tree, out)
    p, d = compiled.plan, compiled.draft
    ram = (f"RAM {p.total_bytes:,} of {p.budget_bytes:,} B" if d is None else  # the draft's arenas share the budget
           f"RAM {p.total_bytes + d['ram_bytes']:,} of {d['budget_bytes']:,} B with the draft's")
    click.echo(f"wrote {out}: {len(compiled.tree.files)} files, weights {len(compiled.program.blob.data):,} B, "
               f"{ram} (arena {p.arena_bytes:,} B, "
               f"lower bound {p.lower_bound_bytes:,} B), max_seq {p.max_seq}, "
               f"prefill {compiled.program.prefill_batch} prompt tokens per pass over the weights")
    if p.external_bytes:
        click.echo(f"KV cache {p.kv_cache_bytes:,} B in {', '.join(p.kv_cache_regions)} (outside the RAM budget)")
    if compiled.trade_off:
        click.echo(compiled.trade_off)
    if kv_rotation_note(kv_rotate, kv_bits, compiled.model.graph.config.head_dim):
        click.echo(kv_rotation_note(kv_rotate, kv_bits, compiled.model.graph.config.head_dim))
    if compiled.speculate_note:
        click.echo(compiled.speculate_note)
    if d is not None:
        from .emit.draft_tree import draft_text

        click.echo(draft_text(d, p.total_bytes), nl=False)
    if compiled.program.stream is not None:
        from .emit.stream_tables import schedule_json, schedule_text

        click.echo(schedule_text(schedule_json(compiled.program)).splitlines()[0])


@cli.command()
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--cmsis-nn", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              envvar="CMSIS_NN_ROOT", help="CMSIS-NN checkout: --quant per-channel layers then call it "
              "(default: $CMSIS_NN_ROOT).")
def build(out, cmsis_nn):
    """Build OUT with CMake (arm-none-eabi-gcc, or host gcc for --board host)."""
    from .build.cmake import build as do_build

    res = do_build(out, cmsis_nn)
    msg = f"built {res.image}"
    if res.size:
        s = res.size
        msg += f" (text {s['text']:,} B, data {s['data']:,} B, bss {s['bss']:,} B)"
    click.echo(msg)


@cli.command("flash")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print the openocd command instead of running it.")
@click.option("--openocd", default="openocd", show_default=True, help="The openocd program to run.")
def flash_cmd(out, dry_run, openocd):
    """Flash OUT onto its STM32H750 board with openocd: the firmware to internal flash, the weights to
    QUADSPI. Then `tinyllm-gen run OUT --serial PORT`."""
    import shlex

    from .run.flash_board import flash

    cmd = flash(out, dry_run=dry_run, openocd=openocd)
    click.echo(shlex.join(cmd) if dry_run else f"flashed {out} ({len(cmd)} openocd arguments)")


@cli.command()
@click.argument("out", type=click.Path(path_type=Path))
@_sampling_options
@click.option("--timeout", type=_CheckedFloat("SECONDS", lambda t: None if 0 < t <= 1e6 else f"{t!r} is not in (0, 1e6]"),
              default=3600, show_default=True,
              help="Wall-clock seconds before the run is stopped: a backstop (an emulated run is bounded by guest "
                   "instructions, report.json's instruction_bound).")
@click.option("--transport", type=click.Choice(["memory", "uart"]), default="memory", show_default=True,
              help="How the request reaches the firmware: placed in memory, or sent over the console UART "
              "(as to a real board).")
@click.option("--serial", "serial_url", default=None,
              help="A flashed board's serial port (/dev/ttyACM0, or a pyserial URL such as socket://host:port).")
@_chat_option
@click.option("--emulator", type=click.Choice(["auto", "renode"]), default="auto", show_default=True,
              help="auto: the board's runner (host, QEMU, Unicorn); renode: an STM32H750 build under Renode "
              "(`renode` or `renode-run` on PATH).")
@click.option("--check", "check", is_flag=True,
              help="Also run the reference (rebuilt from OUT's weights blob) on the same request: exit 1 with one "
                   "line at the first token that differs.")
@click.option("--renode-check", is_flag=True,
              help="STM32H750 builds: add this request and the tokens it gave to OUT/renode/tllm.robot, so "
              "`renode-test` checks that Renode gives the same.")
def run(out, prompt, max_new_tokens, temperature, top_p, seed, as_json, timeout, transport, serial_url, chat, emulator,
        check, renode_check):
    """Run the built firmware on a prompt: host build, QEMU (mps2-an500), Unicorn (STM32H750 boards), or a
    flashed board (--serial)."""
    from .build.out import load_out_tokenizer, read_manifest
    from .run.firmware import run_firmware
    from .reference.sampler import SamplingOptions

    tok = load_out_tokenizer(out, read_manifest(out))
    if renode_check:
        from .board import load_board
        from .families.stm32h750.renode import renode_board

        renode_board(load_board(read_manifest(out)["board"]))  # an STM32H750 build, before running
    ids = _prompt_ids(tok, prompt, chat)
    fw = run_firmware(out, ids, max_new_tokens, SamplingOptions(temperature, top_p, seed), timeout_s=timeout,
                      transport=transport, serial_url=serial_url, emulator=emulator)
    o = fw.output
    if renode_check:
        from .run.renode import write_check

        runner = "a board" if serial_url else "Renode" if emulator == "renode" else fw.result.command[0]
        robot = write_check(out, ids, max_new_tokens, SamplingOptions(temperature, top_p, seed), o.generated_ids,
                            o.stop_reason or "max_tokens", source=f"what {runner} gave (`tinyllm-gen run`)")
        click.echo(f"wrote {robot}: `renode-test {robot}` checks Renode gives these {len(o.generated_ids)} tokens",
                   err=True)
    if as_json:
        click.echo(json.dumps({
            "prompt": prompt, "prompt_ids": ids, "generated_ids": o.generated_ids,
            "text": tok.decode(o.generated_ids), "firmware_text": o.text, "stop_reason": o.stop_reason,
            "instructions_per_token": o.instructions_per_token, "prefill_instructions": o.prefill_instructions,
            "canary_ok": o.canary_ok, "passes": o.passes, "tokens_per_pass": o.tokens_per_pass,
            "pass_tokens": o.pass_tokens, "pass_positions": o.pass_positions, "context_shifts": o.shifts,
        }))
    else:
        click.echo(o.text)
        if o.instructions_per_token and any(o.instructions_per_token):
            per = sorted(o.instructions_per_token)
            unit = "cycles" if serial_url else "instructions"  # a board's DWT counts cycles
            where = "; emulated by Unicorn" if fw.result.command[:1] == ["unicorn"] else ""
            spec = (f", {o.passes} passes over the weights ({o.tokens_per_pass:.2f} tokens per pass)"
                    if o.passes and o.passes != len(per) else "")
            rolled = f", {o.shifts} context shifts" if o.shifts else ""
            click.echo(f"[{len(per)} tokens, {o.stop_reason}; median {per[len(per) // 2]:,} {unit}/token, "
                       f"prefill {o.prefill_instructions:,}{spec}{rolled}{where}]", err=True)
    if check:
        from .run.check import check_tokens

        diff = check_tokens(out, tok, ids, max_new_tokens, SamplingOptions(temperature, top_p, seed), o.generated_ids)
        if diff is not None:
            click.echo(diff, err=True)
            sys.exit(1)
        click.echo(f"--check: the {len(o.generated_ids)} tokens are the reference's", err=True)


@cli.command()
@click.argument("model", type=click.Path(path_type=Path))
@_sampling_options
@_quant_options
@_scheme_options
@click.option("--fp32", is_flag=True, help="Run the float model instead of the quantized one.")
@_chat_option
@_sampler_option
@click.option("--speculate", default="off", show_default=True, metavar="off|lookup[:k]|draft:MODEL[:k]",
              help="Speculative decoding as a build compiled with it runs (reference/speculative.py): lookup:k "
                   "guesses per pass (lookup alone: k as compile picks it for the default board); draft:MODEL[:k]: "
                   "k steps of a draft model per pass (its vocabulary the target's, or a compress --prune-vocab "
                   "student's; quantized with the same options; k as compile picks it for the default board "
                   "unless given); give the manifest's options.speculate to reproduce a build's sampled tokens.")
@_context_policy_option
def reference(model, prompt, max_new_tokens, temperature, top_p, seed, as_json, tokenizer, group_size,
              kv_bits, kv_rotate, kv_center, max_seq, ram_budget, quant, calibration, weight_quant, fp32, chat, sampler,
              speculate,
              context_policy):
    """Run tinyllm-gen's numpy reference (what the firmware computes, exactly)."""
    from dataclasses import replace

    from .compile import (CompileOptions, context_for, load_draft, parse_size, quantize, require_tokenizer,
                          speculate_k_for)
    from .frontends import load_model
    from .lower.speculate import parse_draft, parse_speculate
    from .reference.executor import Executor, FloatKernels, QuantKernels
    from .reference.sampler import SamplingOptions, top_k_of
    from .reference.speculative import generate_speculative

    from .context import context_roll, parse_context_policy

    draft_model = parse_draft(speculate, default=None)  # no k: compile's choice, below
    draft, k = ("draft", draft_model[1]) if draft_model else parse_speculate(speculate)
    parse_context_policy(context_policy)
    if draft == "auto":
        raise UserError("--speculate auto is compile's choice per board: give the reference off or lookup[:k] "
                        "(a build's manifest names it in options.speculate)")
    m = load_model(model, tokenizer)
    tok = require_tokenizer(m)
    if sampler == "greedy" and temperature > 0:
        raise UserError("--sampler greedy decodes greedily only: pass --temperature 0")
    opts = CompileOptions(group_size=int(group_size), kv_bits=kv_bits, max_seq=max_seq, quant=quant,
                          calibration=calibration, weight_quant=weight_quant, kv_rotate=kv_rotate, kv_center=kv_center)
    seq = context_for(m, opts, parse_size(ram_budget))  # --max-seq auto: the context compile would pick
    ids = _prompt_ids(tok, prompt, chat)
    if len(ids) >= seq:
        raise UserError(f"the prompt is {len(ids)} tokens but the context is {seq}: shorten the prompt "
                        "or raise --max-seq")
    qg = quantize(m, opts, max_seq=seq)  # a centred cache's centres are those of the context
    if draft == "lookup" and k is None:
        k = speculate_k_for(qg, opts, sampler, parse_size(ram_budget))
    elif draft_model and k is None:  # the k compile picks for the pair on the default board, as for lookup
        from .compile_draft import plan_with_draft

        doc, _ = plan_with_draft(model, tokenizer, replace(opts, max_seq=seq, ram_budget=parse_size(ram_budget)),
                                 sampler, quant, "auto", None, "auto", False, speculate, target=m)
        k = doc["draft"]["k"]
    kernels = FloatKernels(m.graph, seq) if fp32 else QuantKernels(qg, seq)
    roll = context_roll(context_policy, seq)
    drafter = load_draft(Path(draft_model[0]), m, model, opts, seq, fp32) if draft_model else None
    gen = generate_speculative(Executor(m.graph, kernels), ids, max_new_tokens, seq, m.graph.config.eos_ids,
                               SamplingOptions(temperature, top_p, seed), top_k=top_k_of(sampler),
                               k=k if draft != "off" else 0, roll=roll, draft=drafter)
    text = tok.decode(gen.generated_ids)
    if as_json:
        click.echo(json.dumps({"prompt": prompt, "prompt_ids": ids, "generated_ids": gen.generated_ids,
                               "text": text, "stop_reason": gen.stop_reason, "passes": gen.passes,
                               "tokens_per_pass": gen.tokens_per_pass, "pass_tokens": gen.pass_tokens,
                               "pass_positions": list(gen.pass_positions), "context_shifts": gen.shifts,
                               "guessed": gen.guessed, "accepted": gen.accepted, "draft_steps": gen.draft_steps}))
    else:
        click.echo(text if chat else prompt + text)


@cli.command("plan")
@click.argument("model", type=click.Path(path_type=Path))
@_board_option
@_quant_options
@_sampler_option
@click.option("--quant", type=click.Choice(["group", "per-channel"]), default="group", show_default=True,
              help="The scheme to plan for (per-channel: static int8 scratch instead of the int4 streams).")
@_stream_option
@_stream_chunk_option
@_prefill_option
@_speculate_option
@_draft_option
@click.option("--unroll-layers", is_flag=True, help="Plan the code flash of compile --unroll-layers.")
@_kernels_option
@click.option("--weight-quant", type=click.Choice(["auto", "gguf", "rtn", "clip", "awq", "gptq"]), default="auto",
              show_default=True, help="As compile's: gguf keeps a GGUF's blocks (their layouts), the others re-round.")
@_classifier_option
@_kv_region_option
@_context_policy_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def plan_cmd(model, board, tokenizer, group_size, kv_bits, kv_rotate, kv_center, max_seq, ram_budget, sampler, quant,
             stream,
             stream_chunk, prefill_batch, speculate, draft, unroll_layers, kernels, weight_quant, classifier_quant,
             kv_region, context_policy, as_json):
    """Plan memory for MODEL on BOARD without compiling: exit 0 when it fits,
    2 with one line saying what does not fit and what would."""
    from dataclasses import replace

    from .compile import parse_size, plan_model
    from .compile_draft import plan_with_draft
    from .lower.prefill import parse_batch
    from .lower.speculate import parse_draft

    speculate = _speculate_value(speculate, draft)
    opts = replace(_compile_options(board, group_size, kv_bits, max_seq, ram_budget, kv_rotate, kv_center),
                   kernels=kernels, weight_quant=weight_quant, classifier_quant=classifier_quant, kv_region=kv_region,
                   context_policy=context_policy)
    planner = plan_with_draft if parse_draft(speculate) else plan_model
    doc, text = planner(model, tokenizer, opts, sampler, quant, stream, parse_size(stream_chunk) if stream_chunk else None,
                        parse_batch(prefill_batch), unroll_layers, speculate)
    click.echo(json.dumps(doc, indent=2, sort_keys=True) if as_json else text, nl=as_json)


@cli.command()
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def report(out, as_json):
    """The memory report of a compiled (and, if built, sized) OUT."""
    from .build.out import read_manifest
    from .plan.report import summary_text

    from .errors import read_json

    read_manifest(out)
    plan_doc = read_json(Path(out) / "report.json", "report.json")
    size_file = Path(out) / "build" / "size.json"
    size = read_json(size_file, "size.json") if size_file.exists() else None
    from .timing import predicted_text, traffic_text

    try:
        if not isinstance(plan_doc, dict) or not isinstance(size, (dict, type(None))):
            raise TypeError("not a JSON object")
        pred = plan_doc["predicted"]  # the build's own layouts and bytes, priced at compile (plan/traffic.py)
        if as_json:
            text = json.dumps({"plan": {k: v for k, v in plan_doc.items()
                                        if k not in ("buffers", "stream_schedule", "predicted")},
                               "stream_schedule": plan_doc.get("stream_schedule"), "elf_size": size,
                               "predicted": pred})
        else:
            text = (summary_text(plan_doc, size) + "\n" + traffic_text(plan_doc["traffic"])
                    + predicted_text(pred))
            if "prefill" in plan_doc:
                pre = plan_doc["prefill"]
                text += (f"prefill: {pre['batch']} prompt tokens per pass over the weights "
                         f"({pre['batched_bytes']:,} B of P-token buffers): {pre['why']}\n")
            if "speculate" in plan_doc:
                from .timing import speculate_text

                text += speculate_text(plan_doc["speculate"])
            if "draft" in plan_doc:
                from .emit.draft_tree import draft_text

                text += draft_text(plan_doc["draft"], plan_doc["total_sram_bytes"])
            if "stream_schedule" in plan_doc:
                from .emit.stream_tables import schedule_text

                text = text.rstrip("\n") + "\n" + schedule_text(plan_doc["stream_schedule"])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OSError) as e:
        raise UserError(f"{out}: report.json, build/size.json or src/tllm_model.h is not what tinyllm-gen wrote "
                        f"({type(e).__name__}: {e}); recompile with `tinyllm-gen compile MODEL -o {out}`") from None
    click.echo(text.rstrip("\n"))


@cli.command()
@click.argument("out", type=click.Path(path_type=Path), required=False)
@click.option("--shape", type=click.Choice(["stories260k"]), default="stories260k", show_default=True,
              help="Without OUT: benchmark a random-weight model of this shape.")
@click.option("--group-size", type=click.Choice(GROUP_CHOICES), default="32", show_default=True,
              help="Without OUT: the group size to compile with.")
@click.option("--position", type=click.IntRange(1), default=10, show_default=True,
              help="Decode position to measure (the prompt has this many tokens).")
@click.option("--cmsis-nn", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              envvar="CMSIS_NN_ROOT", help="CMSIS-NN checkout: adds its kernels to the table.")
@click.option("--json", "as_json", is_flag=True)
def bench(out, shape, group_size, position, cmsis_nn, as_json):
    """Exact instruction counts under QEMU: per decoded token, per op, per MAC."""
    from .bench.bench import bench_all, format_table, result_json

    result = bench_all(out, shape, int(group_size), position, cmsis_nn)
    if not as_json:
        click.echo(format_table(result))
        return
    from .build.out import read_manifest
    from .errors import read_json
    from .timing import SHAPES, measured_workload, predicted, predicted_for

    doc = json.loads(result_json(result))
    if out is None:
        doc["predicted"] = predicted(SHAPES[shape], int(group_size), bench=doc)
    else:
        manifest = read_manifest(out)
        report_doc = read_json(Path(out) / "report.json", "report.json")
        measured = measured_workload(report_doc["traffic"], doc)
        doc["predicted"] = predicted_for(measured, None, int(manifest.get("prefill_batch", 1)),
                                         manifest["options"].get("stream_chunk"))
        if "speculate" in report_doc:
            doc["speculate"] = _bench_speculation(manifest, report_doc["speculate"], measured)
    click.echo(json.dumps(doc, indent=2))


def _bench_speculation(manifest: dict, spec: dict, measured) -> dict:
    """A speculative tree's decode tokens/s with and without its verification pass, as report.json's
    "speculate" predicts them, but from the decode step bench counted: prompt lookup's measured acceptance
    (timing.LOOKUP_ACCEPTANCE) on the tree's board and mode.  A draft model's own step is not run by bench:
    its tree keeps compile's prediction, said so."""
    from .board import load_board
    from .timing import LOOKUP_ACCEPTANCE, speculative_prediction

    pred = spec["predicted"]
    if spec.get("draft") == "model":
        return dict(pred, counted="compile's prediction (report.json): bench counts the target's decode step, "
                                  "not the draft model's")
    chunk = manifest["options"].get("stream_chunk")
    return dict(speculative_prediction(load_board(manifest["board"]), measured, LOOKUP_ACCEPTANCE, int(spec["k"]),
                                       pred["mode"], **({"chunk_bytes": int(chunk)} if chunk else {})),
                counted="bench's decode step, the verification pass priced from it")


@cli.command("eval")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--data", type=_TextFile(), required=True,
              help="Held-out text; documents separated by blank lines, each scored from BOS.")
@click.option("--max-tokens", type=click.IntRange(0), default=20000, show_default=True,
              help="Score whole documents up to this many tokens (0: all of --data).")
@click.option("--weight-quant", "weight_quants", multiple=True, type=click.Choice(["gguf", "rtn", "clip", "awq", "gptq"]),
              help="Weight methods to compare (repeatable; default: gguf for a GGUF file with Q4_0/Q4_1/Q8_0 "
                   "tensors, its blocks kept as they are (group 32 only), else rtn).")
@click.option("--group-size", "group_sizes", multiple=True, type=click.Choice(GROUP_CHOICES),
              help="Group sizes (repeatable; default: 32, 64, 128).")
@click.option("--kv-bits", "kv_bits", multiple=True, type=KV_BITS,
              help="KV cache precisions: 8, 4, 8:4 (repeatable; default: 8, 4).")
@click.option("--kv-rotate", "kv_rotates", multiple=True, type=click.Choice(KV_ROTATIONS),
              help="Rotations of the int4 KV cache to compare (repeatable; default: auto, Hadamard where "
                   "head_dim is a power of two; int8 KV is never rotated).")
@click.option("--kv-center", "kv_centers", multiple=True, type=click.Choice(KV_CENTERS),
              help="Centring of the rotated int4 KV cache to compare (repeatable; default: auto, centred wherever "
                   "the int4 keys are rotated, on --calibration or the built-in sample).")
@click.option("--max-seq", "eval_max_seq", type=click.IntRange(2), default=None,
              help="Cut each document at this many tokens, a build's context (default: the model's).")
@click.option("--calibration", type=_TextFile(), default=None,
              help="Calibration text for clip/awq (default: a built-in sample); keep it apart from --data.")
@click.option("--classifier-quant", "classifier_quants", multiple=True, type=click.Choice(["keep", "q4"]),
              help="With gguf: the kept classifier as it is, or re-rounded to Q4_0 (repeatable; default: keep).")
@click.option("--tokenizer", type=click.Path(path_type=Path), default=None,
              help="tokenizer.bin for llama2.c checkpoints.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def eval_cmd(model, data, max_tokens, weight_quants, group_sizes, kv_bits, kv_rotates, kv_centers, eval_max_seq,
             calibration,
             classifier_quants, tokenizer, as_json):
    """Perplexity and top-1 agreement: float vs the quantized reference (the firmware's exact logits)."""
    from .compress.eval import (QuantConfig, encode_documents, evaluate, format_table, make_quantizer,
                                read_documents)
    from .frontends import load_model
    from .verify import verify_graph

    m = load_model(model, tokenizer)
    verify_graph(m.graph)
    docs = encode_documents(m, read_documents(data), max_tokens or None, eval_max_seq)
    from .compile import resolve_weight_quant

    methods = weight_quants or (resolve_weight_quant(m, "auto"),)
    for w in methods:
        resolve_weight_quant(m, w)  # gguf on a non-GGUF model: a one-line error
    hd = m.graph.config.head_dim
    kvs = kv_bits or EVAL_KV_DEFAULT
    rotations = {(k, r): kv_rotation(r, k, hd) for k in kvs
                 for r in (kv_rotates or ("auto",)) if k == 4 or r != "hadamard"}  # int8 keys: never rotated
    for (k, r) in rotations:
        if kv_rotation_note(r, k, hd):
            click.echo(kv_rotation_note(r, k, hd), err=True)
    configs = list(dict.fromkeys(
        QuantConfig(w, int(g), k, c, rotations[(k, r)], kv_centering(ctr, k, rotations[(k, r)])) for w in methods
        for g in (group_sizes or GROUP_CHOICES) for k in kvs for r in (kv_rotates or ("auto",))
        if (k, r) in rotations for ctr in (kv_centers or ("auto",))
        if ctr != "calibrated" or rotations[(k, r)] == "hadamard"
        for c in ((classifier_quants or ("keep",)) if w == "gguf" else ("keep",))
        if w != "gguf" or g == "32"))  # llama.cpp's blocks are 32 weights
    if not configs:
        raise UserError("--weight-quant gguf keeps llama.cpp's 32-weight blocks: add --group-size 32")
    total = sum(len(d) - 1 for d in docs) * (1 + len(configs))
    with click.progressbar(length=total, label="scoring", file=sys.stderr) as bar:
        result = evaluate(m, docs, configs, make_quantizer(m, calibration, eval_max_seq), progress=bar.update)
    click.echo(json.dumps(result, indent=2) if as_json else format_table(result))


@cli.command("compress")
@click.argument("teacher", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True,
              help="Output model directory (Hugging Face format; work files go to OUT.work/).")
@click.option("--data", type=_TextFile(), required=True,
              help="Training text for calibration and distillation; documents separated by blank lines.")
@click.option("--eval-data", type=_TextFile(), default=None,
              help="Held-out text for the table (default: the last 10% of --data, then not trained on).")
@click.option("--prune-heads", type=float, default=0.5, show_default=True,
              help="Fraction of KV head groups (with their query heads) removed per layer.")
@click.option("--prune-ffn", type=float, default=0.5, show_default=True,
              help="Fraction of FFN channels removed per layer.")
@click.option("--prune-hidden", type=float, default=0.0, show_default=True,
              help="Fraction of the residual width (hidden_size) removed, the same channels in every layer.")
@click.option("--prune-layers", type=float, default=0.0, show_default=True,
              help="Fraction of the transformer blocks removed, least important first (calibration loss "
                   "increase when the block is skipped).")
@click.option("--prune-vocab", type=click.IntRange(0), default=0, show_default=True,
              help="Vocabulary size to keep (0 = unchanged): the specials, every byte-level base token, then "
                   "the tokens --prune-vocab-data uses, most frequent first, with the merges that build them. "
                   "Any text still encodes. A size above what the text uses keeps exactly what it uses.")
@click.option("--prune-vocab-data", type=_TextFile(), default=None,
              help="Text the kept tokens are counted on (default: --data, the distillation text).")
@click.option("--teacher-top-k", type=click.IntRange(0), default=0, show_default=True,
              help="Distil from the teacher's top-K logits (plus the rest mass), computed once over --data and "
                   "cached in OUT.work/teacher-cache (resumable); 0 runs the teacher at every step.")
@click.option("--calibration-docs", type=click.IntRange(1), default=32, show_default=True,
              help="Documents of --data each pruning importance forward runs on (one forward per block and "
                   "per KV group: fewer for a large teacher).")
@click.option("--distill-steps", type=click.IntRange(0), default=200, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=16, show_default=True)
@click.option("--lr", type=click.FloatRange(0.0, min_open=True), default=2e-3, show_default=True)
@click.option("--temperature", type=click.FloatRange(0.0, min_open=True), default=2.0, show_default=True,
              help="Softmax temperature of the KL term.")
@click.option("--alpha", type=click.FloatRange(0.0, 1.0), default=0.5, show_default=True,
              help="Weight of the KL (teacher) term; 1 - alpha weighs the data loss.")
@click.option("--seed", type=int, default=1234, show_default=True)
@click.option("--checkpoint-every", type=click.IntRange(1), default=100, show_default=True)
@click.option("--threads", type=click.IntRange(1), default=2, show_default=True,
              help="torch threads for distillation (the count changes float summation order: keep it to reproduce).")
@click.option("--quant-eval-tokens", type=click.IntRange(0), default=4000, show_default=True,
              help="Held-out tokens scored by the quantized rows of the table (0 = all; the exact path is slow).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def compress_cmd(teacher, out, data, eval_data, prune_heads, prune_ffn, prune_hidden, prune_layers, prune_vocab,
                 prune_vocab_data, teacher_top_k, calibration_docs, distill_steps, batch_size, lr, temperature, alpha, seed,
                 checkpoint_every, threads, quant_eval_tokens, as_json):
    """Prune TEACHER, distill it on --data, report float and calibrated-INT4 perplexity (needs torch)."""
    from .compress.distill import DistillOptions
    from .compress.pipeline import CompressOptions, compress, format_report

    opts = CompressOptions(prune_heads, prune_ffn, DistillOptions(
        steps=distill_steps, batch_size=batch_size, lr=lr, temperature=temperature, alpha=alpha, seed=seed,
        checkpoint_every=checkpoint_every, threads=threads), prune_hidden=prune_hidden,
        quant_eval_tokens=quant_eval_tokens, prune_vocab=prune_vocab,
        prune_vocab_data=str(prune_vocab_data) if prune_vocab_data else None, prune_layers=prune_layers,
        teacher_top_k=teacher_top_k, calibration_docs=calibration_docs)
    result = compress(teacher, out, data, opts, eval_data, progress=not as_json)
    click.echo(json.dumps(result, indent=2) if as_json else format_report(result))


@cli.command("convert")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True,
              help="Output Hugging Face model directory (new or empty).")
def convert_cmd(model, out):
    """Write a GGUF model as a Hugging Face folder (float32 safetensors, config, tokenizer)."""
    from .convert import convert

    m = convert(model, out)
    c = m.graph.config
    click.echo(f"wrote {out}: {c.arch}, {c.n_params():,} parameters as float32, "
               f"tokenizer {'yes' if m.tokenizer is not None else 'no'}")


def _backend_options(f):
    f = click.option("--timeout", type=float, default=600, show_default=True,
                     help="Seconds one generation may take before the device counts as failed.")(f)
    f = click.option("--serial", "serial_url", default=None,
                     help="A flashed board's serial port (/dev/ttyACM0 or a pyserial URL); without it, the host "
                     "build, QEMU or Unicorn run the firmware, one run per request.")(f)
    f = click.option("--chat-template", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
                     help="A Jinja chat template file (default: the tokenizer's, else plain User:/Assistant: lines).")(f)
    return f


@cli.command("serve")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0: any free port.")
@click.option("--queue", "queue_size", type=click.IntRange(1), default=4, show_default=True,
              help="Requests that may wait for the device; one more gets 429.")
@click.option("--model-name", default=None, help="The model id clients use (default: OUT's directory name).")
@click.option("--verbose", is_flag=True, help="Log every HTTP request on stderr.")
@_backend_options
def serve_cmd(out, host, port, queue_size, model_name, verbose, timeout, serial_url, chat_template):
    """An OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models) in front of the
    firmware: a board over --serial, else QEMU, Unicorn or the host build."""
    from .run.backends import ModelInfo, open_backend
    from .run.serve import make_server, serve_forever

    info = ModelInfo.load(out, model_name, chat_template.read_text() if chat_template else None)
    try:
        server = make_server(info, open_backend(out, serial_url, timeout), host, port, queue_size,
                             quiet=not verbose)
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}; pick another --port") from None
    h, p = server.server_address[:2]
    click.echo(f"serving {info.model_id} from {out} ({server.device.backend.name}) on http://{h}:{p}/v1 "
               f"(queue {queue_size}); Ctrl-C stops", err=True)
    try:
        serve_forever(server)
    except KeyboardInterrupt:
        pass


@cli.command("chat")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--max-new-tokens", type=click.IntRange(1), default=64, show_default=True)
@click.option("--temperature", type=click.FloatRange(0.0), default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0, show_default=True)
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), default=0, show_default=True)
@click.option("--system", default=None, help="A system message to start the conversation with.")
@click.option("--timing", type=click.Choice(["none", "summary", "tokens"]), default="summary", show_default=True,
              help="After each reply on stderr: nothing, one line, or each token's count from the board's counter.")
@_backend_options
def chat_cmd(out, max_new_tokens, temperature, top_p, seed, system, timing, timeout, serial_url, chat_template):
    """Chat with the firmware in the terminal: one line of standard input per turn, the reply printed
    token by token as the device emits it (/reset forgets the conversation, /exit or end of input quits)."""
    from .run.backends import ModelInfo, open_backend
    from .run.chat import ChatOptions, run_chat
    from .reference.sampler import SamplingOptions

    info = ModelInfo.load(out, None, chat_template.read_text() if chat_template else None)
    if info.greedy_only and temperature > 0:
        raise UserError(f"{out} was compiled with --sampler greedy: chat with --temperature 0")
    backend = open_backend(out, serial_url, timeout)
    try:
        rc = run_chat(info, backend, ChatOptions(max_new_tokens, SamplingOptions(temperature, top_p, seed), system,
                                                 timing))
    finally:
        backend.close()
    sys.exit(rc)


def main(argv=None) -> None:
    try:
        rc = cli.main(args=argv, prog_name="tinyllm-gen", standalone_mode=False)
    except UserError as e:
        click.echo(f"tinyllm-gen: error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("tinyllm-gen: aborted", err=True)
        sys.exit(130)
    except _NO_ARGS_HELP as e:  # bare `tinyllm-gen`: the help text, as click prints it
        e.show()
        sys.exit(e.exit_code)
    except click.UsageError as e:  # bad option or argument: one line (click's own is three), exit 2
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        click.echo(f"tinyllm-gen: error: {one_line(e.format_message())}{hint}", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        click.echo(f"tinyllm-gen: error: {one_line(e.format_message())}", err=True)
        sys.exit(e.exit_code)
    sys.exit(rc if isinstance(rc, int) else 0)


_NO_ARGS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


if __name__ == "__main__":
    main()
