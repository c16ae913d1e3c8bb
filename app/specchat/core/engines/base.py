"""What every engine offers the window, the CLI and the bench, and the checks they all share.

`ChatEngine` is the interface: `generate(messages, params, mode, cancel)` streams `TokenEvent`s;
`has_draft`, `speculation_control` and `can_compare` say what the engine can do; `busy` says
whether a reply is being generated. The local engine (`local.py`), a remote server
(`remote.py`) and two remote endpoints used as one (`remote_pair.py`) implement it.

`OneReplyAtATime` holds what they share: the request checks (`checked`) and the busy lock
(`exclusive`). A second reply while one runs raises `EngineBusyError` instead of corrupting the
model's state; the lock is taken when the first event is asked for and released when the
stream ends, is closed or fails.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from specchat.core.params import GenerationParams
from specchat.core.types import EngineBusyError, Mode, TokenEvent

__all__ = ["Cancel", "ChatEngine", "OneReplyAtATime", "cancel_check"]

Cancel = threading.Event | Callable[[], bool] | None

# Who decides whether a reply is speculative (`speculation_control`): the mode switch, per reply
# ("request"); the server's own configuration ("server"); or a pair of endpoints, one with
# speculation and one without ("pair").
SPECULATION_CONTROLS = ("request", "server", "pair")


def cancel_check(cancel: Cancel) -> Callable[[], bool]:
    """`cancel` as a function that says whether to stop."""
    if cancel is None:
        return lambda: False
    if isinstance(cancel, threading.Event):
        return cancel.is_set
    return cancel


@runtime_checkable
class ChatEngine(Protocol):
    """What the front ends and the bench call on an engine."""

    @property
    def has_draft(self) -> bool: ...

    @property
    def speculation_control(self) -> str: ...

    @property
    def can_compare(self) -> bool: ...

    @property
    def busy(self) -> bool: ...

    def describe(self) -> Mapping[str, Any]: ...

    def generate(
        self,
        messages: Sequence[Any],
        params: GenerationParams | None = None,
        mode: Mode | str = Mode.OFF,
        cancel: Cancel = None,
    ) -> Iterator[TokenEvent]: ...

    def reset_caches(self) -> None: ...

    def close(self) -> None: ...


class OneReplyAtATime:
    """The request checks and the busy lock every engine shares."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @staticmethod
    def checked(
        request: Sequence[Any], params: GenerationParams | None, mode: Mode | str
    ) -> tuple[GenerationParams, Mode]:
        """The validated params and mode; ValueError for an empty request or absurd settings."""
        params = (params or GenerationParams()).validate()
        mode = Mode.parse(mode)
        if not request:
            raise ValueError("the prompt is empty")
        return params, mode

    def exclusive(self, run: Callable[[], Iterator[TokenEvent]]) -> Iterator[TokenEvent]:
        """Events of `run()`, with this engine held for their whole stream."""
        if not self._lock.acquire(blocking=False):
            raise EngineBusyError("a reply is already being generated")
        try:
            yield from run()
        finally:
            self._lock.release()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - every engine has its own
        raise NotImplementedError
