"""A bench's measured pairs kept on disk as they are measured (`bench --resume FILE`), so a run
stopped by Ctrl+C, a crash or a reboot continues where it stopped instead of starting over.

The file is JSON lines: a header (what is measured, the machine, the first run's start and the
cost curve it priced drafting with), then one line per pair, written and synced as soon as the
pair is complete. A pair is the unit the report's ratios are taken over (runs side by side), so
a pair cut short is not kept: it is measured again. Another command (other models, modes,
settings, prompts or machine) on the same file is refused with what differs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from specchat.core.bench.results import RunResult
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.engines.curve_store import curve_from_dict

FORMAT = "specchat-bench-journal"
VERSION = 1


class JournalError(ValueError):
    """A journal that cannot be used for this run; the message says why and what to do."""


def prompt_digest(prompt: object) -> str:
    """A short fingerprint of a suite prompt (its id, text, history and limits)."""
    return hashlib.sha256(repr(prompt).encode("utf-8")).hexdigest()[:16]


class Journal:
    """The pairs measured so far under one `identity` (a JSON-ready dict: what is measured
    and where). `pairs` maps a pair's number in the schedule to its runs."""

    def __init__(self, path: Path, identity: dict[str, Any]) -> None:
        self.path = path
        self.identity = _plain(identity)
        self.started_at = time.time()  # the first run's start
        self.curve: CostCurve | None = None  # what the first run priced drafting with
        self.pairs: dict[int, list[RunResult]] = {}
        self.kept_at_start = 0  # pairs read back from the file
        self.cut_short = False  # the file's last line was half-written (a pair measured again)
        self._written = False  # the header is on disk
        self._failed = False  # the file could not be written: kept in memory only
        self._good_bytes = 0  # the file's length up to its last whole line
        self._warned = False

    @classmethod
    def open(cls, path: Path, identity: dict[str, Any]) -> Journal:
        """The journal at `path`: the pairs it holds when it is one of this run's, an empty
        one when the file does not exist or is empty (written once the run begins)."""
        journal = cls(path, identity)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return journal
        except OSError as exc:
            raise JournalError(f"cannot read the bench journal {path}: {exc}") from None
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()  # the newline that ends the last line
        if not lines:
            return journal
        journal._read(lines)
        return journal

    def _read(self, lines: list[bytes]) -> None:
        try:
            head = json.loads(lines[0])
        except ValueError:
            head = None
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            raise JournalError(
                f"{self.path} is not a SpecChat bench journal: give --resume a new file name, "
                "or the file an earlier `bench --resume` wrote"
            )
        if head.get("version") != VERSION:
            raise JournalError(
                f"{self.path} was written by another version of SpecChat (journal version "
                f"{head.get('version')}, this one reads {VERSION}): start a new file"
            )
        differs = _differences(head.get("identity", {}), self.identity)
        if differs:
            raise JournalError(
                f"{self.path} holds a bench run with other settings ({'; '.join(differs)}): "
                "run the same command again to continue it, or give --resume a new file"
            )
        self.started_at = float(head.get("started_at", self.started_at))
        self.curve = curve_from_dict(head["cost_curve"]) if head.get("cost_curve") else None
        self._good_bytes = len(lines[0]) + 1
        for n, line in enumerate(lines[1:], start=2):
            try:
                entry = json.loads(line)
                runs = [_run_from(d) for d in entry["runs"]]
                self.pairs[int(entry["pair"])] = runs
                self._good_bytes += len(line) + 1
            except (ValueError, KeyError, TypeError):
                if n != len(lines):
                    raise JournalError(
                        f"{self.path}: line {n} is damaged (not only the last one, which a "
                        "crash can leave half-written): start a new file"
                    ) from None
                self.cut_short = True
        self._written = True
        self.kept_at_start = len(self.pairs)

    def begin(self, curve: CostCurve | None) -> None:
        """Write the header of a new journal, with the cost curve its pairs are priced with
        (nothing when the file already has one)."""
        if self._written or self._failed:
            return
        self.curve = curve
        head = {
            "format": FORMAT,
            "version": VERSION,
            "started_at": self.started_at,
            "identity": self.identity,
            "cost_curve": curve.as_dict() if curve is not None else None,
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("w", encoding="utf-8") as f:
                f.write(json.dumps(head, ensure_ascii=False) + "\n")
            self._written = True
        except OSError as exc:
            self._warn(exc)

    def done(self, pair: int) -> list[RunResult] | None:
        """The runs of `pair` when an earlier run measured it, else None."""
        return self.pairs.get(pair)

    def add(self, pair: int, runs: list[RunResult]) -> None:
        """Keep a complete pair: appended and synced before the next one is measured. A file
        that cannot be written (a full disk) costs the resumability, never the run: said once
        on stderr, and the runs still go into this run's report."""
        self.pairs[pair] = runs
        self.begin(self.curve)
        if not self._written:
            return
        line = json.dumps({"pair": pair, "runs": [_run_dict(r) for r in runs]}, allow_nan=False)
        try:
            if self.cut_short:  # drop the half-written line before the next one
                os.truncate(self.path, self._good_bytes)
                self.cut_short = False
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            self._warn(exc)

    def _warn(self, exc: OSError) -> None:
        self._written, self._failed = False, True
        if not self._warned:
            self._warned = True
            print(
                f"the bench journal {self.path} could not be written ({exc}): this run goes on "
                "and its report is complete, but it cannot be resumed from that file",
                file=sys.stderr,
                flush=True,
            )


def _run_dict(r: RunResult) -> dict[str, Any]:
    d = dataclasses.asdict(r)
    d["busiest"] = list(r.busiest)
    return d


def _run_from(d: dict[str, Any]) -> RunResult:
    names = {f.name for f in dataclasses.fields(RunResult)}
    fields = {k: v for k, v in d.items() if k in names}
    fields["busiest"] = tuple(fields.get("busiest", ()))
    return RunResult(**fields)


def _plain(x: Any) -> Any:
    """`x` as it reads back from JSON (tuples become lists), so identities compare equal."""
    return json.loads(json.dumps(x))


def _differences(was: dict[str, Any], now: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(was) | set(now)):
        if was.get(key) != now.get(key):
            out.append(f"{key}: {_short(was.get(key))} there, {_short(now.get(key))} now")
    return out


def _short(x: Any, most: int = 60) -> str:
    text = json.dumps(x, ensure_ascii=False)
    return text if len(text) <= most else text[: most - 1] + "…"
