"""The hybrid tiny models of tests/tinymodel.py: the same bytes every run, loaded by the pinned
llama.cpp as the architecture they claim (the qwen35 one with its NextN/MTP block, which an MTP
context builds its graph from), and the command line."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import tinymodel
from tinymodel import QWEN35_TINY, write_lfm2, write_qwen35_mtp

SCRIPT = Path(tinymodel.__file__)

# The qwen35 model seen by llama.cpp with its MTP block loaded (load_mtp), and an MTP context
# (its graph asserts eh_proj, enorm and hnorm are there): in a child process, as llama.cpp
# aborts on a missing tensor.
_LOAD = """
import sys, llama_cpp
from llama_cpp import _internals
llama_cpp.llama_backend_init()
mp = llama_cpp.llama_model_default_params()
mp.load_mtp = True
m = _internals.LlamaModel(path_model=sys.argv[1], params=mp, verbose=False)
cp = llama_cpp.llama_context_default_params()
cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 256, 64, 64, 1
cp.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
_internals.LlamaContext(model=m, params=cp, verbose=False)
arch = llama_cpp.llama_model_meta_val_str
buf = llama_cpp.ctypes.create_string_buffer(64)
arch(m.model, b"general.architecture", buf, 64)
print(buf.value.decode(), llama_cpp.llama_model_n_layer(m.model),
      llama_cpp.llama_model_n_layer_nextn(m.model),
      bool(llama_cpp.llama_model_is_hybrid(m.model)))
"""


def test_the_files_are_the_same_bytes_every_run(tmp_path: Path) -> None:
    for write in (write_qwen35_mtp, write_lfm2):
        a = write(tmp_path / "a.gguf").read_bytes()
        b = write(tmp_path / "b.gguf").read_bytes()
        assert a == b
        assert 100_000 < len(a) < 1_000_000
    seed0 = write_qwen35_mtp(tmp_path / "c.gguf").read_bytes()
    assert write_qwen35_mtp(tmp_path / "d.gguf", seed=1).read_bytes() != seed0


@pytest.mark.parametrize("quantized", [False, True])
def test_qwen35_with_its_mtp_block_loads_as_qwen35(tmp_path: Path, quantized: bool) -> None:
    """The tiny shape in F32, and in Q8_0 through the writer the real shape uses."""
    path = write_qwen35_mtp(tmp_path / "q.gguf", replace(QWEN35_TINY, quantized=quantized))
    run = subprocess.run([sys.executable, "-c", _LOAD, str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["qwen35", "4", "1", "True"]


def test_the_command_line_writes_and_names_the_files(tmp_path: Path) -> None:
    for arch in ("qwen35-mtp", "lfm2"):
        run = subprocess.run(
            [sys.executable, str(SCRIPT), arch, str(tmp_path)], capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        (line,) = run.stdout.splitlines()
        role, _, path = line.partition("=")
        assert role == "target" and Path(path).is_file() and Path(path).parent == tmp_path
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "mamba9", str(tmp_path)], capture_output=True, text=True
    )
    assert bad.returncode != 0
    assert "unknown architecture 'mamba9'" in bad.stderr and "Traceback" not in bad.stderr
