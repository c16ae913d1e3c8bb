"""The benchmark: suite files, the statistics, and one short real run on the default pair."""

from __future__ import annotations

import json
import math
import os
import threading

import pytest

from specchat.core.bench.native_peers import (
    generated_text,
    parse_perf_output,
    parse_speculative_output,
)
from specchat.core.bench.report import (
    build_report,
    first_divergence,
    models_info,
    overall,
    records,
    to_json,
)
from specchat.core.bench.report_md import to_markdown
from specchat.core.bench.runner import (
    REFERENCE,
    BenchRun,
    BenchSettings,
    RssSampler,
    RunResult,
    Suite,
    SuiteError,
    load_suite,
    parse_modes,
    parse_suite,
    run_bench,
    schedule,
)
from specchat.core.bench.stats import geomean, median
from specchat.core.bench.suite import KINDS

GOOD = '''
name = "tiny"

[[prompts]]
id = "a"
kind = "code"
prompt = "Write hello world."

[[prompts]]
id = "b.2"
kind = "quote"
prompt = """Quote it."""
system = "Be brief."
max_tokens = 32
'''


# -- suites ---------------------------------------------------------------------------------
def test_parse_a_valid_suite() -> None:
    suite = parse_suite(GOOD, "tiny.toml")
    assert suite.name == "tiny"
    assert [p.id for p in suite.prompts] == ["a", "b.2"]
    b = suite.prompts[1]
    assert (b.kind, b.system, b.max_tokens) == ("quote", "Be brief.", 32)
    assert b.messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Quote it."},
    ]
    assert suite.prompts[0].messages() == [{"role": "user", "content": "Write hello world."}]
    assert [p.id for p in suite.select(["b.2"]).prompts] == ["b.2"]


def test_the_default_suite_covers_every_kind() -> None:
    suite = load_suite()
    counts = {k: sum(p.kind == k for p in suite.prompts) for k in KINDS}
    assert counts == {"code": 3, "edit": 9, "quote": 5, "chat": 2}
    conversations = [p for p in suite.prompts if p.turns]
    assert len(conversations) == 3  # edit twice, summary then citations, reference quotes
    assert any(p.system for p in conversations)
    met_again = {p.id: p.history for p in suite.prompts if p.history}
    assert set(met_again) == {"cross-same-question", "cross-same-file"}
    assert all(len(h) == 2 for h in met_again.values())  # the question and the earlier reply


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[prompts]\nid=", "not valid TOML"),
        ('name = "x"', "no [[prompts]] entries"),
        ('[[prompts]]\nid = "a"\nprompt = "p"', "kind must be one of"),
        ('[[prompts]]\nid = "a"\nkind = "poem"\nprompt = "p"', "kind must be one of"),
        ('[[prompts]]\nid = "a"\nkind = "code"', "prompt must be a non-empty string"),
        ('[[prompts]]\nid = "a b"\nkind = "code"\nprompt = "p"', "id must be a word"),
        ('[[prompts]]\nid = "a"\nkind = "code"\nprompt = "p"\nmax_tokens = 0', "max_tokens"),
        ('[[prompts]]\nid = "a"\nkind = "code"\nprompt = "p"\nmaxtokens = 9', "unknown key"),
        ('[[prompts]]\nid="a"\nkind="code"\nprompt="p"\n' * 2, "duplicate id"),
        ('[[prompts]]\nid="a"\nkind="code"\nprompt="p"\nhistory="x"', "history must be a list"),
        ('[[prompts]]\nid="a"\nkind="code"\nprompt="p"\nhistory=[""]', "history must be a list"),
    ],
)
def test_a_broken_suite_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(SuiteError, match="broken.toml") as info:
        parse_suite(text, "broken.toml")
    assert message in str(info.value)


