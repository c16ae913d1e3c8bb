"""SpecChat's GPU path on llama.cpp's Vulkan backend, with the real models, checked against
llama.cpp's own account of what it did (its log: layers offloaded, device buffer sizes) and
against the plain run on the same device.

The device in CI is llvmpipe (Vulkan on the CPU): real device buffers, offloaded layers,
host/device copies and synchronisation, at well under a token a second. So: few tests, few
tokens; the 1.5B target only once.
"""

from __future__ import annotations

import gc
import re
import subprocess
from pathlib import Path

import psutil
import pytest

from specchat.core.bench.compare import (
    NEAR_TIE_GPU_LOGITS,
    PassResult,
    find_divergence,
    near_tie_limit,
)
from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.local import Engine
from specchat.core.gguf.header import read_gguf_info
from specchat.core.machine.backend_info import list_devices
from specchat.core.machine.llama_log import LoadReport, capture
from specchat.core.params import GenerationParams
from specchat.core.placement.memory_plan import ModelFootprint
from specchat.core.placement.offload import decide_offload, resolve_offload
from specchat.core.types import Top2
from specchat.gui.models.panel import model_line

pytestmark = pytest.mark.gpu

N_CTX = 1024
PROMPT = [{"role": "user", "content": "Write a Python function that returns the square of x."}]
EDIT = [
    {
        "role": "user",
        "content": "Repeat this code exactly:\n```python\ndef add(a, b):\n    return a + b\n```",
    }
]
TOLERANCE = 0.15  # the plan's figures against llama.cpp's device buffers


def cfg(layers: int) -> RuntimeConfig:
    return RuntimeConfig(n_ctx=N_CTX, n_gpu_layers=layers)


def load(target: Path, draft: Path | None, t_layers: int, d_layers: int):
    """An engine with each model loaded under its own capture of llama.cpp's log."""
    with capture() as t_log:
        engine = Engine(target, None, target_config=cfg(t_layers))
    d_report = None
    if draft is not None:
        with capture() as d_log:
            engine.load_draft(draft, cfg(d_layers))
        d_report = d_log.report()
    return engine, t_log.report(), d_report


def greedy(engine: Engine, messages, mode: str, n: int) -> list[tuple[int, Top2 | None]]:
    params = GenerationParams(max_tokens=n, record_top2=True)
    out: list[tuple[int, Top2 | None]] = []
    for ev in engine.generate(messages, params, mode):
        tops = ev.top2 or (None,) * len(ev.token_ids)
        out.extend(zip(ev.token_ids, tops, strict=True))
    return out


def assert_same_or_near_tie(plain, spec, what: str) -> None:
    """The speculative run gives the plain run's tokens, or parts from it at a near-tie: both
    runs' two best tokens are the same pair, in swapped order, with a gap under one logit."""
    for i, ((a, ta), (b, tb)) in enumerate(zip(plain, spec, strict=False)):
        if a != b:
            assert ta is not None and tb is not None
            assert {ta.first_id, ta.second_id} == {tb.first_id, tb.second_id}, (what, i)
            assert ta.gap < 1.0, f"{what}: divergence at {i} with a clear winner ({ta.gap:.3f})"
            print(f"{what}: near-tie at token {i} (plain gap {ta.gap:.4f})")
            return
    assert len(plain) == len(spec), what
    print(f"{what}: identical ({len(plain)} tokens)")


