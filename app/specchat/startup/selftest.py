"""`specchat --self-test`: load the default pair, generate a few tokens with speculation off and
on, print one line, exit 0 only if everything worked. The frozen build runs it in CI."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from specchat.core.params import GenerationParams
from specchat.core.types import Mode

PROMPT = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


def run_self_test(
    target: Path | None = None,
    draft: Path | None = None,
    extra: dict[str, object] | None = None,
) -> int:
    """`extra`: results of checks done before (the launcher's Qt check) to print in the same
    line; a key ending in ``_error`` among them fails the test."""
    t0 = time.perf_counter()
    result: dict[str, object] = {"ok": False, **(extra or {})}
    try:
        import llama_cpp

        from specchat.core.decoding.runtime import RuntimeConfig
        from specchat.core.engines.local import Engine
        from specchat.core.reply import Reply

        if target is None or draft is None:
            from specchat.core.store.local_models import default_pair_paths

            target, draft = default_pair_paths()
        result["llama_cpp_python"] = llama_cpp.__version__
        cfg = RuntimeConfig(n_ctx=1024)
        with Engine(target, draft, target_config=cfg, draft_config=cfg) as engine:
            params = GenerationParams(max_tokens=16)
            for mode in (Mode.OFF, Mode.DRAFT, Mode.LOOKUP):
                st = Reply.collect(engine.generate(PROMPT, params, mode)).final_stats
                assert st.tokens > 0, f"{mode.value}: no tokens"
                result[mode.value] = {
                    "tokens": st.tokens,
                    "tokens_per_s": round(st.tokens_per_s, 1),
                    "drafted": st.drafted,
                    "accepted": st.accepted,
                }
            assert result[Mode.DRAFT.value]["drafted"] > 0, "the draft model drafted nothing"  # type: ignore[index]
        failed = [key for key in result if key.endswith("_error")]
        result["ok"] = not failed
    except Exception as exc:  # report, never crash: the exit code carries the verdict
        result["error"] = f"{type(exc).__name__}: {exc}"
    result["seconds"] = round(time.perf_counter() - t0, 2)
    print("specchat self-test: " + json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(run_self_test())
