"""Shared fixtures. Tests use the real default model pair from the model store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TARGET_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def _store_dir() -> Path:
    from specchat.core.store.store import ModelStore

    return ModelStore().root


@pytest.fixture(scope="session")
def model_paths() -> tuple[Path, Path]:
    root = _store_dir()
    target, draft = root / TARGET_FILE, root / DRAFT_FILE
    if not (target.is_file() and draft.is_file()):
        pytest.fail(
            f"the default model pair is not in the store ({root}); "
            "run `specchat-cli models fetch-default` first"
        )
    return target, draft


@pytest.fixture(scope="session")
def engine(model_paths):
    """One engine with the default pair, shared by the whole session (loading costs seconds)."""
    from specchat.core.decoding.runtime import RuntimeConfig
    from specchat.core.engines.local import Engine

    cfg = RuntimeConfig(n_ctx=2048, n_threads=int(os.environ.get("SPECCHAT_TEST_THREADS", "0")))
    eng = Engine(model_paths[0], model_paths[1], target_config=cfg, draft_config=cfg)
    # Draft lengths from the text alone, not from how busy this machine is right now: the
    # tests check what speculation produces, and a loaded CI machine must not switch it off.
    # (The cost model's timing decisions have their own tests, and the benchmark measures them.)
    eng.cost.steady()
    yield eng
    eng.close()
