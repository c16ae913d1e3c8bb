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

    def pick(vram: float | None, offload: bool = True, ram: float | None = None) -> str:
        free = None if vram is None else int(vram * GB)
        ram_b = None if ram is None else int(ram * GB)
        return pair_for_device(cat, offload=offload, vram_free=free, ram_available=ram_b).pair.id

    # a 24 GB GPU: Gemma 4 31B with its assistant (19.1 GB); Qwen3.8/3.6 27B are not
    # suggested while their sizes are unknown (no --refresh here)
    assert pick(24) == "gemma-4-31b+assistant"
    assert pick(19.0) == pick(12) == "qwen2.5-coder-14b+0.5b"  # 10.9 GB fits
    # an 8 GB GPU: Qwen3 8B with its 0.6B draft (7.3 GB)
    assert pick(8) == pick(7.3) == "qwen3-8b+0.6b"
    assert pick(7.2) == "llama-3.1-8b+3.2-1b"  # 7.0 GB
    assert pick(6.5) == "qwen2.5-coder-7b+0.5b"  # 6.0 GB; listed before the general 7B
    assert pick(5.9) == "gemma-4-e4b+assistant"  # 5.8 GB
    assert pick(4) == pick(2.4) == "qwen2.5-coder-1.5b+0.5b"
    small = pair_for_device(cat, offload=True, vram_free=2 * GB)
    assert small.pair.default and "no pair fits whole" in small.reason
    assert (
        "the largest pair that fits: needs 19.1 GB"
        in pair_for_device(cat, offload=True, vram_free=24 * GB).reason
    )
    # no GPU: what runs well on a CPU, as large as a quarter of the memory allows
    assert pick(None, offload=False) == "qwen2.5-coder-1.5b+0.5b"  # memory unknown
    assert pick(None, offload=False, ram=8) == "qwen2.5-coder-1.5b+0.5b"
    assert pick(None, offload=False, ram=32) == "gemma-4-e4b+assistant"  # 4.28 GB of files
    cpu = pair_for_device(cat, offload=False, vram_free=None, ram_available=32 * GB)
    assert "runs well on a CPU (4.3 GB of files, 32.0 GB of memory available)" in cpu.reason
    # pairs too large for a CPU are never suggested there, however much memory
    assert pick(None, offload=False, ram=1000) == "gemma-4-e4b+assistant"


def test_unknown_sizes_are_estimated_once_refreshed() -> None:
    from specchat.core.fetch.catalog_refresh import apply_hub_figures
    from specchat.core.placement.suggestions import pair_need_gb

    cat = load_catalog()
    qwen38 = cat.pair("qwen3.8-27b+mtp")
    assert pair_need_gb(cat, qwen38) is None  # unknown until --refresh
    sizes = {
        "unsloth/Qwen3.8-27B-GGUF/Qwen3.8-27B-Q4_K_M.gguf": 16_500_000_000,
        "unsloth/Qwen3.8-27B-GGUF/mtp-Qwen3.8-27B-Q4_0.gguf": 450_000_000,
    }
    refreshed = apply_hub_figures(cat, sizes)
    assert pair_need_gb(refreshed, qwen38) == 18.5  # 16.95 GB of files + 1.5 GB, rounded up
    # a stated figure is never replaced by a refresh
    stated = {"unsloth/gemma-4-31B-it-qat-GGUF/gemma-4-31B-it-qat-UD-Q4_K_XL.gguf": 1}
    assert apply_hub_figures(cat, stated).model("gemma-4-31b-it-qat").size_gb == 17.3
    free = int(24 * GB)
    assert (
        pair_for_device(refreshed, offload=True, vram_free=free).pair.id == "gemma-4-31b+assistant"
    )
    assert pair_for_device(refreshed, offload=True, vram_free=int(18.6 * GB)).pair.id == (
        "qwen3.8-27b+mtp"
    )


def test_every_pair_names_its_drafter_and_the_default_stays_pinned() -> None:
    cat = load_catalog()
    default = cat.default_pair()
    target, draft = cat.pair_models(default)
    assert default.id == "qwen2.5-coder-1.5b+0.5b" and default.drafter == "draft"
    assert target.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert draft.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert (target.size, draft.size) == (1117320768, 491400064)
    drafters = {p.id: p.drafter for p in cat.pairs}
    assert drafters["qwen3.8-27b+mtp"] == "mtp"
    assert (
        drafters["qwen3.6-27b-mtp"] == "mtp-builtin" and cat.pair("qwen3.6-27b-mtp").draft is None
    )
    for size in ("e4b", "12b", "31b"):
        assert drafters[f"gemma-4-{size}+assistant"] == "assistant"
    assert drafters["qwen3-14b+0.6b"] == drafters["gpt-oss-120b+20b"] == "draft"
    assert cat.model("qwen3.8-27b-mtp-q4_0").file.startswith("mtp-")
    with pytest.raises(KeyError, match="no draft file"):
        cat.pair_models(cat.pair("qwen3.6-27b-mtp"))


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
    for key in ("drafter         string", "cpu             bool", "architecture    string"):
        assert key in header


def test_every_size_and_memory_figure_is_explained_in_the_header() -> None:
    """Each size_gb and vram_gb value in the file appears in the header's account of where the
    figures come from (or is a draft-model pair's, computed by the stated rule)."""
    text = (Path(__file__).resolve().parents[2] / "models" / "catalog.toml").read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    cat = load_catalog()
    for m in cat.models.values():
        if m.size_gb is not None and m.family in ("gemma4",):
            assert f"{m.size_gb:g}" in header or f"{m.size_gb * 1000:g} MB" in header, m.id
    for p in cat.pairs:
        t, d = cat.pair_files(p)
        if p.vram_gb is None:
            assert "A pair without vram_gb gets the same estimate" in header
            continue
        if p.drafter == "assistant":
            assert d is not None and t.size_gb is not None and d.size_gb is not None
            assert p.vram_gb == pytest.approx(
                round(t.size_gb + d.size_gb + 1.5 + 0.049, 1), abs=0.05
            ), p.id
        else:
            assert "vram_gb of the draft-model pairs" in header
    for unknown in ("Qwen3.6", "Qwen3.8", "Qwen3 14B", "gpt-oss"):
        assert unknown in header