def test_the_held_out_suite_is_bundled_under_its_name() -> None:
    """`--suite heldout`: edits and quotes written after lookup was tuned, none of them in the
    default suite."""
    held = load_suite("heldout")
    assert held.name == "heldout"
    assert {p.kind for p in held.prompts} == {"edit", "quote"}
    assert len(held.prompts) == 7
    default = load_suite()
    assert not {p.id for p in held.prompts} & {p.id for p in default.prompts}
    assert not {p.prompt for p in held.prompts} & {p.prompt for p in default.prompts}
    assert load_suite("default").prompts == default.prompts


def test_missing_files_and_unknown_ids_are_clear(tmp_path) -> None:
    with pytest.raises(SuiteError, match="cannot read suite"):
        load_suite(tmp_path / "nope.toml")
    with pytest.raises(SuiteError, match="no bundled bench suite nosuch_suite.toml"):
        load_suite("nosuch")
    with pytest.raises(SuiteError, match="no prompt with id 'zzz'"):
        parse_suite(GOOD, "tiny.toml").select(["a", "zzz"])


def test_modes_always_start_with_the_reference() -> None:
    assert parse_modes("lookup,draft") == ["off", "lookup", "draft"]
    assert parse_modes(" OFF , lookup,lookup") == ["off", "lookup"]
    with pytest.raises(ValueError, match="unknown speculation mode"):
        parse_modes("off,warp")


def test_runs_are_interleaved_with_off() -> None:
    suite = parse_suite(GOOD)
    plan = schedule(list(suite.prompts), ["off", "draft", "lookup"], 2, "alternate", "fixed")
    order = [(rep, p.id, label, pair) for rep, p, label, pair in plan]
    assert order[:8] == [
        (0, "a", "off", 0),
        (0, "a", "draft", 0),
        (0, "a", "off", 1),
        (0, "a", "lookup", 1),
        (0, "b.2", "off", 2),
        (0, "b.2", "draft", 2),
        (0, "b.2", "off", 3),
        (0, "b.2", "lookup", 3),
    ]
    assert len(plan) == 16
    # every second repeat, the variant first (a bias for the first or second run cancels out)
    assert [(rep, p.id, label, pair) for rep, p, label, pair in plan[8:12]] == [
        (1, "a", "draft", 4),
        (1, "a", "off", 4),
        (1, "a", "lookup", 5),
        (1, "a", "off", 5),
    ]
    block = schedule(list(suite.prompts), ["off", "draft", "lookup"], 2, order="fixed")
    assert [(p.id, label, pair) for _, p, label, pair in block[:6]] == [
        ("a", "off", 0),
        ("a", "draft", 0),
        ("a", "lookup", 0),
        ("b.2", "off", 1),
        ("b.2", "draft", 1),
        ("b.2", "lookup", 1),
    ]


def test_the_order_turns_so_no_variant_always_follows_the_same_one() -> None:
    """With a peer server last in the list, a fixed order puts off right after that server's
    heavy work on every prompt; turned, each variant follows each other one in turn."""
    prompts = [f"p{i}" for i in range(4)]
    labels = ["off", "lookup", "llama.cpp:server-off"]
    plan = schedule(prompts, labels, 1)  # rotate is the default
    assert [(p, label) for _, p, label, _ in plan] == [
        ("p0", "off"),
        ("p0", "lookup"),
        ("p0", "llama.cpp:server-off"),
        ("p1", "lookup"),
        ("p1", "llama.cpp:server-off"),
        ("p1", "off"),
        ("p2", "llama.cpp:server-off"),
        ("p2", "off"),
        ("p2", "lookup"),
        ("p3", "off"),
        ("p3", "lookup"),
        ("p3", "llama.cpp:server-off"),
    ]
    # each block is one pair (the reference of a prompt with its variants)
    assert [pair for *_, pair in plan] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]

    def before_off(order: str) -> set[str]:
        seq = [label for _, _, label, _ in schedule(prompts, labels, 2, order=order)]
        return {seq[i - 1] for i, label in enumerate(seq) if label == "off" and i}

    assert before_off("fixed") == {"llama.cpp:server-off"}
    assert before_off("rotate") == {"lookup", "llama.cpp:server-off"}
    # alternate pairing: the pairs turn, each variant still right beside its own off run
    alt = schedule(prompts[:2], labels, 1, "alternate")
    assert [(p, label, pair) for _, p, label, pair in alt] == [
        ("p0", "off", 0),
        ("p0", "lookup", 0),
        ("p0", "off", 1),
        ("p0", "llama.cpp:server-off", 1),
        ("p1", "off", 2),
        ("p1", "llama.cpp:server-off", 2),
        ("p1", "off", 3),
        ("p1", "lookup", 3),
    ]
    with pytest.raises(ValueError, match="rotate or fixed"):
        schedule(prompts, labels, 1, order="random")


