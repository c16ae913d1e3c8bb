"""`bench --resume FILE`: the pairs a stopped bench measured are kept on disk and not measured
again, whatever stopped it (Ctrl+C, a crash mid-write); another bench on the same file is
refused with what differs; a file that cannot be written never costs the run.

The runner's bookkeeping is tested with stand-in variants that count their calls (what is
tested is which runs happen, not what a model says); the command itself with the real 0.5B
model at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchsuite import TWO_PROMPTS

from specchat.cli.main import main
from specchat.core.bench.journal import Journal, JournalError
from specchat.core.bench.report import build_report
from specchat.core.bench.report_md import to_markdown
from specchat.core.bench.runner import (
    BenchSettings,
    PreparedPrompt,
    RunResult,
    measure,
)
from specchat.core.params import GenerationParams

SUITE = TWO_PROMPTS
IDENTITY = {"modes": ["off", "auto"], "models": {"target": ["t.gguf", 1]}}


class Counting:
    """A variant that says which call of it made each run (its tokens/s is the call's number)."""

    runner = "stand-in"
    baseline = None
    metered = False

    def __init__(self, label: str) -> None:
        self.label = self.mode = label
        self.calls = 0

    def run(self, prompt: PreparedPrompt, params: GenerationParams) -> RunResult:
        self.calls += 1
        return RunResult.of(
            self, prompt, tokens=4, token_ids=[1, 2, 3, self.calls], tokens_per_s=10.0 + self.calls
        )

    def close(self) -> None:
        pass


def _bench(journal: Journal | None, stop_after: int | None = None):
    """Both prompts, 2 repeats: 4 pairs of (off, auto). `stop_after`: Ctrl+C before run n+1."""
    off, auto = Counting("off"), Counting("auto")

    def cancel() -> bool:
        return stop_after is not None and off.calls + auto.calls >= stop_after

    prompts = [PreparedPrompt(p, p.prompt, (1, 2), 4) for p in SUITE.prompts]
    bench = measure(
        {"off": off, "auto": auto},
        SUITE,
        prompts,
        BenchSettings(repeats=2, warmup=False),
        order="fixed",
        cancel=cancel,
        journal=journal,
    )
    return bench, off.calls + auto.calls


def _key(r: RunResult) -> tuple:
    return (r.prompt_id, r.label, r.repeat, r.pair, r.tokens_per_s, tuple(r.token_ids))


def test_a_stopped_bench_goes_on_where_it_stopped(tmp_path: Path) -> None:
    path = tmp_path / "bench.journal"
    first, calls = _bench(Journal.open(path, IDENTITY), stop_after=5)  # in the third pair
    assert calls == 5 and first.interrupted and len(first.runs) == 5
    # on disk: the header and the two whole pairs; the third pair's one run is not kept
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3

    journal = Journal.open(path, IDENTITY)
    assert sorted(journal.pairs) == [0, 1] and journal.kept_at_start == 2
    second, calls = _bench(journal)
    assert calls == 4  # pairs 2 and 3 only: the cut pair is measured again, whole
    assert not second.interrupted and len(second.runs) == second.planned_runs == 8
    assert [_key(r) for r in second.runs[:4]] == [_key(r) for r in first.runs[:4]]
    assert [r.pair for r in second.runs] == [0, 0, 1, 1, 2, 2, 3, 3]
    # and the report of the whole says so
    report = build_report(
        second,
        models={},
        argv=["specchat-cli", "bench"],
        extra_settings={"resume": {"file": str(path), "pairs_kept": 2, "first_started_at": "then"}},
    )
    assert report["complete"] is True
    assert "- resumed: 2 pair(s) were measured by an earlier run of this command" in to_markdown(
        report
    )
    # a third time, nothing is left to measure
    third, calls = _bench(Journal.open(path, IDENTITY))
    assert calls == 0 and [_key(r) for r in third.runs] == [_key(r) for r in second.runs]


def test_a_half_written_last_line_costs_that_pair_only(tmp_path: Path) -> None:
    path = tmp_path / "bench.journal"
    _bench(Journal.open(path, IDENTITY), stop_after=4)  # pairs 0 and 1 kept
    whole = path.read_text(encoding="utf-8")
    path.write_text(whole + whole.splitlines()[-1][:40], encoding="utf-8")  # a crash mid-write
    journal = Journal.open(path, IDENTITY)
    assert journal.cut_short and sorted(journal.pairs) == [0, 1]
    _, calls = _bench(journal)
    assert calls == 4
    again = Journal.open(path, IDENTITY)  # the broken line is gone, not buried mid-file
    assert not again.cut_short and sorted(again.pairs) == [0, 1, 2, 3]


def test_another_bench_on_the_same_file_is_refused_with_what_differs(tmp_path: Path) -> None:
    path = tmp_path / "bench.journal"
    _bench(Journal.open(path, IDENTITY), stop_after=2)
    before = path.read_bytes()
    with pytest.raises(JournalError, match=r"other settings \(modes: \[\"off\", \"auto\"\] there"):
        Journal.open(path, {**IDENTITY, "modes": ["off", "lookup"]})
    assert path.read_bytes() == before


def test_files_that_are_no_journal_are_refused_and_left_alone(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    with pytest.raises(JournalError, match="not a SpecChat bench journal"):
        Journal.open(notes, IDENTITY)
    assert notes.read_text(encoding="utf-8") == "my notes\n"
    path = tmp_path / "bench.journal"
    _bench(Journal.open(path, IDENTITY), stop_after=6)
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[1] = lines[1][:30]  # damage that no crash leaves: not the last line
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(JournalError, match="line 2 is damaged"):
        Journal.open(path, IDENTITY)


def test_a_journal_that_cannot_be_written_costs_nothing_but_resuming(
    tmp_path: Path, capsys
) -> None:
    path = tmp_path / "bench.journal"
    journal = Journal.open(path, IDENTITY)
    path.mkdir()  # the file cannot be created now
    journal.begin(None)
    bench, calls = _bench(journal)
    assert calls == 8 and len(bench.runs) == 8 and not bench.interrupted
    err = capsys.readouterr().err
    assert err.count("could not be written") == 1 and "cannot be resumed" in err


# -- the command ------------------------------------------------------------------------------
SUITE_TOML = """
name = "one"

[[prompts]]
id = "copy"
kind = "quote"
prompt = "Repeat exactly: the cat sat on the mat, the cat sat on the mat."
"""


def test_the_command_resumes_with_the_earlier_runs_and_curve(
    model_paths, tmp_path: Path, capsys
) -> None:
    suite = tmp_path / "one.toml"
    suite.write_text(SUITE_TOML, encoding="utf-8")
    journal = tmp_path / "bench.journal"
    common = ["bench", "--suite", str(suite), "--target", str(model_paths[1]), "--no-draft"]
    common += ["--modes", "off,lookup", "--repeats", "2", "--no-warmup", "--ctx", "1024"]
    common += ["--resume", str(journal)]

    assert main([*common, "--max-tokens", "8", "--json", str(tmp_path / "a.json")]) == 0
    first = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    assert "measuring the target's cost curve" in capsys.readouterr().err

    assert main([*common, "--max-tokens", "8", "--json", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr()
    second = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))
    assert "measuring the target's cost curve" not in out.err  # the first run's curve
    assert "resuming" in out.err and "2 pair(s)" in out.err
    assert second["cost_curve"] == first["cost_curve"]
    assert second["runs"] == first["runs"]  # the same runs (their times too), none measured
    assert second["settings"]["resume"]["pairs_kept"] == 2
    assert "- resumed: 2 pair(s)" in out.out

    # another token limit is another bench: refused before anything is measured
    assert main([*common, "--max-tokens", "9"]) != 0
    err = capsys.readouterr().err
    assert "other settings (sampling: [8," in err and "Traceback" not in err


def test_other_code_is_another_bench(tmp_path: Path, monkeypatch) -> None:
    import specchat
    from specchat.cli.bench_resume import code_fingerprint

    package = tmp_path / "specchat"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "core" / "draft.py").write_text("K = 8\n", encoding="utf-8")
    monkeypatch.setattr(specchat, "__file__", str(package / "__init__.py"))
    before = code_fingerprint()
    (package / "core" / "draft.py").write_text("K = 9\n", encoding="utf-8")
    assert code_fingerprint() != before


def test_a_remote_bench_is_not_resumed_silently(tmp_path: Path, capsys) -> None:
    journal = tmp_path / "bench.journal"
    rc = main(["bench", "--server", "http://127.0.0.1:9", "--resume", str(journal)])
    err = capsys.readouterr().err
    assert rc != 0 and "--resume continues a local bench" in err and "Traceback" not in err
    assert not journal.exists()
