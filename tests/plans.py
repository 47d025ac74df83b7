"""Planning from a graph in one call, for tests: lower it (a StepSource,
or a QuantizedGraph), apply the passes asked for and plan at one context
the way fit/search.py does (the package itself lowers once per compile and
keeps these steps apart)."""
from __future__ import annotations

from dataclasses import replace

from tinyllm_gen.board import load_board
from tinyllm_gen.fit.search import FitRequest, Planner, fit, fit_stream, plan_step
from tinyllm_gen.ir import build_decoder_graph
from tinyllm_gen.lower.prefill import batch_step
from tinyllm_gen.lower.records import StepSource, source_of
from tinyllm_gen.lower.step import lower_step
from tinyllm_gen.lower.stream import stream_step
from tinyllm_gen.quant.formats import QuantizedGraph


def source(x, kv_bits: int | None = None) -> StepSource:
    src = source_of(x) if isinstance(x, QuantizedGraph) else x
    if kv_bits is not None:
        src = replace(src, kv_bits=kv_bits)
    return src


def shape(config, group_size: int = 32, kv_bits: int = 8, kernels: str = "portable", method: str = "rtn",
          kept: tuple = ()) -> StepSource:
    """A config's graph, no weights (what `tinyllm-gen plan` lowers)."""
    return StepSource(build_decoder_graph(config, {}), group_size, kv_bits, kernels, method, kept)


def step_of(x, sampler: str = "full", stream=None, batch: int = 1, max_seq: int | None = None):
    src = source(x)
    step = lower_step(src, sampler)
    if stream is not None:
        step = stream_step(step, stream, max_seq or src.config.max_seq)
    return batch_step(step, batch)


def planner(budget: int, board=None) -> Planner:
    return Planner(board if board is not None else load_board("host"), budget)


def plan_memory(x, max_seq: int, budget: int, board=None, sampler: str = "full", stream=None, batch: int = 1):
    """The plan at max_seq, or the UserError compile gives (what is over, what would fit)."""
    return planner(budget, board).plan_or_explain(step_of(x, sampler, stream, batch, max_seq), max_seq)


def auto_max_seq(x, context: int, budget: int, board=None, sampler: str = "full"):
    return planner(budget, board).auto_max_seq(step_of(x, sampler), context)


def largest_fitting_seq(x, budget: int, upper: int, board=None, sampler: str = "full", stream=None, batch: int = 1):
    return planner(budget, board).largest_fitting_seq(step_of(x, sampler, stream, batch), upper)


def plan_for(x, requested_seq, budget: int, board, sampler: str = "full", stream=None, batch: int = 1,
             vocab: tuple[int, int] | None = None, unroll_layers: bool = False):
    """One candidate as fit/search.py plans it (context, plan, code flash, blob): a Fitted."""
    src = source(x)
    req = FitRequest(board, budget, requested_seq, vocab=vocab, unroll_layers=unroll_layers)
    return plan_step(planner(budget, board), step_of(src, sampler, stream, batch), src, req, requested_seq)


def plan_streamed(x, requested_seq, budget: int, board, mode: str, chunk: int | None = None, sampler: str = "full",
                  batch: int = 1):
    """fit/search.fit_stream at one prefill batch: (Fitted, the stream options it planned or None)."""
    src = source(x)
    req = FitRequest(board, budget, requested_seq, mode, chunk, batch)
    res = fit_stream(planner(budget, board), lower_step(src, sampler), src, req, batch, requested_seq)
    return res, res.stream


def plan_prefill(x, requested_seq, budget: int, board, mode: str = "off", chunk: int | None = None,
                 batch="auto", sampler: str = "full"):
    """fit/search.fit, the whole search: (Fitted, the stream options it planned or None)."""
    src = source(x)
    res = fit(lower_step(src, sampler), src, FitRequest(board, budget, requested_seq, mode, chunk, batch))
    return res, res.stream
