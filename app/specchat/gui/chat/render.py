"""Rendering a reply into a QTextDocument: Markdown, coloured code blocks, draft highlights.

Draft highlights are character ranges of the raw reply text (`Span`s, built by
`core.reply.Reply`). After Markdown rendering the document's text is the raw text minus its
markup, so each rendered character is matched back to the raw text (`align`) to find out whether
the draft produced it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from PySide6.QtGui import (
    QColor,
    QFontDatabase,
    QPalette,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)

from specchat.core.reply import Span

try:  # optional: syntax colouring of code blocks
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    HAVE_PYGMENTS = True
except ImportError:  # pragma: no cover - depends on the installation
    HAVE_PYGMENTS = False

_WS = re.compile(r"\s")
_MD_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value
    | QTextDocument.MarkdownFeature.MarkdownNoHTML.value
)

_LIGHT_SYNTAX = {
    "Keyword": "#0033b3",
    "Name.Builtin": "#7a3e9d",
    "Name.Function": "#00627a",
    "Name.Class": "#00627a",
    "Name.Decorator": "#9e880d",
    "Literal.String": "#067d17",
    "Literal.Number": "#1750eb",
    "Comment": "#8c8c8c",
    "Operator.Word": "#0033b3",
}
_DARK_SYNTAX = {
    "Keyword": "#cf8e6d",
    "Name.Builtin": "#c77dbb",
    "Name.Function": "#56a8f5",
    "Name.Class": "#56a8f5",
    "Name.Decorator": "#b3ae60",
    "Literal.String": "#6aab73",
    "Literal.Number": "#2aacb8",
    "Comment": "#7a7e85",
    "Operator.Word": "#cf8e6d",
}


@dataclass(frozen=True)
class Theme:
    dark: bool
    draft_bg: QColor
    code_bg: QColor
    syntax: dict[str, str] = field(default_factory=dict)


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def theme_for(palette: QPalette) -> Theme:
    if is_dark(palette):
        return Theme(True, QColor(46, 160, 67, 90), QColor(255, 255, 255, 18), _DARK_SYNTAX)
    return Theme(False, QColor(46, 160, 67, 60), QColor(0, 0, 0, 14), _LIGHT_SYNTAX)


# -- draft highlights ---------------------------------------------------------------------------
def span_mask(length: int, spans: Iterable[Span]) -> bytearray:
    mask = bytearray(length)
    for a, b in spans:
        a, b = max(0, a), min(length, b)
        if b > a:
            mask[a:b] = b"\x01" * (b - a)
    return mask


def align(src: str, dst: str, window: int = 80) -> list[int]:
    """For each character of `dst` (rendered text), its index in `src` (raw text), or -1.

    Greedy in-order matching; whitespace matches any whitespace (Markdown turns soft line
    breaks into spaces). Characters that markup added (none in practice) map to -1.
    """
    out: list[int] = []
    i, n = 0, len(src)
    for c in dst:
        if i >= n:
            out.append(-1)
            continue
        if c.isspace():
            m = _WS.search(src, i, min(n, i + window))
            k = m.start() if m else -1
        else:
            k = src.find(c, i, min(n, i + window))
        out.append(k)
        if k >= 0:
            i = k + 1
    return out


def runs(flags: Sequence[bool] | bytearray) -> list[Span]:
    """[start, end) runs of true values."""
    out: list[Span] = []
    start = -1
    for j, f in enumerate(flags):
        if f and start < 0:
            start = j
        elif not f and start >= 0:
            out.append((start, j))
            start = -1
    if start >= 0:
        out.append((start, len(flags)))
    return out


# -- code blocks --------------------------------------------------------------------------------
@dataclass(frozen=True)
class CodeBlock:
    start: int  # document position of its first character
    language: str
    text: str

    @property
    def end(self) -> int:
        return self.start + len(self.text)

    def label(self) -> str:
        lines = self.text.count("\n") + 1
        return f"{self.language or 'code'}, {lines} line{'s' if lines != 1 else ''}"


def _is_code(fmt: QTextBlockFormat) -> bool:
    return fmt.hasProperty(QTextFormat.Property.BlockCodeFence) or fmt.hasProperty(
        QTextFormat.Property.BlockCodeLanguage
    )


def code_blocks(doc: QTextDocument) -> list[CodeBlock]:
    """Consecutive code-formatted blocks, each group as one CodeBlock."""
    out: list[CodeBlock] = []
    block = doc.begin()
    lines: list[str] = []
    start, lang = -1, ""
    while block.isValid():
        fmt = block.blockFormat()
        if _is_code(fmt) or fmt.nonBreakableLines():
            if start < 0:
                start = block.position()
                lang = str(fmt.property(QTextFormat.Property.BlockCodeLanguage) or "")
            lines.append(block.text())
        elif start >= 0:
            out.append(CodeBlock(start, lang, "\n".join(lines)))
            start, lines = -1, []
        block = block.next()
    if start >= 0:
        out.append(CodeBlock(start, lang, "\n".join(lines)))
    return out


def code_block_at(blocks: Sequence[CodeBlock], position: int) -> CodeBlock | None:
    return next((b for b in blocks if b.start <= position <= b.end), None)


def _syntax_colour(ttype: object, syntax: dict[str, str]) -> str | None:
    name = str(ttype).removeprefix("Token.")
    while name:
        if name in syntax:
            return syntax[name]
        name = name.rpartition(".")[0]
    return None


def _colour_code(doc: QTextDocument, block: CodeBlock, theme: Theme) -> None:
    if not HAVE_PYGMENTS or not block.language:
        return
    try:
        lexer = get_lexer_by_name(block.language.lower(), stripnl=False, ensurenl=False)
    except ClassNotFound:
        return
    cursor = QTextCursor(doc)
    pos = block.start
    pending: tuple[int, int, str] | None = None  # merge neighbours of one colour

    def flush() -> None:
        if pending is None:
            return
        a, b, colour = pending
        cursor.setPosition(a)
        cursor.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(colour))
        cursor.mergeCharFormat(fmt)

    for ttype, value in lexer.get_tokens(block.text):
        colour = _syntax_colour(ttype, theme.syntax)
        end = pos + len(value)
        if colour is not None and value.strip():
            if pending is not None and pending[2] == colour and pending[1] == pos:
                pending = (pending[0], end, colour)
            else:
                flush()
                pending = (pos, end, colour)
        pos = end
    flush()


def _style_code_blocks(doc: QTextDocument, blocks: Sequence[CodeBlock], theme: Theme) -> None:
    mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    cursor = QTextCursor(doc)
    for cb in blocks:
        cursor.setPosition(cb.start)
        cursor.setPosition(cb.end, QTextCursor.MoveMode.KeepAnchor)
        bf = QTextBlockFormat()
        bf.setBackground(theme.code_bg)
        bf.setLeftMargin(6)
        cursor.mergeBlockFormat(bf)
        cf = QTextCharFormat()
        cf.setFontFamilies([mono.family(), "monospace"])
        cursor.mergeCharFormat(cf)
        _colour_code(doc, cb, theme)


def highlight_ranges(doc: QTextDocument, ranges: Iterable[Span], colour: QColor) -> None:
    cursor = QTextCursor(doc)
    fmt = QTextCharFormat()
    fmt.setBackground(colour)
    for a, b in ranges:
        cursor.setPosition(a)
        cursor.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(fmt)


def render_markdown(
    doc: QTextDocument, text: str, spans: Sequence[Span], *, highlight: bool, theme: Theme
) -> list[CodeBlock]:
    """Replace the document with `text` as Markdown; returns its code blocks."""
    doc.setMarkdown(text, _MD_FEATURES)
    blocks = code_blocks(doc)
    _style_code_blocks(doc, blocks, theme)
    if highlight and spans:
        mask = span_mask(len(text), spans)
        rendered = doc.toPlainText()
        flags = bytearray(len(rendered))
        for j, k in enumerate(align(text, rendered)):
            if k >= 0 and mask[k]:
                flags[j] = 1
        highlight_ranges(doc, runs(flags), theme.draft_bg)
    return blocks


def render_plain(
    doc: QTextDocument, text: str, spans: Sequence[Span], *, highlight: bool, theme: Theme
) -> None:
    """Replace the document with `text` as plain text (user messages, errors)."""
    doc.setPlainText(text)
    if highlight and spans:
        highlight_ranges(doc, spans, theme.draft_bg)


def append_text(doc: QTextDocument, text: str, *, draft: bool, theme: Theme) -> None:
    """Add streamed text at the end, as plain text, highlighted when it came from the draft."""
    cursor = QTextCursor(doc)
    cursor.movePosition(QTextCursor.MoveOperation.End)
    fmt = cursor.charFormat()
    if draft:
        fmt.setBackground(theme.draft_bg)
    else:
        fmt.clearBackground()
    cursor.insertText(text, fmt)