def test_conversations_replay_their_earlier_turns() -> None:
    suite = parse_suite(
        GOOD
        + """
[[prompts]]
id = "conv"
kind = "edit"
system = "Be brief."
turns = [
  { role = "user", content = "Write f." },
  { role = "assistant", content = "def f(): pass" },
]
prompt = "Rename f to g."
"""
    )
    conv = suite.select(["conv"]).prompts[0]
    assert [m["role"] for m in conv.messages()] == ["system", "user", "assistant", "user"]
    assert conv.messages()[-1]["content"] == "Rename f to g."
    bad = (
        GOOD
        + '[[prompts]]\nid = "x"\nkind = "chat"\nprompt = "p"\n'
        + 'turns = [{ role = "user", content = "u" }]\n'
    )
    with pytest.raises(SuiteError, match="must end with an assistant reply"):
        parse_suite(bad)


# -- statistics -----------------------------------------------------------------------------
def test_small_statistics() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([]) is None
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([None, 0.0, 4.0]) == pytest.approx(4.0)
    assert geomean([]) is None
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def _run(label: str, pid: str, kind: str, pair: int, tps: float, **kw) -> RunResult:
    kw.setdefault("token_ids", [1, 2, 3, 4])
    if "verify_steps" in kw:  # each verification produced its accepted run + one token
        kw.setdefault("verify_tokens", kw.get("accepted", 0) + kw["verify_steps"])
    return RunResult(
        label=label,
        runner="specchat",
        mode=label,
        prompt_id=pid,
        kind=kind,
        repeat=pair,
        pair=pair,
        tokens=len(kw["token_ids"]),
        tokens_per_s=tps,
        e2e_tokens_per_s=tps / 2,
        ttft_s=kw.pop("ttft", 1.0),
        peak_rss_bytes=2**30,
        start_rss_bytes=2**29,
        **kw,
    )


def _bench(runs: list[RunResult]) -> BenchRun:
    suite = parse_suite(GOOD)
    return BenchRun(
        suite=suite,
        labels=["off", "lookup"],
        baselines={"off": None, "lookup": None},
        runners={"off": "specchat", "lookup": "specchat"},
        runs=runs,
        settings=BenchSettings(repeats=2),
        started_at=0.0,
        duration_s=1.0,
    )


