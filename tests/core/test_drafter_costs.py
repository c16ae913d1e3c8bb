"""The cost-of-speculation measurement (core/bench/drafter_costs.py) on real llama.cpp, with the
tiny generated models: a hybrid qwen35 with its built-in MTP head, a hybrid lfm2 without a head,
and a Gemma 4 target (a transformer) with its assistant. What is checked is that every piece is
measured and lands in the right row, never how fast anything is."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from specchat.cli.main import main
from specchat.core.bench.drafter_cost_figures import NOISE_NOTE, DrafterCosts
from specchat.core.bench.drafter_costs import KS, DrafterCostError, measure_drafter_costs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tinymodel  # noqa: E402
import tinymodel_gemma4  # noqa: E402

HEAD_ROWS = ("head_step", "catch_up", "verify_with_head")
HYBRID_ROWS = ("snapshot", "verify_snap", "verify_plain", "rollback")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("costs")
    target, assistant = tinymodel_gemma4.write_gemma4_pair(d / "gemma4")
    return {
        "qwen35": tinymodel.write_qwen35_mtp(d / "qwen35" / "tiny-qwen35-mtp.gguf"),
        "lfm2": tinymodel.write_lfm2(d / "lfm2" / "tiny-lfm2.gguf"),
        "gemma4": target,
        "assistant": assistant,
    }


def measure(path: Path, drafter: Path | None = None, **kw: object) -> DrafterCosts:
    return measure_drafter_costs(path, drafter, repeats=1, threads=1, n_ctx=512, **kw)  # type: ignore[arg-type]


def positive(row: dict[int, float] | None) -> bool:
    return row is not None and all(math.isfinite(v) and v > 0.0 for v in row.values())


def check_keys(c: DrafterCosts, present: tuple[str, ...], absent: tuple[str, ...]) -> None:
    assert sorted(c.verify) == list(KS) and positive(c.verify)
    assert c.t1_ms > 0.0 and math.isfinite(c.t1_ms)
    for name in present:
        row = getattr(c, name)
        assert row is not None and sorted(row) == list(KS), (name, row)
        # a snapshot's cost is a difference of two measured ratios: noise may make it negative
        assert positive(row) if name != "snapshot" else all(map(math.isfinite, row.values()))
    for name in absent:
        assert getattr(c, name) is None, name


def test_hybrid_target_with_its_builtin_head_has_every_row(models: dict[str, Path]) -> None:
    c = measure(models["qwen35"])
    assert c.hybrid and c.arch == "qwen35" and c.n_rs_seq >= max(KS) and c.snapshot_mib > 0
    assert c.drafter == "Built-in MTP" and c.drafter_kind == "builtin"
    check_keys(c, HYBRID_ROWS + HEAD_ROWS, ())
    text = c.to_text()
    assert NOISE_NOTE in text and "snapshot" in text and "head step" in text
    assert json.loads(json.dumps(c.as_dict()))["rollback"].keys() == {str(k) for k in KS}


def test_hybrid_target_without_a_head_has_snapshot_and_rollback_rows_only(
    models: dict[str, Path],
) -> None:
    c = measure(models["lfm2"])
    assert c.hybrid and c.arch == "lfm2" and c.drafter is None
    check_keys(c, HYBRID_ROWS, HEAD_ROWS)
    text = c.to_text()
    assert "rollback" in text and "head step" not in text
    # the head can be left out of a target that has one
    c = measure(models["qwen35"], head=False, ks=(1, 2))
    assert c.drafter is None and sorted(c.verify) == [1, 2] and c.head_step is None
    assert c.rollback is not None and sorted(c.rollback) == [1, 2]


def test_transformer_target_with_an_assistant_has_no_snapshot_or_rollback_rows(
    models: dict[str, Path],
) -> None:
    c = measure(models["gemma4"], models["assistant"])
    assert not c.hybrid and c.n_rs_seq == 0 and c.drafter_kind == "assistant"
    check_keys(c, HEAD_ROWS, HYBRID_ROWS)
    text = c.to_text()
    assert "snapshot" not in text and "rollback" not in text and NOISE_NOTE in text


def test_bad_input_is_a_sentence(models: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(DrafterCostError, match="no model file"):
        measure(tmp_path / "missing.gguf")
    with pytest.raises(DrafterCostError, match="drafts for Gemma 4 models"):
        measure(models["lfm2"], models["assistant"])
    with pytest.raises(DrafterCostError, match="repeats"):
        measure_drafter_costs(models["lfm2"], repeats=0)


def test_doctor_prints_the_table_and_refuses_bad_input(
    models: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["doctor", "--drafter-costs", str(models["gemma4"]), "--repeats", "1"]
    assert main([*args, "--draft", str(models["assistant"])]) == 0
    out = capsys.readouterr().out
    assert "head catch-up per verification" in out and NOISE_NOTE in out
    assert main([*args, "--json"]) == 0  # the assistant beside the target is found
    report = json.loads(capsys.readouterr().out)
    assert report["drafter_kind"] == "assistant" and report["rollback"] is None
    assert main(["doctor", "--drafter-costs", str(tmp_path / "none.gguf")]) == 2
    assert "no model file" in capsys.readouterr().err
    assert main(["doctor", "--draft", str(models["assistant"])]) == 2
    assert "--drafter-costs" in capsys.readouterr().err
