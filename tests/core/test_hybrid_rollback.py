"""Speculation's rollback on hybrid models, on real llama.cpp and the tiny models of
tests/tinymodel.py: a `qwen35` (gated delta-net layers, one attention layer, a NextN block) and an
`lfm2` (short convolutions and attention).

A verification decodes the token before a draft and the k drafted tokens in one batch, then
cuts the cache back to what was accepted. On these models the cut must also bring the recurrent
state back to what it was after the kept token: llama.cpp keeps one snapshot per token of the
last decode (`n_rs_seq`) and `ModelRuntime.truncate` asks it to restore one. Each test compares
the next token's logits after a cut with those of a new context that decoded the kept tokens
from scratch (no snapshots, another code path for the delta net).

TOL: the two ways of computing the same logits add float32 terms in another order (the new
context decodes the whole prefix in one batch, the rolled-back one in three); the largest
difference measured here was 2e-6 (7e-4 with other batch splits), on logits that differ by 2.6
to 4 between a right and a wrong state (`test_a_stale_state_gives_other_logits`). 1e-2 leaves
room for other CPUs' kernels and is still 200 times below a wrong state.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tinymodel import Lfm2Shape, write_lfm2, write_loadable_gguf, write_qwen35_mtp

from specchat.core.decoding.runtime import HYBRID_ROLLBACK_TOKENS, ModelRuntime, RuntimeConfig
from specchat.core.gguf.header import read_gguf_info
from specchat.core.gguf.recurrent import state_bytes

TOL = 1e-2
WRONG = 1.0  # a wrong state's logits differ by more than this (measured: 2.4 to 4.0)
MIB = 1 << 20
PROMPT = [260 + (7 * i) % 40 for i in range(12)]
BEFORE = 301  # the token before the draft (the last one the target emitted)
DRAFT = [270, 285, 262, 299, 277, 290]
NEXT = 281


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hybrid")
    return {
        "qwen35": write_qwen35_mtp(d / "tiny-qwen35-mtp.gguf"),
        "lfm2": write_lfm2(d / "tiny-lfm2.gguf"),
        "qwen2": write_loadable_gguf(d / "tiny-qwen2.gguf"),
    }


def _runtime(path: Path, n_batch: int = 64, **kw: int) -> ModelRuntime:
    return ModelRuntime(path, RuntimeConfig(n_ctx=256, n_threads=1, n_batch=n_batch), **kw)


def _fresh(path: Path, tokens: list[int]) -> np.ndarray:
    """The last token's logits from a new context without snapshots (one batch)."""
    rt = _runtime(path, rollback_tokens=0)
    try:
        return rt.decode(tokens, logits_for="last")[0].copy()
    finally:
        rt.close()