def test_speedup_is_the_median_of_paired_ratios() -> None:
    runs = [
        # prompt a: pairs (10 -> 15) and (20 -> 40): ratios 1.5 and 2.0
        _run("off", "a", "code", 0, 10.0, ttft=2.0),
        _run("lookup", "a", "code", 0, 15.0, ttft=1.0, drafted=10, accepted=5, verify_steps=5),
        _run("off", "a", "code", 1, 20.0, ttft=2.0),
        _run(
            "lookup",
            "a",
            "code",
            1,
            40.0,
            ttft=3.0,
            drafted=10,
            accepted=9,
            verify_steps=3,
            token_ids=[1, 2, 9, 4],
        ),
        # prompt b.2: 8x faster in both pairs
        _run("off", "b.2", "quote", 2, 5.0),
        _run("lookup", "b.2", "quote", 2, 40.0),
        _run("off", "b.2", "quote", 3, 5.0),
        _run("lookup", "b.2", "quote", 3, 40.0),
    ]
    bench = _bench(runs)
    recs = records(bench)
    by = {(r["id"], r["mode"]): r for r in recs}
    a = by[("a", "lookup")]
    assert a["speedup_vs_off"] == pytest.approx(1.75)
    assert a["speedup_vs_off_ratio_of_medians"] == pytest.approx(27.5 / 15.0)
    assert a["ttft_ratio_vs_off"] == pytest.approx(1.0)  # median of 0.5 and 1.5
    assert a["acceptance_rate"] == pytest.approx(14 / 20)
    assert a["mean_accepted_length"] == pytest.approx(1 + 14 / 8)
    assert a["identical_to_off"] is False and a["first_divergence"] == 2
    assert by[("a", "off")]["speedup_vs_off"] == 1.0
    assert by[("a", "off")]["identical_to_off"] is True
    assert by[("a", "off")]["acceptance_rate"] is None
    assert by[("b.2", "lookup")]["identical_to_off"] is True
    assert by[("b.2", "lookup")]["rss_growth_mb"] == pytest.approx(512.0)
    ov = overall(bench, recs)
    assert ov["lookup"]["speedup_vs_off_geomean"] == pytest.approx(math.sqrt(1.75 * 8.0))
    assert ov["lookup"]["speedup_by_kind"] == {
        "code": pytest.approx(1.75),
        "quote": pytest.approx(8.0),
    }
    assert ov["lookup"]["identical_prompts"] == 1
    assert ov["off"]["speedup_vs_off_geomean"] == pytest.approx(1.0)


def test_pairs_that_drafted_nothing_measure_the_machines_noise() -> None:
    # auto did off's work on prompt a (nothing drafted) in three pairs that read 0.90, 1.00
    # and 1.10, and drafted on b.2 (0.95): the report says the lowest figure is within noise
    runs = []
    for pair, (a_tps, b_tps) in enumerate([(9.0, 9.5), (10.0, 9.5), (11.0, 9.5)]):
        runs += [
            _run("off", "a", "code", pair, 10.0),
            _run("auto", "a", "code", pair, a_tps),
            _run("off", "b.2", "quote", pair, 10.0),
            _run("auto", "b.2", "quote", pair, b_tps, drafted=8, accepted=2, verify_steps=4),
        ]
    bench = _bench(runs)
    bench.labels, bench.baselines = ["off", "auto"], {"off": None, "auto": None}
    bench.runners = {"off": "specchat", "auto": "specchat"}
    by = {(r["id"], r["mode"]): r for r in records(bench)}
    assert by[("a", "auto")]["idle_pair_speedups"] == pytest.approx([0.9, 1.0, 1.1])
    assert by[("b.2", "auto")]["idle_pair_speedups"] == []  # it drafted: not the machine alone
    assert by[("a", "off")]["idle_pair_speedups"] == []
    md = to_markdown(build_report(bench, models={}, argv=["specchat-cli", "bench"]))
    assert (
        "The machine's noise in this run: 3 pairs in which a mode drafted nothing (off's work "
        "twice) read 0.90–1.10×." in md
    )
    # the report measures; it does not grade the project against its own targets
    assert ": met" not in md and "NOT met" not in md
    assert "## Targets" not in md


