"""The current-figures tables of README.md and docs/benchmarks.md, rebuilt from the reports.

    python3 docs/bench/figures.py            # print the tables
    python3 docs/bench/figures.py --write    # put them into README.md and docs/benchmarks.md
    python3 docs/bench/figures.py --check    # exit 1 when a table there differs from the reports

Each table sits between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->` in those files. The
figures are read from the Markdown reports `specchat-cli bench --md` writes (their header and
their "Overall" and "Per prompt" tables), so a new measurement is: run the bench command of
docs/benchmarks.md, save its report in docs/bench/, name it in ROWS below, run `--write`.
Nothing here needs SpecChat installed.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


@dataclass(frozen=True)
class Row:
    table: str  # "cpu" | "gpu"
    machine: str  # the machine class, as a reader would name it
    models: str
    report: str  # file name in docs/bench/
    modes: tuple[str, ...]  # which of the report's modes this row shows
    note: str = ""


ROWS = (
    Row(
        "cpu",
        "2-core Intel Xeon (AVX-512)",
        "default pair",
        "cpu-xeon-modes.md",
        ("draft", "lookup", "auto"),
    ),
    Row("cpu", "2-core Intel Xeon (AVX-512)", "default pair", "cpu-xeon-auto.md", ("auto",)),
    Row("cpu", "2-core AMD EPYC", "default pair", "cpu-epyc-auto.md", ("auto",)),
    Row(
        "cpu",
        "2-core AMD EPYC (28 ms a token)",
        "default pair",
        "cpu-epyc-ngram-peers.md",
        ("lookup", "auto"),
    ),
    Row(
        "gpu",
        "NVIDIA H100 (CUDA)",
        "SmolLM2-135M, no draft model",
        "gpu-h100-smollm2.md",
        ("lookup",),
    ),
    Row(
        "gpu",
        "NVIDIA H100 (CUDA)",
        "SmolLM2-135M, no draft model",
        "gpu-h100-smollm2-auto.md",
        ("auto",),
    ),
    Row(
        "gpu",
        "NVIDIA H100 (CUDA)",
        "Qwen2.5-Coder 1.5B, random weights ¹",
        "gpu-h100-pair-random.md",
        ("lookup", "auto"),
    ),
)

NOTES = {
    "gpu": "¹ A copy of the default target with random weights: real costs, but a text that\n"
    "repeats itself, so these figures are what a long copy reaches, not what real text gives.",
}

KINDS = ("edit", "quote", "code", "chat")

# The host-work table comes from one report run with --host-temperature 1 --repeat-penalty 1.1.
HOST_REPORT = "cpu-xeon-modes.md"
HOST_SETTINGS = (("0", "1"), ("1", "1"), ("0", "1.1"), ("1", "1.1"))  # (T, repeat penalty)


@dataclass(frozen=True)
class Report:
    path: Path
    prompts: int
    max_tokens: str
    pairing: str
    overall: dict[str, dict[str, str]]  # mode -> column -> cell
    per_prompt: list[dict[str, str]]
    host: list[dict[str, str]]  # the host overhead table's rows (empty when not measured)
    host_floor: str  # ms a token, "" when not measured
    curve: str  # the target's cost curve as the header gives it


def _table(lines: list[str], start: int) -> list[dict[str, str]]:
    """The Markdown table that begins at or after line `start`, as dicts by column name."""
    i = start
    while i < len(lines) and not lines[i].startswith("|"):
        i += 1
    head = [c.strip() for c in lines[i].strip().strip("|").split("|")]
    rows = []
    for line in lines[i + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append(dict(zip(head, cells, strict=False)))
    return rows


def read_report(path: Path) -> Report:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    try:
        overall_at = lines.index("## Overall (geometric means over prompts)")
        prompts_at = lines.index("## Per prompt")
    except ValueError:
        sys.exit(f"{path}: not a `specchat-cli bench --md` report (no Overall / Per prompt table)")
    overall = {r["mode"]: r for r in _table(lines, overall_at)}
    host_at = next((i for i, x in enumerate(lines) if x.startswith("## Host overhead")), None)
    floor = re.search(r"^Host floor on this machine: ([0-9.]+) ms", text, re.M)
    curve = re.search(r"^- target cost curve \(.*one token ([0-9.]+ ms)\): (.*)$", text, re.M)
    per_prompt = _table(lines, prompts_at)
    command = re.search(r"^- command: `(.*)`$", text, re.M)
    cmd = command.group(1) if command else ""
    tokens = re.search(r"max tokens (\w+)", text)
    return Report(
        path=path,
        prompts=len({r["prompt"] for r in per_prompt}),
        max_tokens=tokens.group(1) if tokens else "?",
        pairing="alternating" if "--pairing alternate" in cmd else "in turn",
        overall=overall,
        per_prompt=per_prompt,
        host=_table(lines, host_at) if host_at is not None else [],
        host_floor=floor.group(1) if floor else "",
        curve=f"{curve.group(1)}: {curve.group(2)}" if curve else "",
    )


def _x(cell: str) -> float:
    """'1.79× (0.9–1.2) ⚠' -> 1.79"""
    m = re.match(r"[0-9.]+", cell)
    return float(m.group(0)) if m else float("nan")


def lowest(report: Report, mode: str) -> str:
    rows = [r for r in report.per_prompt if r["mode"] == mode]
    if not rows:
        return "–"
    low = min(rows, key=lambda r: _x(r["speedup"]))
    return f"{_x(low['speedup']):.2f}× ({low['prompt']})"


def _kind(row: dict[str, str], kind: str) -> str:
    return row.get(f"speedup {kind}", "–")


def short_table(table: str, reports: dict[str, Report]) -> str:
    """README: one line per machine, models and mode."""
    out = [
        "| machine | models | prompts | mode | tok/s (off's) | speedup over off "
        "| edits | quotes | code | chat |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in (r for r in ROWS if r.table == table):
        rep = reports[row.report]
        off = _rate(rep.overall["off"]["tok/s"])
        for mode in row.modes:
            o = rep.overall[mode]
            kinds = " | ".join(_kind(o, k) for k in KINDS)
            out.append(
                f"| {row.machine} | {row.models} | {rep.prompts} | {mode} "
                f"| {_rate(o['tok/s'])} ({off}) | **{o['speedup']}** | {kinds} |"
            )
    return "\n".join(out + _notes(table))


def _rate(cell: str) -> str:
    """tok/s as a reader wants it: 851 rather than 851.2, 14.4 as it is."""
    x = _x(cell)
    return f"{x:,.0f}" if x >= 100 else cell


def _length(rep: Report) -> str:
    """'64 tokens', or the suite's own length for each prompt (`max tokens per prompt`)."""
    return "each at its own length" if rep.max_tokens == "per" else f"{rep.max_tokens} tokens"