def max_storage_buffer() -> int:
    """The device's largest storage buffer (Vulkan's maxStorageBufferRange, from vulkaninfo):
    llama.cpp keeps a bigger output matrix on the host (128 MiB on llvmpipe)."""
    out = subprocess.run(["vulkaninfo"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"maxStorageBufferRange\s*=\s*(\d+)", out)
    assert m, "vulkaninfo gives no maxStorageBufferRange"
    return int(m.group(1))


def rss() -> int:
    """This process's resident memory: on llvmpipe the device memory is host memory, and its
    ggml_backend_dev_memory is a fixed heap size (no memory-budget extension)."""
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def vulkan_free() -> int:
    dev = next(d for d in list_devices() if d.backend.lower() == "vulkan")
    return int(dev.free or 0)


def plan_vs_llama(name: str, fp: ModelFootprint, report: LoadReport) -> None:
    """Print the plan's weights, KV cache and compute buffer beside llama.cpp's device buffers
    and require each within TOLERANCE."""
    plan = fp.device_plan(N_CTX, max_tensor=max_storage_buffer())
    assert plan is not None
    rows = [
        ("weights", plan.weights, report.device_bytes("model")),
        ("KV cache", plan.kv, report.device_bytes("KV")),
        ("compute", plan.compute, report.device_bytes("compute")),
    ]
    mib = 1 << 20
    for what, planned, actual in rows:
        print(f"{name} {what:8s}: plan {planned / mib:8.1f} MiB, llama.cpp {actual / mib:8.1f} MiB")
    for what, planned, actual in rows:
        assert actual > 0, f"{name}: llama.cpp reported no {what} buffer on the device"
        assert abs(planned - actual) <= TOLERANCE * actual, (name, what, planned, actual)


def test_default_pair_whole_on_the_device(model_paths, vulkan_device) -> None:
    """'auto' with room for both: every layer of both on the device, as llama.cpp reports;
    the plan's figures against llama.cpp's buffers; the draft run gives the plain run's text;
    closing the engine gives the device memory back."""
    target, draft = model_paths
    decision = resolve_offload(target, draft, N_CTX)
    print(decision.summary())
    assert decision.target.layers == -1 and decision.draft is not None
    assert decision.draft.layers == -1
    free_before = vulkan_free()
    engine, t_rep, d_rep = load(target, draft, -1, -1)
    try:
        assert d_rep is not None
        for rep, path in ((t_rep, target), (d_rep, draft)):
            n = (read_gguf_info(path).n_layers or 0) + 1  # + the output layer
            assert (rep.layers_offloaded, rep.layers_total) == (n, n), rep
            assert rep.devices and rep.devices[0].name == vulkan_device.name
        assert t_rep.where() == "Vulkan0 (llvmpipe): 29/29 layers"
        assert d_rep.where() == "Vulkan0 (llvmpipe): 25/25 layers"
        print(f"target: {t_rep.where()}; draft: {d_rep.where()}")
        loaded = engine.describe()
        assert loaded["target"] is not None and loaded["draft"] is not None
        panel = model_line("Target", loaded["target"], decision.target)
        assert "Vulkan0 (llvmpipe): 29/29 layers" in panel, panel
        assert "Vulkan0 (llvmpipe): 25/25 layers" in model_line("Draft", loaded["draft"])
        for name, path, rep in (("target", target, t_rep), ("draft", draft, d_rep)):
            plan_vs_llama(name, ModelFootprint.from_info(read_gguf_info(path)), rep)
        loaded_free = vulkan_free()
        print(f"device free: {free_before >> 20} MiB before, {loaded_free >> 20} MiB loaded")
        plain = greedy(engine, PROMPT, "off", 6)
        spec = greedy(engine, PROMPT, "draft", 6)
        assert_same_or_near_tie(plain, spec, "default pair, draft, all on the device")
    finally:
        engine.close()
    gc.collect()
    after = vulkan_free()
    print(f"device free after close: {after >> 20} MiB")
    assert after >= free_before - (16 << 20), "closing the engine left device memory in use"


def test_partial_offload_places_the_draft_first(model_paths, vulkan_device) -> None:
    """A device budget too small for both: the draft whole on the device, the target in part;
    llama.cpp's own count agrees, and draft and lookup speculation still give the plain run's
    text (0.5B as its own draft: the speed matters here)."""
    small = model_paths[1]
    fp = ModelFootprint.from_info(read_gguf_info(small))
    whole = fp.device_plan(N_CTX)
    assert whole is not None
    budget = whole.total + whole.compute + (whole.total - whole.compute) // 2  # half the target
    t_place, d_place = decide_offload(fp, fp, N_CTX, offload=True, vram_free=budget)
    assert d_place is not None and d_place.layers == -1, d_place
    assert 0 < t_place.layers < (fp.n_layers or 0), t_place
    engine, t_rep, d_rep = load(small, small, t_place.layers, d_place.layers)
    try:
        assert d_rep is not None
        assert (t_rep.layers_offloaded, t_rep.layers_total) == (t_place.layers, 25), t_rep
        assert (d_rep.layers_offloaded, d_rep.layers_total) == (25, 25), d_rep
        assert t_rep.where() == f"Vulkan0 (llvmpipe): {t_place.layers}/25 layers"
        assert t_rep.device_bytes("model") < d_rep.device_bytes("model")
        print(f"target: {t_rep.where()}; draft: {d_rep.where()}")
        plain = greedy(engine, EDIT, "off", 8)
        for mode in ("draft", "lookup"):
            spec = greedy(engine, EDIT, mode, 8)
            assert_same_or_near_tie(plain, spec, f"partial offload, {mode}")
    finally:
        engine.close()


def test_both_on_the_device_then_another_pair(model_paths, vulkan_device) -> None:
    """The 0.5B pair whole on the device: draft and lookup give the plain run's text; loading
    another draft and unloading it gives the device memory back (llama.cpp's device report)."""
    small = model_paths[1]
    free_before = vulkan_free()
    engine, t_rep, d_rep = load(small, small, -1, -1)
    try:
        assert t_rep.where() == "Vulkan0 (llvmpipe): 25/25 layers"
        # a greedy divergence here is judged against what a GPU's batches move the margin by
        a_id, b_id = engine.target.tokenize(" apple banana", add_special=False)[:2]
        wide = find_divergence(
            engine,
            PassResult(mode="off", token_ids=[1, a_id], gaps=[3.0, 1.5]),
            PassResult(mode="draft", token_ids=[1, b_id], gaps=[3.0, 1.5]),
            GenerationParams(),
        )
        assert engine.target_on_gpu and near_tie_limit(engine) == NEAR_TIE_GPU_LOGITS
        assert wide is not None and wide.near_tie and "GPU" in wide.explanation
        plain = greedy(engine, EDIT, "off", 8)
        for mode in ("draft", "lookup"):
            assert_same_or_near_tie(plain, greedy(engine, EDIT, mode, 8), f"all on device, {mode}")
        assert d_rep is not None
        on_device = sum(d_rep.device_bytes(k) for k in ("model", "KV", "compute"))
        with_draft = rss()
        engine.unload_draft()
        without = rss()
        print(
            f"draft's device buffers {on_device >> 20} MiB (llama.cpp); process memory "
            f"{with_draft >> 20} MiB with the draft, {without >> 20} MiB after unloading it"
        )
        assert with_draft - without >= on_device // 2, "unloading the draft freed little"
        engine.load_draft(small, cfg(-1))  # another draft: the memory comes back in use
        assert rss() - without >= on_device // 2
    finally:
        engine.close()
    assert vulkan_free() >= free_before - (16 << 20)
