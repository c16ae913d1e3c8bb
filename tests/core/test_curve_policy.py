"""The cost curve's policy (core/engines/curve_policy.py) on the tiny loadable model: measured in
steps that keep a conversation's cached prefix, kept per model file and machine, reused by a new
process, measured again when the file changes; `generate` measures once and then reuses it;
Auto's note says when no curve priced its drafts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tinymodel import write_loadable_gguf

import specchat.core.engines.curve_policy as policy_module
from specchat.cli.main import main as cli_main
from specchat.core.decoding.pricing.cost_curve import SHORT_FACTOR, CostCurve
from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.curve_policy import (
    MEASURE_NS,
    MEASURING,
    REPEATS,
    UNMEASURED_NOTE,
    CurvePolicy,
    Measurement,
    step_sizes,
)
from specchat.core.engines.curve_store import STORE_FILE, CurveStore, curve_key
from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams
from specchat.core.types import GenerationStats, Mode


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_loadable_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture
def engine(tiny: Path) -> Iterator[Engine]:
    eng = Engine(tiny, None, target_config=RuntimeConfig(n_ctx=256, n_threads=1))
    yield eng
    eng.close()


def _reply(engine: Engine, text: str, mode: Mode = Mode.OFF) -> GenerationStats:
    events = list(
        engine.generate([{"role": "user", "content": text}], GenerationParams(max_tokens=4), mode)
    )
    return events[-1].stats


def test_steps_keep_the_cached_conversation_and_end_in_a_curve(
    engine: Engine, tmp_path: Path
) -> None:
    _reply(engine, "hello there")
    rt = engine.target
    conversation = list(rt.cache)
    assert conversation
    policy = CurvePolicy(CurveStore(tmp_path / STORE_FILE))
    m = policy.begin(engine)
    assert isinstance(m, Measurement) and engine.cost_curve is None
    steps = 0
    while not policy.step(engine, m):
        steps += 1
        assert rt.cache[: len(conversation)] == conversation  # a reply reuses its prefix
        assert m.done <= m.total
        assert engine.cost_curve is None
    # a filler step, the warm-up, then one step per timed pair (the last one returned True):
    # those of `step_sizes`, and of a long batch timed out of line, as many more as it needs
    # to be timed as often as a short one (`more_pairs`)
    assert steps + 1 == 1 + m.total
    again = {REPEATS * (SHORT_FACTOR - 1) * j for j in range(len(MEASURE_NS) + 1)}
    assert m.total - 1 - len(step_sizes()) in again
    curve = engine.cost_curve
    assert curve is not None and curve.source == "measured"
    assert [n for n, _ in curve.points] == list(MEASURE_NS)
    assert rt.cache[: len(conversation)] == conversation
    assert policy.begin(engine) is None  # kept: a reload measures nothing


def test_a_long_batch_timed_out_of_line_is_timed_again_step_by_step(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window's measurement in steps takes a long batch timed cheaper than a shorter one
    again as `measure_cost_curve` does (timed as often as a short batch), one step per pair:
    the real decodes run, only their clock is made up (9 tokens cost 3 one-token decodes, 17
    cost 5, the first 17-token decode reads 2). Without it the curve priced 17 at 9's 3."""
    real_clock, fast = policy_module.timed_decode, [0.02]

    def clock(rt, tokens, logits_for):
        real_clock(rt, tokens, logits_for)
        if len(tokens) == 17 and fast:
            return fast.pop()
        return {1: 0.01, 9: 0.03, 17: 0.05}[len(tokens)]

    monkeypatch.setattr(policy_module, "timed_decode", clock)
    m = Measurement(None, ns=(1, 9, 17), repeats=1)
    planned = m.total
    curve = engine.measure_step(m.drain)
    assert m.total == planned + SHORT_FACTOR - 1 == m.done
    assert curve.rel(9) == pytest.approx(3.0) and curve.rel(17) == pytest.approx(5.0)


def test_a_kept_curve_serves_the_next_process_until_the_model_file_changes(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / STORE_FILE
    quiet = CostCurve(((1, 1.0), (2, 1.8), (9, 7.0)), "measured", 0.01, 0.02)
    CurveStore(path).put(curve_key(engine), quiet)
    policy = CurvePolicy(CurveStore(path))  # another process: only the file is shared
    assert policy.begin(engine) is None
    assert engine.cost_curve is not None and engine.cost_curve.points == quiet.points

    busy = CostCurve(((1, 1.0), (2, 1.3)), "measured", 0.02, 0.6)  # others used 60 %
    CurveStore(path).put(curve_key(engine), busy)
    policy = CurvePolicy(CurveStore(path))
    assert isinstance(policy.begin(engine), Measurement)  # used, and measured again
    assert engine.cost_curve is not None and engine.cost_curve.points == busy.points
    assert policy.begin(engine) is None  # once per process

    st = engine.target.path.stat()
    os.utime(engine.target.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    policy = CurvePolicy(CurveStore(path))
    assert isinstance(policy.begin(engine), Measurement)  # another file: not its curve
    assert engine.cost_curve is None


def test_an_unreadable_store_costs_a_measurement_not_an_error(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / STORE_FILE
    path.write_text("{ not json")
    store = CurveStore(path)
    assert store.get(curve_key(engine)) is None
    path.write_text('{"version": 1, "curves": {"k": {"points": "no"}}}')
    assert CurveStore(path).get("k") is None
    curve = CostCurve(((1, 1.0), (2, 1.5)), "measured", 0.01, 0.0)
    store.put("k", curve)
    assert CurveStore(path).get("k") == curve


def test_auto_says_when_no_curve_priced_its_drafts(engine: Engine) -> None:
    st = _reply(engine, "count to five", Mode.AUTO)
    assert UNMEASURED_NOTE in st.note, st.note
    assert UNMEASURED_NOTE not in _reply(engine, "count to five").note
    engine.use_cost_curve(CostCurve(((1, 1.0), (2, 1.5)), "measured", 0.01, 0.0))
    st = _reply(engine, "count to five", Mode.AUTO)
    assert UNMEASURED_NOTE not in st.note, st.note


def test_generate_measures_once_then_reuses_the_kept_curve(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    argv = ["generate", "--target", str(tiny), "--no-draft", "--threads", "1", "--gpu-layers"]
    argv += ["0", "--max-tokens", "4", "--ctx", "256", "--mode", "auto", "--prompt", "hi"]
    assert cli_main(argv) == 0
    first = capsys.readouterr().err
    assert MEASURING.lower() in first.lower() and (tmp_path / "data" / STORE_FILE).is_file()
    assert cli_main(argv) == 0
    assert MEASURING.lower() not in capsys.readouterr().err.lower()
