"""`bench --compare-runtimes`: the same decodes timed through SpecChat's runtime and through a
real llama-server built from the same llama.cpp (packaging/build-llama-server.sh)."""

from __future__ import annotations

from pathlib import Path

from specchat.core.bench.report_md import runtime_curves_section
from specchat.core.bench.runtime_curves import compare_runtimes


def test_llama_server_times_the_same_decodes_as_specchat(
    llama_server_bin: Path, small_engine
) -> None:
    """Every n of the bench's curve is timed by both runtimes: llama-server decoded exactly n
    new tokens after the cached prefix each time (else compare_runtimes raises), SpecChat's
    cache ends as it began, and the report shows one row per n."""
    engine = small_engine
    before = list(engine.target.cache)
    every_row = engine.measure_cost_curve(ns=[1, 3, 5], repeats=1)
    curves = compare_runtimes(engine, every_row, binary=llama_server_bin)
    assert [n for n, _ in curves.server_last.points] == [1, 3, 5]
    assert [n for n, _ in curves.specchat_last.points] == [1, 3, 5]
    rows = curves.rows()
    assert all(r["server_last_ms"] > 0 and r["specchat_last_ms"] > 0 for r in rows), rows
    assert list(engine.target.cache) == before
    text = "\n".join(runtime_curves_section({"runtime_curves": curves.as_dict()}))
    for r in rows:
        assert f"| {r['n']} | {r['specchat_all_ms']:.1f} |" in text, text
    print(curves.describe())