def _verify_step(rt: ModelRuntime) -> list[int]:
    """The prompt, then one verification of the draft: what the cache holds after it."""
    rt.reset()
    rt.decode(PROMPT, logits_for="none")
    rows = rt.decode([BEFORE, *DRAFT], logits_for="all")
    assert rows.shape[0] == len(DRAFT) + 1
    return [*PROMPT, BEFORE, *DRAFT]


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_hybrid_target_can_roll_back(models: dict[str, Path], arch: str) -> None:
    rt = _runtime(models[arch])
    try:
        assert rt.recurrent
        assert rt.can_rollback
        # the default, HYBRID_ROLLBACK_TOKENS (16), within the 64-token batch's 62
        assert rt.n_rs_seq == rt.rollback_depth == HYBRID_ROLLBACK_TOKENS == 16
        assert rt.snapshot_bytes > 0
    finally:
        rt.close()


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_cut_back_j_tokens_gives_a_fresh_contexts_logits(
    models: dict[str, Path], arch: str
) -> None:
    path = models[arch]
    rt = _runtime(path)
    worst, spread = 0.0, []
    try:
        for j in range(1, len(DRAFT) + 1):  # 1..k: every draft rejected at its j-th last token
            held = _verify_step(rt)
            keep = len(held) - j
            assert rt.truncate(keep), f"cut of {j} refused"
            assert rt.cache == held[:keep]
            after = rt.decode([NEXT])[0].copy()
            ref = _fresh(path, held[:keep] + [NEXT])
            worst = max(worst, float(np.abs(after - ref).max()))
            spread.append(ref)
    finally:
        rt.close()
    assert worst <= TOL, f"{arch}: logits after a cut differ from a fresh decode by {worst:.3g}"
    # the prefixes' logits differ from one another far beyond TOL: a cut that left any other
    # state (or did nothing) could not pass the comparison above
    gaps = [float(np.abs(a - b).max()) for a, b in zip(spread, spread[1:], strict=False)]
    assert min(gaps) > WRONG


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_a_stale_state_gives_other_logits(models: dict[str, Path], arch: str) -> None:
    """llama.cpp itself accepts a cut of a whole one-token decode and restores a snapshot an
    earlier decode left: the logits are then wrong. The runtime refuses that cut."""
    import llama_cpp

    path = models[arch]
    rt = _runtime(path)
    try:
        held = _verify_step(rt)
        rt.decode([NEXT], logits_for="none")  # a plain step: its snapshot 1 is stale
        mem = rt._ctx.memory
        assert llama_cpp.llama_memory_seq_rm(mem, 0, len(held), -1)  # llama.cpp: "done"
        del rt.book.tokens[len(held) :]
        stale = rt.decode([BEFORE])[0].copy()
        ref = _fresh(path, held + [BEFORE])
        assert float(np.abs(stale - ref).max()) > WRONG

        held = _verify_step(rt)
        rt.decode([NEXT], logits_for="none")
        assert not rt.truncate(len(held))  # the runtime's check: not within the last decode
        assert rt.cache == []
    finally:
        rt.close()


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_a_deeper_cut_is_refused_and_the_cache_cleared(models: dict[str, Path], arch: str) -> None:
    path = models[arch]
    rt = _runtime(path, rollback_tokens=3)
    try:
        assert rt.rollback_depth == 3
        held = _verify_step(rt)
        assert not rt.truncate(len(held) - 4)  # deeper than the 3 snapshots
        assert rt.cache == []
        # what the decoder then does (_verify): decode the kept tokens again
        keep = held[: len(held) - 4]
        rt.decode(keep, logits_for="none")
        again = rt.decode([NEXT])[0].copy()
        assert float(np.abs(again - _fresh(path, keep + [NEXT])).max()) <= TOL

        held = _verify_step(rt)
        assert rt.truncate(len(held) - 3)  # as deep as the snapshots reach
        assert not rt.truncate(len(held) - 4)  # a second cut before a decode: refused
        assert rt.cache == []

        held = _verify_step(rt)
        assert rt.truncate(len(held) - 2)
        rt.decode([NEXT, BEFORE], logits_for="none")  # a decode: one new cut within it
        assert rt.truncate(len(held) - 1)
        after = rt.decode([NEXT])[0].copy()
        ref = _fresh(path, held[: len(held) - 2] + [NEXT, NEXT])
        assert float(np.abs(after - ref).max()) <= TOL
    finally:
        rt.close()


def test_without_snapshots_a_hybrid_target_cannot_roll_back(models: dict[str, Path]) -> None:
    """rollback_tokens=0 (llama.cpp answers n_rs_seq 0, as it does for an architecture it
    cannot roll back): no speculation, as before, and a cut clears the cache."""
    rt = _runtime(models["qwen35"], rollback_tokens=0)
    try:
        assert rt.recurrent and rt.n_rs_seq == 0
        assert not rt.can_rollback
        assert rt.rollback_depth == 0 and rt.snapshot_bytes == 0
        held = _verify_step(rt)
        assert not rt.truncate(len(held) - 1)
        assert rt.cache == []
    finally:
        rt.close()


