"""One decode of n tokens timed by two runtimes on the same model and machine: SpecChat's
(llama.cpp through llama-cpp-python's ctypes API) and llama.cpp's own `llama-server`, built from
the llama.cpp that llama-cpp-python vendors (`specchat-cli bench --compare-runtimes`).

llama-server has no request that returns every row's logits, so the two are compared on the
shape it can time: a prompt of n new tokens after a cached 128-token prefix, logits for the last
row only (its `timings.prompt_ms`, from the slot starting the prompt to the decode synchronised).
SpecChat's runtime times the same tokens on the same prefix, last row only, and once more with
every row's logits, which is what a verification asks of llama.cpp (llama-server's own
speculative batches ask for every row too, so the difference between the two SpecChat curves is
llama.cpp's, not the binding's). Both SpecChat curves are timed with a greedy request's argmax
chain in llama.cpp's graph (`Engine.measure_cost_curve`); llama-server picks its token on the
host from the one row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specchat.core.bench.server_peers import LlamaServerPeer, find_llama_server
from specchat.core.decoding.pricing.cost_curve import (
    CostCurve,
    CostCurveError,
    curve_from_times,
    filler_tokens,
)
from specchat.core.engines.local import Engine

BASE = 128  # the cached prefix every timed prompt extends (SpecChat's curve sits on as many)


def measure_server_curve(
    peer: LlamaServerPeer, filler: Sequence[int], ns: Sequence[int], repeats: int = 3
) -> CostCurve:
    """Time llama-server's decode of n new prompt tokens after a cached 128-token prefix for
    each n (n interleaved within each repeat, the median of `repeats`)."""
    if len(filler) < BASE:
        raise CostCurveError(f"the filler has {len(filler)} tokens, fewer than {BASE}")
    ns = sorted(set(ns) | {1})
    base = list(filler[:BASE])
    body = {"n_predict": 1, "cache_prompt": True, "temperature": 0.0, "top_k": 1, "seed": 0}
    peer.complete({**body, "prompt": base})  # the prefix cached, the weights touched
    times: dict[int, list[float]] = {n: [] for n in ns}
    at, last_first = 0, -1
    for _ in range(repeats):
        for n in ns:
            # new tokens that part from the previous request's at their first one: the server
            # reuses exactly the prefix and decodes n tokens
            while filler[at % len(filler)] == last_first:
                at += 1
            extra = [filler[(at + i) % len(filler)] for i in range(n)]
            last_first, at = extra[0], at + 1
            timings = peer.complete({**body, "prompt": base + extra}).get("timings", {})
            done = int(timings.get("prompt_n", -1))
            if done != n:
                raise CostCurveError(
                    f"llama-server decoded {done} prompt tokens, not {n}: its prompt cache did "
                    "not keep the prefix"
                )
            times[n].append(float(timings["prompt_ms"]) / 1000.0)
    return curve_from_times(times)


@dataclass(frozen=True)
class RuntimeCurves:
    """The three curves, in absolute time per decode (the curves' shapes times their t1)."""

    specchat_all: CostCurve
    specchat_last: CostCurve
    server_last: CostCurve

    def rows(self) -> list[dict[str, float]]:
        out = []
        for n, _ in self.server_last.points:
            last, server = _ms(self.specchat_last, n), _ms(self.server_last, n)
            out.append(
                {
                    "n": n,
                    "specchat_all_ms": _ms(self.specchat_all, n),
                    "specchat_last_ms": last,
                    "server_last_ms": server,
                    "ratio": last / server,
                }
            )
        return out

    def describe(self) -> str:
        return "\n".join(
            f"  n={r['n']:>2}: SpecChat {r['specchat_last_ms']:.1f} ms (every row "
            f"{r['specchat_all_ms']:.1f}), llama-server {r['server_last_ms']:.1f} ms, "
            f"ratio {r['ratio']:.3f}"
            for r in self.rows()
        )

    def as_dict(self) -> dict[str, object]:
        rows = self.rows()
        return {
            "specchat_all_rows": self.specchat_all.as_dict(),
            "specchat_last_row": self.specchat_last.as_dict(),
            "llama_server_last_row": self.server_last.as_dict(),
            "rows": rows,
            "max_ratio": max(r["ratio"] for r in rows),
        }


def _ms(curve: CostCurve, n: int) -> float:
    return curve.rel(n) * (curve.t1_s or 0.0) * 1000.0


def compare_runtimes(
    engine: Engine,
    specchat_all: CostCurve,
    *,
    peers: Sequence[object] = (),
    binary: Path | None = None,
) -> RuntimeCurves:
    """SpecChat's last-row curve and llama-server's at the n of `specchat_all` (the bench's
    curve), on the llama-server peer without speculation among `peers` when there is one, else
    on one started here from `binary` (default: the cached build) and closed after."""
    ns = [n for n, _ in specchat_all.points]
    last = engine.measure_cost_curve(ns=ns, rows="last")
    off = [p for p in peers if isinstance(p, LlamaServerPeer) and p.baseline is None]
    server = off[0] if off else None
    own = server is None
    if server is None:
        rt = engine.target
        server = LlamaServerPeer(
            find_llama_server(binary), rt.path, label="llama.cpp:server-off", spec_args=[],
            baseline=None, mode="off", threads=rt.n_threads, ctx=rt.n_ctx,
            retokenize=lambda text: rt.tokenize(text, add_special=False),
        )  # fmt: skip
    try:
        theirs = measure_server_curve(server, filler_tokens(engine.target), ns)
    finally:
        if own:
            server.close()
    return RuntimeCurves(specchat_all, last, theirs)
