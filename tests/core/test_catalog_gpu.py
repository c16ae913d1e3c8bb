"""The catalog's GPU pairs (sizes, VRAM needs) and the pair suggested for a device's memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specchat.core.placement.suggestions import pair_for_device
from specchat.core.store.catalog import load_catalog, parse_catalog

GB = 10**9


def test_gpu_pairs_people_run_are_listed_with_their_needs() -> None:
    cat = load_catalog()
    pairs = {p.id: p for p in cat.pairs}
    for pid in (
        "qwen2.5-coder-7b+0.5b",
        "qwen2.5-coder-14b+0.5b",
        "qwen3-8b+0.6b",
        "llama-3.1-8b+3.2-1b",
    ):
        pair = pairs[pid]
        target, draft = cat.pair_models(pair)
        assert target.family == draft.family  # a draft shares its target's tokenizer
        assert pair.vram_gb is not None and target.approx_bytes and draft.approx_bytes
        # the stated need covers both models' weights plus KV caches and buffers
        assert pair.vram_gb * GB > target.approx_bytes + draft.approx_bytes + 0.5 * GB
    assert (
        cat.model("qwen2.5-coder-14b-instruct-q4_k_m").repo
        == "Qwen/Qwen2.5-Coder-14B-Instruct-GGUF"
    )
    qwen3 = cat.model("qwen3-8b-q4_k_m")
    assert qwen3.size == 5_027_783_488 and qwen3.sha256 and qwen3.sha256.startswith("d98cdcbd")
    assert cat.model("qwen3-0.6b-q8_0").size == 639_446_688
    for m in cat.models.values():  # a pinned size agrees with the approximate one
        if m.size and m.size_gb:
            assert abs(m.size / GB - m.size_gb) < 0.01


def test_the_largest_pair_that_fits_is_suggested() -> None:
    cat = load_catalog()

    def pick(vram: float | None, offload: bool = True) -> str:
        free = None if vram is None else int(vram * GB)
        return pair_for_device(cat, offload=offload, vram_free=free).pair.id

    assert pick(None, offload=False) == "qwen2.5-coder-1.5b+0.5b"  # a CPU-only build
    assert pick(24) == pick(12) == "qwen2.5-coder-14b+0.5b"  # 10.9 GB fits
    assert pick(10.8) == "qwen3-8b+0.6b"  # 7.3 GB
    assert pick(7.2) == "llama-3.1-8b+3.2-1b"  # 7.0 GB
    assert pick(6.5) == "qwen2.5-coder-7b+0.5b"  # 6.0 GB; listed before the general 7B
    assert pick(4) == pick(2.4) == "qwen2.5-coder-1.5b+0.5b"
    small = pair_for_device(cat, offload=True, vram_free=2 * GB)
    assert small.pair.default and "no pair fits whole" in small.reason
    assert (
        "the largest pair that fits: needs 10.9 GB"
        in pair_for_device(cat, offload=True, vram_free=24 * GB).reason
    )


def _doc(**pair: Any) -> dict[str, Any]:
    model = {"repo": "o/x", "family": "f", "params": "1B", "quant": "q", "context_length": 1}
    return {
        "models": [
            {**model, "id": "t", "file": "t.gguf", "size": 4_000_000_000, "size_gb": 4.0},
            {**model, "id": "d", "file": "d.gguf", "size_gb": 0.5},
        ],
        "pairs": [{"id": "p", "target": "t", "draft": "d", "default": True, "note": "", **pair}],
    }


def test_new_catalog_keys_are_validated() -> None:
    cat = parse_catalog(_doc(vram_gb=5.5), "x")
    assert cat.pairs[0].vram_gb == 5.5 and cat.model("d").approx_bytes == 500_000_000
    with pytest.raises(ValueError, match=r"'vram_gb' \(4.2\) is less than the weights"):
        parse_catalog(_doc(vram_gb=4.2), "x")
    with pytest.raises(ValueError, match="'vram_gb' must be a positive number"):
        parse_catalog(_doc(vram_gb="lots"), "x")
    bad = _doc()
    bad["models"][0]["size_gb"] = 5.0
    with pytest.raises(ValueError, match="'size_gb' .* does not match 'size'"):
        parse_catalog(bad, "x")


def test_catalog_file_documents_the_new_keys() -> None:
    text = (Path(__file__).resolve().parents[2] / "models" / "catalog.toml").read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert "size_gb         float" in header and "vram_gb         float" in header
