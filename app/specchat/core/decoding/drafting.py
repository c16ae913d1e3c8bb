"""What every drafter hands the decoder, and how drafters meet llama-cpp-python's interface.

SpecChat's drafters implement llama-cpp-python's `LlamaDraftModel` contract (`__call__(input_ids,
**kwargs) -> array of draft ids`): that is what lets the benchmark hand them to a stock
`llama_cpp.Llama(draft_model=...)` as a peer. The decoder itself calls the richer methods each
drafter has (`propose`, `feedback`), which also return the draft's distributions.

`LlamaDraftModel` lives in a module that loads the native library, so it is not imported here:
the drafters are registered as its virtual subclasses once the backend starts
(`register_llama_draft_models`, called by the runtime), keeping `specchat.core` importable
without llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass

from .sampling import Dist


@dataclass
class Draft:
    tokens: list[int]
    q: list[Dist] | None  # the draft's distribution per token; None = a deterministic draft
    match_len: int = 0  # n-gram drafts: length of the match the draft continues


def register_llama_draft_models() -> None:
    from llama_cpp.llama_speculative import LlamaDraftModel

    from .draft_model import ModelDrafter
    from .ngram import NgramDrafter

    for cls in (ModelDrafter, NgramDrafter):
        LlamaDraftModel.register(cls)
