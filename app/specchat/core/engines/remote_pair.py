"""Two endpoints as one engine: the same model served with speculation and without.

Servers that decide speculation themselves (vLLM, SGLang, this llama-server build) cannot run
one reply with it and the next without. Given a second endpoint started without speculation,
`RemotePair` sends mode "off" there and every other mode to the speculative one, so the mode
switch, the side-by-side comparison and the benchmark all work as with the local engine.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from specchat.core.engines.base import Cancel
from specchat.core.engines.remote import RemoteEngine, RemoteModelInfo
from specchat.core.params import GenerationParams
from specchat.core.types import Mode, TokenEvent

__all__ = ["RemotePair"]


class RemotePair:
    def __init__(self, on: RemoteEngine, off: RemoteEngine) -> None:
        if off.info.speculates:
            raise ValueError(
                f"{off.config.label} speculates ({off.info.speculation}): the 'off' endpoint "
                "must run the model without speculation"
            )
        self.on, self.off = on, off

    @property
    def info(self):  # the speculative endpoint's, for labels
        return self.on.info

    @property
    def config(self):
        return self.on.config

    @property
    def has_draft(self) -> bool:
        return self.on.has_draft

    @property
    def speculation_control(self) -> str:
        return "pair"

    @property
    def can_compare(self) -> bool:
        return True

    @property
    def busy(self) -> bool:
        return self.on.busy or self.off.busy

    def describe(self) -> dict[str, RemoteModelInfo | None]:
        return {"target": self.on.describe()["target"], "draft": None}

    def reset_caches(self) -> None:
        self.on.reset_caches()
        self.off.reset_caches()

    def generate(
        self,
        messages: Sequence[Mapping[str, Any]],
        params: GenerationParams | None = None,
        mode: Mode | str = Mode.OFF,
        cancel: Cancel = None,
    ) -> Iterator[TokenEvent]:
        engine = self.off if Mode.parse(mode) is Mode.OFF else self.on
        return engine.generate(messages, params, mode, cancel)

    def close(self) -> None:
        try:
            self.on.close()
        finally:
            self.off.close()

    def __enter__(self) -> RemotePair:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