def test_the_reference_run_is_set_beside_llama_servers_and_flagged_when_out_of_line() -> None:
    """Figures like those of a run with llama-server peers on a quiet 2-core machine: on prompt
    a, off ran at 24.5 tok/s where llama-server's plain decoding ran 27.0, with a time to first
    token 1.8x every other variant's, having started with 1 of 2 threads; on b.2 off was in line
    (29.0 against 29.2, the same time to first token)."""

    def server_off(pid: str, kind: str, pair: int, tps: float, ttft: float) -> RunResult:
        r = _run("llama.cpp:server-off", pid, kind, pair, tps, ttft=ttft)
        r.runner, r.mode = "llama.cpp", "off"
        return r

    both = {"threads_wanted": 2}
    runs = [
        _run("off", "a", "code", 0, 24.5, ttft=1.35, threads=1, **both),
        _run("lookup", "a", "code", 0, 28.0, ttft=0.74, threads=2, **both),
        server_off("a", "code", 0, 27.0, ttft=0.76),
        _run("off", "b.2", "quote", 1, 29.0, ttft=0.60, threads=2, **both),
        _run("lookup", "b.2", "quote", 1, 31.0, ttft=0.59, threads=2, **both),
        server_off("b.2", "quote", 1, 29.2, ttft=0.62),
    ]
    bench = _bench(runs)
    bench.labels = ["off", "lookup", "llama.cpp:server-off"]
    bench.baselines = {"off": None, "lookup": None, "llama.cpp:server-off": None}
    bench.runners = {"off": "specchat", "lookup": "specchat", "llama.cpp:server-off": "llama.cpp"}
    report = build_report(bench, models={}, argv=["specchat-cli", "bench"])
    ref = report["reference"]
    a, b = ref["prompts"]
    assert (a["id"], b["id"]) == ("a", "b.2")
    assert a["off_vs_server_off"] == pytest.approx(24.5 / 27.0) and a["out_of_line"]
    assert a["ttft_ratio"] == pytest.approx(1.35 / 0.75) and a["off_threads"] == [1]
    assert len(a["why"]) == 3
    assert b["off_vs_server_off"] == pytest.approx(29.0 / 29.2) and not b["out_of_line"]
    assert b["why"] == []
    assert ref["out_of_line"] == 1
    assert ref["off_vs_server_off_lowest"] == pytest.approx(24.5 / 27.0)
    assert ref["off_vs_server_off_median"] == pytest.approx((24.5 / 27.0 + 29.0 / 29.2) / 2)
    assert [r["threads"] for r in report["runs"]] == [1, 2, None, 2, 2, None]
    md = to_markdown(report)
    lines = md.splitlines()
    line_a = next(x for x in lines if x.startswith("- a: reference run:"))
    assert line_a.startswith(
        "- a: reference run: off 24.5 tok/s, llama-server off 27.0 tok/s (0.91) ⚠"
    )
    assert (
        "off ran 9% slower than llama-server's plain decoding, more than the run's spread (3%)"
        in line_a
    )
    assert (
        "off's time to first token was 1.80x the other variants' (1350 ms against 750 ms)" in line_a
    )
    assert "off decoded with 1 of 2 CPU threads in 1 of 1 runs" in line_a
    assert "- b.2: reference run: off 29.0 tok/s, llama-server off 29.2 tok/s (0.99)" in lines
    assert "off / llama-server off: median 0.95, lowest 0.91 over the prompts" in md
    assert any(
        x.startswith("- **the reference run (off) is out of line with its peers on 1 prompt(s)**")
        for x in lines
    )
    assert any(
        x.startswith(
            "- **1 of 4 of SpecChat's runs decoded with fewer CPU threads than loaded** (off 1)"
        )
        for x in lines
    )
    # the same runs without the llama-server peer: off is judged against its own variants
    bench.runs = [r for r in runs if r.runner == "specchat"]
    bench.labels = ["off", "lookup"]
    md = to_markdown(build_report(bench, models={}, argv=["specchat-cli", "bench"]))
    line_a = next(x for x in md.splitlines() if x.startswith("- a: reference run:"))
    assert line_a.startswith("- a: reference run: off 24.5 tok/s ⚠ off's time to first token")
    assert "- b.2: reference run: off 29.0 tok/s" in md.splitlines()


