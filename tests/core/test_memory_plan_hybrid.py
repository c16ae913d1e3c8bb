"""The memory plan and doctor count a hybrid target's recurrent state, its rollback snapshots and
what an MTP head or assistant adds, from the GGUF header alone; checked against llama.cpp's own
report of the buffers it allocates (its log, `ModelRuntime.context_report`), on real llama.cpp
with the generated models of tests/tinymodel.py.

llama.cpp logs its buffers in 0.01 MiB steps (10,486 bytes), so the models whose snapshots are
compared are a little wider than the tiny ones: their recurrent states are 61.5 KB (qwen35) and
12 KB (lfm2), and every recurrent buffer compared is at least 60 KB (lfm2: 5 states or more),
where a 0.01 MiB step is under 9 %.
AGREE is the agreement asked of the plan: 15 % of llama.cpp's figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest
from tinymodel import (
    LFM2_TINY,
    QWEN35_TINY,
    Lfm2Shape,
    write_lfm2,
    write_loadable_gguf,
    write_qwen35_mtp,
)
from tinymodel_gemma4 import write_gemma4_pair

from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig
from specchat.core.doctor import SystemFacts, advice, render, rows
from specchat.core.doctor_target import target_facts
from specchat.core.gguf.header import GGUFInfo, read_gguf_info
from specchat.core.gguf.recurrent import HYBRID_ROLLBACK_TOKENS, state_bytes
from specchat.core.machine.backend_choice import BuildFacts
from specchat.core.machine.backend_info import BackendInfo
from specchat.core.machine.llama_log import LoadReport, capture
from specchat.core.placement.footprint import ModelFootprint
from specchat.core.placement.memory_plan import MachineMemory, MemoryPlan, plan_memory

AGREE = 0.15
GB = 10**9
MACHINE = MachineMemory(8 * GB, 16 * GB)
GPU = MachineMemory(8 * GB, 16 * GB, vram_free=8 * GB, vram_total=8 * GB, gpu_name="GPU0")
N_CTX = 1024
BIN = Path(sys.executable).parent

# wider than the tiny shapes (see the module's docstring); 2.1 MB and 21.5 MB of F32
MID_QWEN35 = replace(
    QWEN35_TINY, n_embd=128, head_dim=32, k_head_dim=32, k_heads=4, v_heads=4, name="Mid qwen35"
)
MID_LFM2 = replace(LFM2_TINY, n_embd=512, name="Mid LFM2")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("plan-hybrid")
    g_target, g_assistant = write_gemma4_pair(d / "gemma4")
    return {
        "qwen35": write_qwen35_mtp(d / "mid-qwen35.gguf", MID_QWEN35),
        "lfm2": write_lfm2(d / "mid-lfm2.gguf", MID_LFM2),
        "tiny-qwen35": write_qwen35_mtp(d / "tiny-qwen35-mtp.gguf"),
        "qwen2": write_loadable_gguf(d / "tiny-qwen2.gguf"),
        "gemma4": g_target,
        "assistant": g_assistant,
    }


def _report(path: Path, n_batch: int = 512, **kw: int) -> tuple[int, LoadReport]:
    """(n_rs_seq llama.cpp granted, llama.cpp's account of the context's buffers)."""
    rt = ModelRuntime(path, RuntimeConfig(n_ctx=N_CTX, n_threads=1, n_batch=n_batch), **kw)
    try:
        return rt.n_rs_seq, rt.context_report
    finally:
        rt.close()


def _logged(report: LoadReport, kind: str) -> int:
    return sum(b for (_, k), b in report.buffers.items() if k == kind)


def _agrees(planned: int, logged: int) -> bool:
    return logged > 0 and abs(planned - logged) <= AGREE * logged


def _plan(
    path: Path, n_batch: int = 512, rollback_tokens: int = HYBRID_ROLLBACK_TOKENS
) -> MemoryPlan:
    info = read_gguf_info(path)
    fp = ModelFootprint.from_info(info, n_batch=n_batch, rollback_tokens=rollback_tokens)
    return plan_memory(fp, None, N_CTX, machine=MACHINE)


@pytest.mark.parametrize(
    ("arch", "n"),
    [("qwen35", 1), ("qwen35", 4), ("qwen35", 16), ("qwen35", 62),
     ("lfm2", 4), ("lfm2", 16), ("lfm2", 81)],
)  # fmt: skip
def test_the_plans_snapshots_agree_with_llamas_recurrent_buffer(
    models: dict[str, Path], arch: str, n: int
) -> None:
    """The plan, made from the header, against the RS buffer llama.cpp allocates for a context
    with n snapshots (its live state and the n copies); lfm2's 81 is the most its graph takes."""
    plan = _plan(models[arch], n_batch=128, rollback_tokens=n)
    granted, report = _report(models[arch], n_batch=128, rollback_tokens=n)
    rs = _logged(report, "RS")
    assert plan.snapshots == granted == n
    assert _agrees(plan.target_recurrent, rs), (plan.target_recurrent, rs)
    assert _agrees(plan.snapshot_bytes, rs * n // (1 + n)), (plan.snapshot_bytes, rs)
    assert f"with {n} rollback snapshots" in plan.summary()


def test_the_plan_counts_the_snapshots_the_runtime_asks_for(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """Without a count given, the plan assumes what a target's runtime asks llama.cpp for by
    default, also where llama.cpp's bounds cut it: LFM2-350M/1.2B's 16-layer layout aborts
    above 20 snapshots, so its runtime keeps 12; an 8-token batch holds 6."""
    layout = tuple(int(i in (2, 5, 8, 10, 12, 14)) for i in range(16))
    lfm2_16 = write_lfm2(tmp_path / "lfm2-16.gguf", Lfm2Shape(
        n_embd=32, n_ff=64, n_head=2, head_kv=layout, l_cache=3, n_vocab=None, context=4096,
        name="LFM2 16-layer layout",
    ))  # fmt: skip
    for path, n_batch in ((models["tiny-qwen35"], 512), (lfm2_16, 512), (models["lfm2"], 8)):
        fp = ModelFootprint.from_info(read_gguf_info(path), n_batch=n_batch)
        granted, _ = _report(path, n_batch=n_batch)
        assert fp.snapshots == granted, path.name
    assert ModelFootprint.from_info(read_gguf_info(models["tiny-qwen35"])).snapshots == 16
    assert HYBRID_ROLLBACK_TOKENS == 16
    assert ModelFootprint.from_info(read_gguf_info(lfm2_16)).snapshots == 12
    assert ModelFootprint.from_info(read_gguf_info(models["lfm2"]), n_batch=8).snapshots == 6


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_a_hybrid_plan_grows_by_its_snapshots_a_transformers_does_not(
    models: dict[str, Path], arch: str
) -> None:
    with_snapshots, without = _plan(models[arch]), _plan(models[arch], rollback_tokens=0)
    grown = with_snapshots.total - without.total
    assert grown == with_snapshots.snapshot_bytes > 0
    # ... by what llama.cpp's RS buffer grows by
    _, rs_on = _report(models[arch])
    _, rs_off = _report(models[arch], rollback_tokens=0)
    assert _agrees(grown, _logged(rs_on, "RS") - _logged(rs_off, "RS"))
    if arch == "qwen35":  # (lfm2's one state, 12 KB, is near the log's 10 KB step)
        assert _agrees(without.target_recurrent, _logged(rs_off, "RS"))
    # a transformer: no state, no snapshots, and none in llama.cpp's context either
    t_with, t_without = _plan(models["qwen2"]), _plan(models["qwen2"], rollback_tokens=0)
    assert t_with.total == t_without.total
    assert t_with.target_recurrent == t_with.snapshots == 0
    assert "recurrent" not in t_with.summary()
    granted, report = _report(models["qwen2"])
    assert granted == 0 and _logged(report, "RS") == 0


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_a_hybrids_kv_cache_is_its_attention_layers_only(
    models: dict[str, Path], arch: str
) -> None:
    """llama.cpp gives only the attention layers a KV cache (qwen35: 1 of 4, and not the NextN
    block, which only the MTP head's context holds); counting every layer, as for a
    transformer, was 5 times too much for qwen35."""
    plan = _plan(models[arch])
    _, report = _report(models[arch])
    assert _agrees(plan.target_kv, _logged(report, "KV")), (plan.target_kv, report.buffers)


def test_a_hybrid_draft_keeps_no_snapshots(models: dict[str, Path]) -> None:
    """A draft model's runtime asks for none (its cuts span many decodes): the plan counts one
    state for it, what llama.cpp allocates for a context without snapshots."""
    target = ModelFootprint.from_info(read_gguf_info(models["qwen2"]))
    draft = ModelFootprint.from_info(read_gguf_info(models["qwen35"]), as_draft=True)
    plan = plan_memory(target, draft, N_CTX, machine=MACHINE)
    _, report = _report(models["qwen35"], rollback_tokens=0)
    assert plan.snapshots == 0 and plan.target_recurrent == 0
    assert _agrees(plan.draft_recurrent, _logged(report, "RS"))
    # the same file as a target keeps its snapshots
    target_fp = ModelFootprint.from_info(read_gguf_info(models["qwen35"]))
    assert plan_memory(target_fp, None, N_CTX, machine=MACHINE).snapshots == 16


def test_offloaded_layers_take_their_snapshots_to_the_gpu(models: dict[str, Path]) -> None:
    """The recurrent state lives with its layers: all layers on the GPU, all of it in VRAM;
    half the layers, about half of it."""
    fp = ModelFootprint.from_info(read_gguf_info(models["qwen35"]))
    none = replace(fp, snapshots=0)
    whole = plan_memory(fp, None, N_CTX, machine=GPU, target_gpu_layers=-1)
    whole_0 = plan_memory(none, None, N_CTX, machine=GPU, target_gpu_layers=-1)
    assert whole.vram_needed - whole_0.vram_needed == fp.snapshot_bytes
    assert whole.ram_needed == whole_0.ram_needed
    cpu, cpu_0 = (plan_memory(m, None, N_CTX, machine=GPU) for m in (fp, none))
    assert cpu.ram_needed - cpu_0.ram_needed == fp.snapshot_bytes and cpu.vram_needed == 0
    device = fp.device_plan(N_CTX)
    assert device is not None and device.recurrent == fp.recurrent_bytes()


def _head_context(target: Path, assistant: Path | None) -> LoadReport:
    """llama.cpp's account of the drafting context an MTP head or assistant creates."""
    from specchat.core.decoding.drafters.heads import find_head
    from specchat.core.decoding.drafters.mtp import MTPDrafter

    rt = ModelRuntime(target, RuntimeConfig(n_ctx=N_CTX, n_threads=1))
    try:
        head = find_head(target, assistant=assistant)
        assert head is not None
        with capture() as log:
            drafter = MTPDrafter(rt, head)
        drafter.close()
        return log.report()
    finally:
        rt.close()


def test_a_built_in_mtp_head_adds_its_kv_cache_and_buffers(models: dict[str, Path]) -> None:
    """qwen35 with a NextN block: the engine loads a head with it whose own context holds the
    NextN block's KV cache and a compute buffer (no recurrent state); on a CPU its weights are
    the target's mapped file again."""
    path = models["tiny-qwen35"]
    fp = ModelFootprint.from_info(read_gguf_info(path))
    assert fp.head_layers == 1
    plan = plan_memory(fp, None, N_CTX, machine=MACHINE)
    head = _head_context(path, None)
    assert _logged(head, "RS") == 0
    assert _agrees(plan.head_bytes, _logged(head, "KV") + _logged(head, "compute"))
    assert "built-in MTP head" in plan.summary()
    without = plan_memory(replace(fp, head_layers=0), None, N_CTX, machine=MACHINE)
    assert plan.total - without.total == plan.head_bytes
    # on a GPU the head's copy of the layers takes memory again
    gpu = plan_memory(fp, None, N_CTX, machine=GPU, target_gpu_layers=-1)
    assert gpu.head_bytes >= fp.device_weights_bytes + plan.head_bytes


def test_an_assistant_adds_its_weights_and_buffers_but_no_kv(models: dict[str, Path]) -> None:
    """A Gemma 4 assistant reads the target's KV cache: its context allocates none."""
    target = ModelFootprint.from_info(read_gguf_info(models["gemma4"]))
    assistant = ModelFootprint.from_info(read_gguf_info(models["assistant"]), as_draft=True)
    assert assistant.drafter == "assistant"
    plan = plan_memory(target, assistant, N_CTX, machine=MACHINE)
    assert plan.draft_kv == 0 and plan.draft_weights == assistant.weights_bytes > 0
    assert plan.head_bytes == 0
    head = _head_context(models["gemma4"], models["assistant"])
    assert _logged(head, "KV") == 0 and _logged(head, "compute") > 0


def test_an_mtp_sidecar_adds_its_nextn_kv_and_replaces_the_built_in_head(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """An mtp-*.gguf holds only NextN blocks: its context has their KV cache (here one block,
    2 KV heads of 16 / 4 = 4 values for K and for V, f16: 32 bytes a token) and no recurrent
    state; the engine drafts with it instead of the target's own head."""
    from fakehub import write_arch_gguf

    sidecar = write_arch_gguf(tmp_path / "mtp-x.gguf", "qwen35", n_layers=4, nextn=1, trunk=False)
    fp = ModelFootprint.from_info(read_gguf_info(sidecar), as_draft=True)
    assert fp.drafter == "mtp" and fp.kv_bytes_per_token == 32 and fp.state_bytes == 0
    target = ModelFootprint.from_info(read_gguf_info(models["tiny-qwen35"]))
    plan = plan_memory(target, fp, N_CTX, machine=MACHINE)
    assert plan.draft_kv == 32 * N_CTX and plan.draft_recurrent == 0
    assert plan.head_bytes == 0 < plan_memory(target, None, N_CTX, machine=MACHINE).head_bytes


def _header(path: Path, arch: str, keys: dict[str, object]) -> GGUFInfo:
    """A header-only GGUF (one dummy tensor): what the plan and doctor read."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_string("general.name", f"header {arch}")
    for key, value in keys.items():
        name = f"{arch}.{key}"
        if isinstance(value, list):
            w.add_array(name, value)
        else:
            assert isinstance(value, int)
            w.add_uint32(name, value)
    w.add_tensor("x.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return read_gguf_info(path)


def test_nemotron_h_mamba2_state_from_its_header(tmp_path: Path) -> None:
    """Nemotron-H: a layer is Mamba-2 when it has neither KV heads nor an FFN (llama.cpp's
    rule). Layers M, FFN, M, attention, M, FFN; conv 4, inner 64, state 16, 2 groups: each
    Mamba-2 layer keeps (4 - 1) x (64 + 2 x 2 x 16) = 384 conv values and 16 x 64 = 1024 SSM
    values, float32: 5,632 bytes, 16,896 for the three."""
    info = _header(tmp_path / "nemotron-h.gguf", "nemotron_h", {
        "block_count": 6, "embedding_length": 32, "attention.head_count": 4,
        "attention.head_count_kv": [0, 0, 0, 2, 0, 0],
        "feed_forward_length": [0, 64, 0, 0, 0, 64], "attention.key_length": 8,
        "attention.value_length": 8, "ssm.conv_kernel": 4, "ssm.inner_size": 64,
        "ssm.state_size": 16, "ssm.group_count": 2, "ssm.time_step_rank": 4,
    })  # fmt: skip
    assert state_bytes(info) == 16_896
    fp = ModelFootprint.from_info(info)
    assert fp.snapshots == HYBRID_ROLLBACK_TOKENS and fp.rollback
    assert fp.kv_bytes_per_token == 2 * (8 + 8) * 2  # one attention layer, 2 KV heads, f16


def test_a_hybrid_the_plan_cannot_size_is_said_so(tmp_path: Path) -> None:
    info = _header(tmp_path / "jamba.gguf", "jamba", {
        "block_count": 4, "embedding_length": 32, "attention.head_count": 4,
        "attention.head_count_kv": [0, 0, 0, 2],
    })  # fmt: skip
    fp = ModelFootprint.from_info(info)
    assert fp.state_bytes is None and fp.hybrid and not fp.rollback and fp.snapshots == 0
    plan = plan_memory(fp, None, N_CTX, machine=MACHINE)
    assert any("recurrent-state size is unknown" in n for n in plan.notes)
    assert plan.fits and "recurrent-state size is unknown" in plan.summary()


# ---------------------------------------------------------------------------------------------
# doctor


def test_doctor_says_what_a_hybrid_targets_snapshots_cost(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """`specchat-cli doctor` with a hybrid target chosen in the settings: hybrid, rollback
    possible, the runtime's snapshot count, their cost as llama.cpp allocates it."""
    path = models["qwen35"]
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "settings.json").write_text(json.dumps({"target_path": str(path)}))
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(data_dir)}
    cli = str(BIN / "specchat-cli")
    run = subprocess.run([cli, "doctor", "--json"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    t = json.loads(run.stdout)["target"]
    assert t["path"] == str(path) and t["hybrid"] and t["rollback"] and t["build_rollback"]
    assert (t["recurrent_layers"], t["layers"]) == (3, 4)
    granted, report = _report(path, n_batch=512)
    assert t["snapshots"] == granted == HYBRID_ROLLBACK_TOKENS
    rs = _logged(report, "RS")
    assert _agrees(t["snapshot_bytes"], rs * granted // (1 + granted))
    text = subprocess.run([cli, "doctor"], capture_output=True, text=True, env=env).stdout
    assert f"Hybrid rollback    yes: {granted} snapshots of its recurrent state" in text
    assert "MTP head           built in (1 NextN layer)" in text


def test_doctor_on_a_hybrid_llama_cannot_roll_back(tmp_path: Path) -> None:
    """qwen3next has Qwen3.5's delta-net layers but is not in llama.cpp's rollback list."""
    path = tmp_path / "qwen3next.gguf"
    _header(path, "qwen3next", {
        "block_count": 8, "embedding_length": 32, "attention.head_count": 4,
        "attention.head_count_kv": 2, "ssm.conv_kernel": 4, "ssm.inner_size": 64,
        "ssm.state_size": 16, "ssm.group_count": 2, "full_attention_interval": 4,
    })  # fmt: skip
    facts = target_facts(path)
    assert facts.hybrid and not facts.rollback and facts.snapshots == 0
    assert facts.recurrent_layers == 6
    system = SystemFacts(
        specchat="0.1.0", python="3.11.7", python_exe="/v/bin/python", os="Linux",
        backend=BackendInfo(llama_cpp_python="0.3.36"), build=BuildFacts("Linux", "x86_64"),
        choice=None, default_pair_installed=True, target=facts,
    )  # fmt: skip
    shown = dict(rows(system))
    assert shown["Target"] == "qwen3next.gguf (qwen3next, hybrid: 6 of 8 layers recurrent)"
    assert shown["Hybrid rollback"].startswith("no: llama.cpp cannot roll back qwen3next's")
    assert any("runs it without speculation" in a for a in advice(system))
    assert "Hybrid rollback" in render(system)