def test_snapshots_fit_a_small_batch(models: dict[str, Path]) -> None:
    """llama.cpp aborts the process unless a micro-batch holds more than n_rs_seq + 1 tokens:
    with an 8-token batch the runtime asks for 6 snapshots, and a long prompt still decodes."""
    rt = _runtime(models["lfm2"], n_batch=8)
    try:
        assert rt.n_rs_seq == 6
        rt.decode(PROMPT * 2, logits_for="last")
        rt.decode([BEFORE, *DRAFT], logits_for="all")
        assert rt.truncate(len(rt.cache) - 6)
    finally:
        rt.close()


# LFM2-350M / 700M / 1.2B: 16 layers, attention at 2, 5, 8, 10, 12, 14; a 30-layer one like 2.6B
LFM2_LAYOUTS = {
    "16 layers": tuple(int(i in (2, 5, 8, 10, 12, 14)) for i in range(16)),
    "30 layers": tuple(int(i % 4 == 2) for i in range(30)),
}


@pytest.mark.parametrize("layout", sorted(LFM2_LAYOUTS))
def test_a_real_lfm2_layout_loads_with_the_default_snapshots(tmp_path: Path, layout: str) -> None:
    """llama.cpp aborts the whole process when LFM2's graph has too many snapshot copies (21
    for the 16-layer layout, 16 for the 30-layer one, measured): the runtime asks for fewer.
    In a child process, so that an abort fails this test instead of ending the run."""
    shape = Lfm2Shape(
        n_embd=32, n_ff=64, n_head=2, head_kv=LFM2_LAYOUTS[layout], l_cache=3, n_vocab=None,
        context=4096, name="LFM2 layout",
    )  # fmt: skip
    path = write_lfm2(tmp_path / "lfm2-layout.gguf", shape)
    code = (
        "from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig\n"
        f"rt = ModelRuntime({str(path)!r}, RuntimeConfig(n_ctx=256, n_threads=1))\n"
        "rt.decode(list(range(260, 290)), logits_for='none')\n"
        "rt.decode(list(range(290, 296)), logits_for='all')\n"
        "assert rt.truncate(len(rt.cache) - 5)\n"
        "print(rt.n_rs_seq)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout.split()[-1]) >= 8


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_snapshot_bytes_match_llamas_recurrent_buffer(models: dict[str, Path], arch: str) -> None:
    """core.gguf.recurrent's formula against llama.cpp's own log: its RS buffer holds the live
    state and n_rs_seq snapshots (printed in 0.01 MiB steps)."""
    info = read_gguf_info(models[arch])
    one = state_bytes(info)
    assert one is not None and one > 0
    rt = _runtime(models[arch], n_batch=256, rollback_tokens=254)
    try:
        logged = sum(b for (_, k), b in rt.context_report.buffers.items() if k == "RS")
        assert rt.n_rs_seq == {"qwen35": 254, "lfm2": 81}[arch]  # lfm2: its graph's bound
        assert abs(logged - (1 + rt.n_rs_seq) * one) <= 0.005 * MIB + 64 * 16
        assert rt.snapshot_bytes == rt.n_rs_seq * one
    finally:
        rt.close()


def test_a_transformer_is_unaffected(models: dict[str, Path]) -> None:
    path = models["qwen2"]
    rt = _runtime(path)
    try:
        assert not rt.recurrent
        assert rt.can_rollback and rt.n_rs_seq == 0 and rt.snapshot_bytes == 0
        assert rt.rollback_depth == rt.n_ctx
        held = _verify_step(rt)
        rt.decode([NEXT, NEXT], logits_for="none")
        held += [NEXT, NEXT]
        keep = len(PROMPT) + 2  # across three decodes: any cut
        assert rt.truncate(keep)
        assert rt.truncate(keep - 1)  # and again, with no decode between
        after = rt.decode([NEXT])[0].copy()
        ref = _fresh(path, held[: keep - 1] + [NEXT])
        assert float(np.abs(after - ref).max()) <= TOL
    finally:
        rt.close()
