"""What every drafter hands the decoder: a `Draft` (tokens, and the distributions they were drawn
from when the drafter samples).

The drafters also answer llama-cpp-python's `LlamaDraftModel` call (`__call__(input_ids, **kwargs)`
-> draft ids), so the benchmark's stock peer can wrap them; nothing here loads llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.core.decoding.sampling import Dist


@dataclass
class Draft:
    tokens: list[int]
    q: list[Dist] | None  # the draft's distribution per token; None = a deterministic draft
