"""The timing model's price of speculation with a draft model
(timing.speculative_tokens_per_s with a DraftCost, draft_prediction,
speculative_floor_tokens_per_s) against hand computations, its physical
floor on every board, the k it picks; and the acceptance measured at
compile time (reference/draft_acceptance.py) against the speculative
reference's own passes and draft steps."""
from __future__ import annotations

import pytest

from tinyllm_gen import timing
from tinyllm_gen.board import board_names, load_board
from tinyllm_gen.timing import (Acceptance, DraftCost, Workload, choose_k, compute_seconds, draft_prediction,
                                mode_seconds, speculative_floor_tokens_per_s, speculative_tokens_per_s)

DK, QEMU = load_board("stm32h750b-dk"), load_board("qemu-mps2-an500")
QSPI_BOARDS = [b for b in board_names() if load_board(b).qspi_flash is not None]


def target(nbytes=4 << 20, mv=8_000_000, other=400_000, head_bytes=1 << 20, head_mv=2_000_000) -> Workload:
    return Workload("target", nbytes, mv, other, 20, "hand-made", sampling_instructions=50_000,
                    head_weight_bytes=head_bytes, head_matvec_instructions=head_mv)


def draft_cost(scale=0.25, mode="in_place") -> DraftCost:
    w = target()
    return DraftCost(Workload("draft", int(w.weight_bytes * scale), int(w.matvec_instructions * scale),
                              int(w.other_instructions * scale), 8, "hand-made", sampling_instructions=50_000,
                              head_weight_bytes=int(w.head_weight_bytes * scale),
                              head_matvec_instructions=int(w.head_matvec_instructions * scale)),
                     mode)


def acceptance(tpp: dict, steps: dict | None = None, catchup: dict | None = None) -> Acceptance:
    """Every pass verifies k + 1 positions; the draft steps k times (unless told) per pass."""
    return Acceptance("hand-made", "test", tpp, {k: {k + 1: 1.0} for k in tpp},
                      steps if steps is not None else {k: float(k) for k in tpp}, catchup or {k: 0.0 for k in tpp})


def test_compute_alone_is_the_instructions_of_a_pass_over_its_tokens():
    """Where no link is modelled (QEMU): the verification's instructions at P = k + 1 plus the draft's
    steps (with the head) and catch-up steps (without the classifier and sampling), over the tokens."""
    w, d = target(), draft_cost(mode="compute")
    acc = acceptance({2: 2.5}, {2: 2.0}, {2: 0.5})
    verify = compute_seconds(w.verify(3).instructions)
    catchup = d.workload.prefill(1)
    assert catchup.instructions == (d.workload.instructions - d.workload.head_matvec_instructions
                                    - d.workload.sampling_instructions)  # P = 1: the body's own matvec count
    drafting = 2.0 * compute_seconds(d.workload.instructions) + 0.5 * compute_seconds(catchup.instructions)
    got = speculative_tokens_per_s(QEMU, w, acc, 2, "compute", draft=d)
    assert got == pytest.approx(2.5 / (verify + drafting), rel=1e-12)
    assert speculative_tokens_per_s(QEMU, w, acc, 2, "compute") == pytest.approx(2.5 / verify, rel=1e-12)


def test_on_a_link_each_model_is_priced_in_its_own_mode():
    w, d = target(), draft_cost(mode="in_place")
    acc = acceptance({1: 1.8}, {1: 1.0}, {1: 0.8})
    q = DK.qspi_flash
    verify = mode_seconds(q, w.verify(2))["dwup"]
    drafting = mode_seconds(q, d.workload)["in_place"] + 0.8 * mode_seconds(q, d.workload.prefill(1))["in_place"]
    assert speculative_tokens_per_s(DK, w, acc, 1, "dwup", draft=d) == pytest.approx(1.8 / (verify + drafting))


@pytest.mark.parametrize("board", QSPI_BOARDS)
@pytest.mark.parametrize("scale,tpp", [(0.05, {1: 2.0, 2: 3.0, 3: 4.0}), (0.5, {1: 1.2, 2: 1.3, 3: 1.3}),
                                       (0.0, {1: 2.0, 2: 3.0, 3: 4.0})])
def test_no_prediction_beats_its_flash_floor(board, scale, tpp):
    """The floor: the bytes of a pass (the target's weights once, the draft's per step, its catch-up without
    the classifier) per token produced, over the link's rate; every mode of either model is slower."""
    b = load_board(board)
    w, acc = target(), acceptance(tpp, None, {1: 1.0, 2: 1.0, 3: 1.0})
    for mode in ("dwup", "in_place"):
        d = draft_cost(scale, mode)
        for k in tpp:
            floor = speculative_floor_tokens_per_s(b, w, acc, k, d)
            nbytes = w.weight_bytes + k * d.workload.weight_bytes + d.workload.prefill(1).weight_bytes
            assert floor == pytest.approx(tpp[k] * b.qspi_flash.bytes_per_s / nbytes)
            assert speculative_tokens_per_s(b, w, acc, k, mode, draft=d) < floor
            p = draft_prediction(b, w, acc, k, mode, d)
            assert p["tokens_per_s"] <= p["flash_bound_tokens_per_s"]
            assert p["plain_tokens_per_s"] <= p["plain_flash_bound_tokens_per_s"]


def test_a_prediction_faster_than_its_floor_is_refused_as_a_bug(monkeypatch):
    monkeypatch.setattr(timing, "speculative_floor_tokens_per_s", lambda *a, **k: 1e-6)
    with pytest.raises(AssertionError, match="beats its flash floor"):
        draft_prediction(DK, target(), acceptance({1: 1.5}), 1, "dwup", draft_cost())


def test_the_k_follows_the_acceptance_and_the_drafts_price():
    """A cheap draft that is always right: the most guesses win; one that is never right: the fewest
    (every draft step is lost); a draft as dear as the target that is always right: still the most guesses
    win over fewer, but below plain decoding where its steps cost more than the flash they save."""
    w = target()
    right = acceptance({1: 2.0, 2: 3.0, 3: 4.0})
    wrong = acceptance({1: 1.0, 2: 1.0, 3: 1.0})
    cheap = draft_cost(0.02, "dwup")
    assert [k for k, _ in choose_k(DK, w, right, 3, "dwup", draft=cheap)] == [3, 2, 1]
    assert [k for k, _ in choose_k(DK, w, wrong, 3, "dwup", draft=cheap)] == [1, 2, 3]
    plain = speculative_tokens_per_s(DK, w, right, 0, "dwup")
    assert speculative_tokens_per_s(DK, w, right, 3, "dwup", draft=cheap) > 2 * plain
    assert all(r < plain for _, r in choose_k(DK, w, wrong, 3, "dwup", draft=cheap))
    assert choose_k(DK, w, right, 2, "dwup", draft=cheap)[0][0] == 2  # never past the build's k_max
