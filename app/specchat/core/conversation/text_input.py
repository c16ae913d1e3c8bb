"""What a user typed, made safe to send: invalid UTF-8 replaced (and counted), empty refused.

Terminals and command lines hand Python undecodable bytes as lone surrogates ("\\udce9" for a
stray 0xE9 byte); llama.cpp's tokenizer needs valid UTF-8, and encoding such a string raised
`UnicodeEncodeError` deep in the engine, which ended the terminal chat. `clean_text` replaces
each invalid byte with U+FFFD and says how many; `require_text` refuses a message with nothing
visible in it (the model would answer nothing at all).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

__all__ = [
    "REPLACEMENT",
    "CleanText",
    "EmptyMessageError",
    "clean_text",
    "decode_bytes",
    "is_empty",
]

REPLACEMENT = "\ufffd"
_INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp", "Cs"}


class EmptyMessageError(ValueError):
    """The message has nothing visible to send."""


@dataclass(frozen=True)
class CleanText:
    text: str
    replaced: int = 0  # invalid bytes (or lone surrogates) replaced with U+FFFD

    @property
    def note(self) -> str:
        """A sentence for the user when something was replaced, else ""."""
        if not self.replaced:
            return ""
        what = "1 byte that is" if self.replaced == 1 else f"{self.replaced} bytes that are"
        return f"replaced {what} not valid UTF-8 with {REPLACEMENT} (U+FFFD)"

    @property
    def empty(self) -> bool:
        return is_empty(self.text)

    def require(self, what: str = "the message", hint: str = "") -> str:
        """The text, or EmptyMessageError("<what> is empty…")."""
        if self.empty:
            raise EmptyMessageError(f"{what} is empty: there is nothing to send{hint}")
        return self.text


def is_empty(text: str) -> bool:
    """True when nothing visible is left: whitespace, control and zero-width characters only."""
    return all(c.isspace() or unicodedata.category(c) in _INVISIBLE for c in text)


def clean_text(text: str) -> CleanText:
    """Replace lone surrogates (undecodable bytes escaped by Python) with U+FFFD."""
    try:
        text.encode("utf-8")
        return CleanText(text)
    except UnicodeEncodeError:
        pass
    out: list[str] = []
    replaced = 0
    for ch in text:
        if 0xD800 <= ord(ch) <= 0xDFFF:
            replaced += 1
            out.append(REPLACEMENT)
        else:
            out.append(ch)
    return CleanText("".join(out), replaced)


def decode_bytes(data: bytes) -> CleanText:
    """Bytes from a file or a pipe: UTF-8 (a BOM dropped), invalid bytes replaced and counted."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return clean_text(data.decode("utf-8", "surrogateescape"))
