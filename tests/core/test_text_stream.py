"""Token pieces to text: characters split over tokens, invalid bytes, stop strings."""

from __future__ import annotations

from specchat.core.decoding.text_stream import TextStream


def _feed(stream: TextStream, pieces: list[tuple[bytes, bool]]) -> str:
    out = []
    for piece, drafted in pieces:
        stream.push(piece, drafted)
        out.extend(t for t, _ in stream.take())
    stream.flush()
    out.extend(t for t, _ in stream.take())
    return "".join(out)


def test_a_character_split_over_tokens_comes_out_whole() -> None:
    # "é" = c3 a9, "😀" = f0 9f 98 80: split as byte-level tokenizers split them
    pieces = [
        (b"caf", False),
        (b"\xc3", False),
        (b"\xa9 ", True),
        (b"\xf0", False),
        (b"\x9f\x98", False),
        (b"\x80!", False),
    ]
    assert _feed(TextStream(()), pieces) == "café 😀!"
    # ... and with a stop string in play (the held-back path)
    assert _feed(TextStream(("STOP",)), pieces) == "café 😀!"


def test_a_split_character_keeps_the_origin_of_the_token_that_completes_it() -> None:
    s = TextStream(())
    s.push(b"a\xc3", False)  # "a" now, the first byte of "é" held
    assert s.take() == [("a", False)]
    s.push(b"\xa9", True)
    assert s.take() == [("é", True)]


def test_invalid_bytes_become_replacement_characters() -> None:
    # a stray continuation byte, a character cut short by a whole one, and a reply that ends
    # inside a character
    pieces = [(b"x\x80y", False), (b"\xc3", False), (b"A", False), (b"\xe2\x82", False)]
    assert _feed(TextStream(()), pieces) == "x\ufffdy\ufffdA\ufffd"


def test_a_stop_string_ends_the_text_before_it() -> None:
    s = TextStream(("</end>",))
    assert not s.push(b"done </e", False)
    assert s.push(b"nd> more", False)
    assert "".join(t for t, _ in s.take()) == "done "