def full_table(table: str, reports: dict[str, Report]) -> str:
    """docs/benchmarks.md: the same rows with τ, ceiling, efficiency, the lowest prompt and the
    report each comes from."""
    out = [
        "| machine | models | mode | speedup over off | edits / quotes / code / chat | τ "
        "| ceiling | efficiency | lowest prompt | same text as off | report |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in (r for r in ROWS if r.table == table):
        rep = reports[row.report]
        off = rep.overall["off"]["tok/s"]
        src = (
            f"[{row.report}](bench/{row.report}): {rep.prompts} prompts, {_length(rep)}, "
            f"{rep.pairing}; off {_rate(off)} tok/s"
        )
        for mode in row.modes:
            o = rep.overall[mode]
            kinds = " / ".join(_kind(o, k) for k in KINDS)
            out.append(
                f"| {row.machine} | {row.models} | {mode} | **{o['speedup']}** | {kinds} "
                f"| {o['τ']} | {o['ceiling']} | {o['efficiency']} | {lowest(rep, mode)} "
                f"| {o['same text']} | {src} |"
            )
    return "\n".join(out + _notes(table))


def host_table(rep: Report) -> str:
    """docs/benchmarks.md: host ms a generated token per mode, T and repeat penalty."""
    cells = {(r["mode"], r["T"], r["repeat penalty"]): r for r in rep.host}
    out = [
        "| mode | T = 0 | T = 1 | T = 0, penalty 1.1 | T = 1, penalty 1.1 |",
        "|---|---|---|---|---|",
    ]
    for mode in dict.fromkeys(r["mode"] for r in rep.host):
        row = [
            cells.get((mode, t, p), {}).get("decode ms/token (median)", "–")
            for t, p in HOST_SETTINGS
        ]
        out.append(f"| {mode} | " + " | ".join(row) + " |")
    out += [
        "",
        f"Host floor (the barest greedy loop, timed the same way): {rep.host_floor} ms a token.",
        f"Report: [{rep.path.name}](bench/{rep.path.name}).",
    ]
    return "\n".join(out)


def curve_table(reports: dict[str, Report]) -> str:
    """docs/benchmarks.md: each machine's cost curve, as its report measured it."""
    out = [
        "| machine | report | one token | n tokens cost (one-token decodes) |",
        "|---|---|---|---|",
    ]
    seen = set()
    for row in ROWS:  # one curve per machine and models: the first report's
        rep = reports[row.report]
        if (row.machine, row.models) in seen or not rep.curve:
            continue
        seen.add((row.machine, row.models))
        t1, points = rep.curve.split(": ", 1)
        link = f"[{row.report}](bench/{row.report})"
        out.append(f"| {row.machine}, {row.models} | {link} | {t1} | {points} |")
    return "\n".join(out)


def _notes(table: str) -> list[str]:
    return ["", NOTES[table]] if table in NOTES else []


def tables() -> dict[str, str]:
    reports = {r.report: read_report(HERE / r.report) for r in ROWS}
    made = {}
    for table in sorted({r.table for r in ROWS}):
        made[table] = short_table(table, reports)
        made[f"{table}-full"] = full_table(table, reports)
    made["host-full"] = host_table(reports[HOST_REPORT])
    made["curves-full"] = curve_table(reports)
    return made


TARGETS = {
    ROOT / "README.md": ("cpu", "gpu"),
    ROOT / "docs" / "benchmarks.md": ("cpu-full", "gpu-full", "host-full", "curves-full"),
}


def replace(text: str, name: str, body: str, where: Path) -> str:
    pattern = re.compile(
        rf"(<!-- figures:{re.escape(name)} -->\n)(?:.*?\n)?(<!-- /figures:{re.escape(name)} -->)",
        re.S,
    )
    if not pattern.search(text):
        sys.exit(f"{where}: no <!-- figures:{name} --> ... <!-- /figures:{name} --> block")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help="update README.md and the docs")
    what.add_argument("--check", action="store_true", help="exit 1 when they are out of date")
    args = ap.parse_args(argv)
    made = tables()
    if not (args.write or args.check):
        for name, body in made.items():
            print(f"<!-- figures:{name} -->\n{body}\n<!-- /figures:{name} -->\n")
        return 0
    stale = []
    for path, names in TARGETS.items():
        old = path.read_text(encoding="utf-8")
        new = old
        for name in names:
            new = replace(new, name, made[name], path)
        if new != old:
            stale.append(path.relative_to(ROOT))
            if args.write:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(
            "out of date: "
            + ", ".join(map(str, stale))
            + " (python3 docs/bench/figures.py --write)"
        )
        return 1
    for p in stale:
        print(f"updated {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
