"""GPU layers "auto": the decision as a pure function of fixed memory figures, and what it
resolves to on this machine's build."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.core.placement.memory_plan import COMPUTE_OVERHEAD, ModelFootprint
from specchat.core.placement.offload import (
    AUTO,
    CPU_ONLY,
    Placement,
    decide_offload,
    parse_gpu_layers,
    resolve_offload,
)

CTX = 4096
# 4 GB of weights, 50 kB of KV cache per token, 28 layers; a 0.5 GB draft with 24 layers.
TARGET = ModelFootprint("target", 4_000_000_000, 50_000, 28)
DRAFT = ModelFootprint("draft", 500_000_000, 10_000, 24)
NEED_T = 4_000_000_000 + 50_000 * CTX + COMPUTE_OVERHEAD  # 4.47 GB
NEED_D = 500_000_000 + 10_000 * CTX + COMPUTE_OVERHEAD  # 0.81 GB


def decide(vram: int | None, *, offload: bool = True, draft=DRAFT, **layers):
    return decide_offload(TARGET, draft, CTX, offload=offload, vram_free=vram, **layers)


def test_everything_on_the_gpu_when_both_fit() -> None:
    t, d = decide(NEED_T + NEED_D)  # exactly enough
    assert (t.layers, d.layers) == (-1, -1)
    assert t.reason.startswith("all fits") and "needed" in t.reason
    assert t.where() == "GPU (all 29 layers)"


def test_the_draft_goes_first_and_the_target_gets_what_is_left() -> None:
    t, d = decide(3_000_000_000)
    assert d.layers == -1 and d.reason.startswith("fits whole")
    # (3 GB - 0.81 GB - 256 MiB of buffers) / (4.2048 GB / 29 layers) = 13.26
    assert t.layers == 13
    assert t.where() == "GPU 13/29 layers, rest on the CPU"
    assert "needed for everything" in t.reason


def test_a_gpu_too_small_for_the_draft_gets_part_of_the_draft_only() -> None:
    t, d = decide(600_000_000)
    # (600 MB - 256 MiB) / (540.96 MB / 25 layers) = 15.3
    assert (t.layers, d.layers) == (0, 15)


def test_without_a_draft_the_target_takes_what_fits() -> None:
    t, d = decide(3_000_000_000, draft=None)
    assert d is None and t.layers == 18  # (3 GB - 256 MiB) / 145.0 MB


def test_cpu_only_build_and_unknown_memory_mean_no_offload() -> None:
    t, d = decide(None, offload=False)
    assert (t.layers, d.layers) == (0, 0) and t.reason == d.reason == CPU_ONLY
    assert t.where() == "CPU"
    t, d = decide(None)
    assert (t.layers, d.layers) == (0, 0) and "no GPU memory" in t.reason


def test_explicit_numbers_are_kept_and_counted_first() -> None:
    t, d = decide(3_000_000_000, target_layers=10)
    assert t == Placement(10, "set in the settings", 28)
    assert d.layers == -1  # 3 GB - 10/29 of the target leaves room for the whole draft
    t, d = decide(3_000_000_000, target_layers=0, draft_layers=5)
    assert (t.layers, d.layers) == (0, 5)
    t, _ = decide(None, offload=False, target_layers=20)
    assert t.layers == 0 and t.reason.startswith(CPU_ONLY) and "20 layers" in t.reason


@pytest.mark.parametrize(
    ("text", "value"), [("auto", AUTO), (" AUTO ", AUTO), ("-1", -1), ("0", 0), ("33", 33), (7, 7)]
)
def test_gpu_layers_parse(text: object, value: object) -> None:
    assert parse_gpu_layers(text) == value


@pytest.mark.parametrize("bad", ["all", "-2", "1.5", True, 20_000])
def test_gpu_layers_refuse_nonsense(bad: object) -> None:
    with pytest.raises(ValueError, match="GPU layers"):
        parse_gpu_layers(bad)


def test_auto_on_this_cpu_only_build_is_zero(model_paths: tuple[Path, Path]) -> None:
    from specchat.core.machine.backend_info import gpu_offload_supported

    if gpu_offload_supported():
        pytest.skip("this build offloads to a GPU")
    decision = resolve_offload(*model_paths, CTX)
    assert decision.target.layers == 0 and decision.draft is not None
    assert decision.draft.layers == 0
    assert decision.target.reason == decision.draft.reason == "CPU-only build"
    assert decision.target.n_layers == 28 and decision.draft.n_layers == 24  # from the headers
    assert "CPU-only build" in decision.summary()


def test_cli_takes_auto_n_and_minus_one(capsys: pytest.CaptureFixture[str]) -> None:
    from specchat.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["generate", "--prompt", "hi"])
    assert (args.gpu_layers, args.draft_gpu_layers, args.mode) == ("auto", None, "off")
    args = parser.parse_args(["bench", "--gpu-layers", "-1", "--draft-gpu-layers", "auto"])
    assert (args.gpu_layers, args.draft_gpu_layers) == (-1, "auto")
    assert parser.parse_args(["chat"]).mode == "auto"  # Auto for new users here too
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "--prompt", "hi", "--gpu-layers", "most"])
    assert "GPU layers must be auto" in capsys.readouterr().err


def test_generate_with_auto_gpu_layers_runs(model_paths: tuple[Path, Path]) -> None:
    import json
    import subprocess
    import sys

    cli = Path(sys.executable).with_name("specchat-cli")
    proc = subprocess.run(
        [str(cli), "generate", "--prompt", "Say hi", "--max-tokens", "3", "--ctx", "512"]
        + ["--gpu-layers", "auto", "--json", "--target", str(model_paths[0]), "--no-draft"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["tokens"] >= 1
