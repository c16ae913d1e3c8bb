"""The figures `measure_drafter_costs` (drafter_costs.py) returns: what each piece of a
speculative step costs, in one-token decodes of the target, as a table for `doctor
--drafter-costs` and as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.core.machine.busy import BUSY_SHARE

NOISE_NOTE = (
    "Random weights draft noise: these figures price each piece of a speculative step; "
    "no acceptance rate or speedup follows from them."
)


@dataclass(frozen=True)
class DrafterCosts:
    """Costs relative to one one-token decode of the target (`t1_ms`). Every dict is keyed by
    k (draft tokens): `verify[k]` a k + 1 decode; `head_step[k]` one drafted token of a k-token
    proposal; `catch_up[k]` the head's work after a k + 1 verification; `snapshot[k]` the extra
    of a k + 1 decode for keeping snapshots (`verify_snap[k]` and `verify_plain[k]`: that decode
    with and without them, each against its own one-token decode); `rollback[k]` a cut of k
    tokens and the next one-token decode. Rows that do not apply are None."""

    target: str
    arch: str
    hybrid: bool
    n_rs_seq: int
    snapshot_mib: float
    where: str
    threads: int
    t1_ms: float
    repeats: int
    verify: dict[int, float]
    drafter: str | None = None
    drafter_kind: str | None = None
    head_step: dict[int, float] | None = None
    catch_up: dict[int, float] | None = None
    verify_with_head: dict[int, float] | None = None
    snapshot: dict[int, float] | None = None
    verify_snap: dict[int, float] | None = None
    verify_plain: dict[int, float] | None = None
    rollback: dict[int, float] | None = None
    others_share: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ks(self) -> list[int]:
        return sorted(self.verify)

    def rows(self) -> list[tuple[str, dict[int, float]]]:
        """The table's rows: (label, {k: relative cost}), the ones that apply."""
        out = [("verification: decode of k+1 tokens", self.verify)]
        if self.snapshot is not None:
            assert self.verify_snap is not None and self.verify_plain is not None
            out += [
                ("  again, with snapshots", self.verify_snap),
                ("  the same load without (n_rs_seq 0)", self.verify_plain),
                ("snapshot: what keeping them adds", self.snapshot),
            ]
        if self.rollback is not None:
            out.append(("rollback: cut k + next decode", self.rollback))
        if self.head_step is not None:
            assert self.catch_up is not None and self.verify_with_head is not None
            out += [
                ("head step, per drafted token", self.head_step),
                ("head catch-up per verification", self.catch_up),
                ("verification with the head attached", self.verify_with_head),
            ]
        return out

    def to_text(self) -> str:
        ks = self.ks
        kind = (
            f"hybrid, {self.n_rs_seq} state snapshots ({self.snapshot_mib:.1f} MiB)"
            if self.hybrid
            else "transformer"
        )
        lines = [
            f"Cost of speculation on {self.target} ({self.arch}, {kind}), on {self.where} "
            f"with {self.threads} thread{'s' if self.threads != 1 else ''}",
            f"relative to one target token decode ({self.t1_ms:.2f} ms); medians of "
            f"{self.repeats} pairs",
        ]
        if self.drafter is not None:
            lines.append(f"drafter: {self.drafter} ({self.drafter_kind})")
        width = max(len(label) for label, _ in self.rows())
        lines.append("")
        lines.append(" " * width + "".join(f" {'k=' + str(k):>7}" for k in ks))
        for label, values in self.rows():
            cells = "".join(_cell(values.get(k)) for k in ks)
            lines.append(f"{label:<{width}}{cells}")
        lines.append("")
        lines.extend(self.notes)
        if self.others_share is not None and self.others_share > BUSY_SHARE:
            lines.append(
                f"Other programs used {self.others_share:.0%} of the CPU meanwhile: "
                "not this machine's quiet figures."
            )
        lines.append(NOISE_NOTE)
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        def keyed(d: dict[int, float] | None) -> dict[str, float] | None:
            return None if d is None else {str(k): round(v, 6) for k, v in sorted(d.items())}

        return {
            "target": self.target,
            "arch": self.arch,
            "hybrid": self.hybrid,
            "n_rs_seq": self.n_rs_seq,
            "snapshot_mib": round(self.snapshot_mib, 2),
            "where": self.where,
            "threads": self.threads,
            "t1_ms": round(self.t1_ms, 4),
            "repeats": self.repeats,
            "drafter": self.drafter,
            "drafter_kind": self.drafter_kind,
            "verify": keyed(self.verify),
            "verify_snap": keyed(self.verify_snap),
            "verify_plain": keyed(self.verify_plain),
            "snapshot": keyed(self.snapshot),
            "rollback": keyed(self.rollback),
            "head_step": keyed(self.head_step),
            "catch_up": keyed(self.catch_up),
            "verify_with_head": keyed(self.verify_with_head),
            "others_share": self.others_share,
            "notes": list(self.notes),
            "note": NOISE_NOTE,
        }


def _cell(v: float | None) -> str:
    """One table cell: two decimals, or two significant digits below 0.1 (a catch-up that
    only copies hidden states costs a few ten-thousandths of a decode)."""
    if v is None:
        return f" {'-':>7}"
    return f" {v:7.2f}" if abs(v) >= 0.1 else f" {v:7.2g}"


# -- timing ---------------------------------------------------------------------------------