# -- parsing llama.cpp's output -------------------------------------------------------------
SPEC_STDERR = """
0.16.931.438 I encoded  312 tokens in    1.234 seconds, speed:  252.836 t/s
0.16.931.463 I decoded   65 tokens in    4.000 seconds, speed:   16.250 t/s
0.16.931.479 I
0.16.931.493 I n_draft   = 8
0.16.931.508 I n_predict = 65
0.16.931.524 I n_drafted = 80
0.16.931.541 I n_accept  = 50
0.16.931.559 I accept    = 62.500%
"""

PERF_STDERR = """
0.07.1 I common_perf_print:        load time =     500.00 ms
0.07.1 I common_perf_print: prompt eval time =    1200.00 ms /   312 tokens (    3.85 ms per token)
0.07.1 I common_perf_print:        eval time =    6300.00 ms /    63 runs   (  100.00 ms per token)
0.07.1 I common_perf_print:       total time =    7600.00 ms /   375 tokens
"""


MB = 1024 * 1024


@pytest.mark.skipif(
    not os.access("/proc/self/clear_refs", os.W_OK), reason="no resettable peak (Linux's)"
)
def test_the_peak_resident_set_is_the_runs_own_and_nothing_runs_beside_it() -> None:
    """The peak is the kernel's high-water mark, reset when the run starts: an allocation
    freed before the run ends still counts, an earlier larger one does not, and no sampling
    thread wakes during the run (it would take the interpreter from the measured loop)."""
    earlier = b"\x01" * (400 * MB)  # the process's peak so far: higher than the run's
    del earlier
    with RssSampler() as rss:
        sampling = [t for t in threading.enumerate() if t.name == "rss-sampler"]
        brief = b"\x01" * (150 * MB)  # freed before the run ends
        del brief
    assert rss.kernel_peak and sampling == []
    grew = rss.peak - rss.start_rss
    assert 140 * MB <= grew < 300 * MB


def test_parse_llama_cpp_lines() -> None:
    spec = parse_speculative_output(SPEC_STDERR)
    assert spec["decoded"] == 65 and spec["decode_s"] == pytest.approx(4.0)
    assert spec["encode_s"] == pytest.approx(1.234)
    assert (spec["n_drafted"], spec["n_accept"], spec["n_predict"]) == (80, 50, 65)
    perf = parse_perf_output(PERF_STDERR)
    assert perf["eval_ms"] == 6300.0 and perf["eval_runs"] == 63
    assert perf["prompt_ms"] == 1200.0
    with pytest.raises(ValueError):
        parse_speculative_output("nothing here")
    assert generated_text("\n\nPROMPT reply\n\n", "PROMPT") == " reply"


