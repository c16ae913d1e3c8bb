"""The model manager's "Recommended pairs" tab puts the largest pair that fits the GPU first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specchat.core.placement.memory_plan import MachineMemory
from specchat.core.store.catalog import load_catalog
from specchat.core.store.store import ModelStore

GB = 10**9


def test_suggested_pair_comes_first_and_is_selected(qtbot: Any, tmp_path: Path) -> None:
    from specchat.gui.models.pairs_tab import RecommendedPairsTab

    tab = RecommendedPairsTab(load_catalog(), ModelStore(tmp_path))
    qtbot.addWidget(tab)
    tab.fill()
    assert "Suggested" not in tab.list.item(0).text()  # nothing known about the machine yet

    tab.set_machine(MachineMemory(16 * GB, 32 * GB, vram_free=12 * GB, vram_total=16 * GB))
    first = tab.list.item(0).text()
    assert first.startswith("★ Suggested for this machine (the largest pair that fits")
    assert "Qwen2.5-Coder-14B-Instruct" in first and "10.9 GB on a GPU" in first
    assert tab.list.currentRow() == 0
    chosen: list[Any] = []
    tab.chosen.connect(lambda t, d: chosen.append((t.repo_id, d.repo_id)))
    tab.use_current()
    assert chosen == [
        ("Qwen/Qwen2.5-Coder-14B-Instruct-GGUF", "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    ]

    tab.set_machine(MachineMemory(16 * GB, 32 * GB))  # a CPU-only build lists no GPU
    first = tab.list.item(0).text()
    assert "no GPU llama.cpp can use here" in first and "(default)" in first
    assert tab.list.count() == len(load_catalog().pairs)
