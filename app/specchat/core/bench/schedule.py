"""The order a bench's runs are taken in: per repeat and prompt a block of every variant with
the reference (off), in pairs of runs taken side by side, the block's order turning from one
block to the next (``runner.py`` runs it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from specchat.core.types import Mode

REFERENCE = Mode.OFF.value  # the label every other variant is paired with
ORDERS = ("rotate", "fixed")
P = TypeVar("P")


def schedule(
    prompts: Sequence[P],
    labels: Sequence[str],
    repeats: int,
    pairing: str = "block",
    order: str = "rotate",
) -> list[tuple[int, P, str, int]]:
    """(repeat, prompt, variant label, pair) in running order, per repeat and prompt (a block):
    ``pairing="alternate"``: ``off, A, off, B, …`` (each variant right after its own off run),
    and every second repeat ``A, off, B, off, …`` (whatever favours the first or the second run
    of a pair cancels out over the repeats);
    ``pairing="block"``: ``off, A, B, …`` (every variant against the off run of its block; half
    the runs, for suites with many variants). With only the reference, one run per prompt and
    repeat. ``order="rotate"``: block i starts at variant i (``B, …, off, A`` in block 2), so
    what runs before each variant, the reference included, changes from block to block;
    ``order="fixed"``: every block in the order given."""
    if pairing not in ("block", "alternate"):
        raise ValueError(f"pairing must be block or alternate, not {pairing!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be rotate or fixed, not {order!r}")
    out: list[tuple[int, P, str, int]] = []
    pair = block = 0
    others = [lab for lab in labels if lab != REFERENCE]
    for rep in range(repeats):
        for p in prompts:
            if not others or pairing == "block":
                turn = _turned([REFERENCE, *others], block if order == "rotate" else 0)
                out += [(rep, p, lab, pair) for lab in turn]
                pair += 1
            else:
                for lab in _turned(others, block if order == "rotate" else 0):
                    two = [(rep, p, REFERENCE, pair), (rep, p, lab, pair)]
                    out += two[::-1] if rep % 2 else two
                    pair += 1
            block += 1
    return out


def _turned(items: Sequence[str], by: int) -> list[str]:
    k = by % len(items)
    return [*items[k:], *items[:k]]