# -- a short real run -----------------------------------------------------------------------
def test_a_short_real_bench_gives_a_complete_report(small_engine, short_suite: Suite) -> None:
    engine = small_engine  # the 0.5B pair: the report, not the model, is tested
    suite = short_suite
    seen: list[tuple[int, int]] = []
    bench = run_bench(
        engine,
        suite,
        "off,lookup",
        1,
        max_tokens=16,
        warmup=False,
        on_run=lambda r, done, total: seen.append((done, total)),
        redo_busy=0,  # the report is tested here; a pair run again: test_bench_busy.py
    )
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [(r.prompt_id, r.label) for r in bench.runs] == [
        ("edit-short", "off"),
        ("edit-short", "lookup"),
        ("chat-short", "lookup"),  # the order turns from prompt to prompt
        ("chat-short", "off"),
    ]
    # how many CPU threads each reply decoded with, whatever the machine was doing
    wanted = engine.target.n_threads
    assert all(1 <= r.threads <= r.threads_wanted == wanted for r in bench.runs)
    report = build_report(
        bench, models=models_info(engine), argv=["specchat-cli", "bench"], host_floor_s=7e-5
    )
    json.dumps(report, allow_nan=False)  # plain JSON, no NaN or inf
    assert json.loads(to_json(report))["records"][0]["id"] == "edit-short"
    assert report["command"] == "specchat-cli bench"
    assert report["complete"] is True and report["planned_runs"] == 4
    assert report["machine"]["cpu_count_logical"] >= 1
    assert report["machine"]["llama_cpp_python"]
    assert report["models"]["target"]["size_bytes"] > 0
    assert report["models"]["draft"]["file"].endswith(".gguf")
    recs = report["records"]
    # records: prompts in suite order, variants in the order given
    assert [(r["id"], r["mode"]) for r in recs] == [
        (p, label) for p in ("edit-short", "chat-short") for label in ("off", "lookup")
    ]
    # one run per record: each record's figures are that run's own, the ratios against the
    # off run of the same prompt, as measured (not just present and positive)
    runs = {(r.prompt_id, r.label): r for r in bench.runs}
    for r in recs:
        run, off = runs[(r["id"], r["mode"])], runs[(r["id"], "off")]
        assert r["kind"] in KINDS and "acceptance_rate" in r and "first_divergence" in r
        assert r["tokens"] == run.tokens == len(run.token_ids) and 1 <= run.tokens <= 16
        assert run.tokens_per_s > 0 and math.isfinite(run.tokens_per_s)
        assert r["tokens_per_s"] == run.tokens_per_s
        assert r["e2e_tokens_per_s"] == run.e2e_tokens_per_s > 0
        assert r["ttft_s"] == run.ttft_s
        assert r["speedup_vs_off"] == pytest.approx(run.tokens_per_s / off.tokens_per_s)
        assert r["ttft_ratio_vs_off"] == pytest.approx(run.ttft_s / off.ttft_s)
        assert r["identical_to_off"] is (run.token_ids == off.token_ids)
        assert r["peak_rss_mb"] == run.peak_rss_bytes / 2**20 > 0
    for r in recs:
        if r["mode"] == "off":
            assert r["speedup_vs_off"] == 1.0 and r["acceptance_rate"] is None
            assert r["identical_to_off"] is True
    edit = next(r for r in recs if r["id"] == "edit-short" and r["mode"] == "lookup")
    run = runs[("edit-short", "lookup")]
    assert run.drafted and run.accepted is not None and run.verify_steps
    assert (edit["drafted"], edit["accepted"]) == (run.drafted, run.accepted)
    assert edit["acceptance_rate"] == pytest.approx(run.accepted / run.drafted)
    assert edit["mean_accepted_length"] == pytest.approx(run.verify_tokens / run.verify_steps)
    assert set(report["overall"]) == {REFERENCE, "lookup"}
    lookup = report["overall"]["lookup"]
    ratios = [
        runs[(p, "lookup")].tokens_per_s / runs[(p, "off")].tokens_per_s
        for p in ("edit-short", "chat-short")
    ]
    assert lookup["speedup_vs_off_geomean"] == pytest.approx(math.sqrt(ratios[0] * ratios[1]))
    assert lookup["speedup_by_kind"] == {
        "edit": pytest.approx(ratios[0]),
        "chat": pytest.approx(ratios[1]),
    }
    assert report["overall"][REFERENCE]["speedup_vs_off_geomean"] == pytest.approx(1.0)
    assert len(report["runs"]) == 4
    assert [r["threads"] for r in report["runs"]] == [r.threads for r in bench.runs]
    md = to_markdown(report)
    for r in recs:
        assert f"| {r['id']} | {r['kind']} | {r['mode']} |" in md
    assert "## Overall" in md and "| lookup |" in md
    # the host table says what no mode can go below on the machine, when it was measured
    assert report["host_floor_ms"] == pytest.approx(0.07)
    assert "Host floor on this machine: 0.070 ms/token" in md
    assert "Host floor" not in to_markdown({**report, "host_floor_ms": None})
