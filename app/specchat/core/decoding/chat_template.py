"""Chat messages -> prompt tokens, with the GGUF's own chat template (Jinja, sandboxed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specchat.core.decoding.runtime import ModelRuntime

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}

# ChatML, for the few GGUFs that carry no template of their own.
FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ChatTemplate:
    """Renders messages with the model's template and tokenizes the result."""

    def __init__(self, rt: ModelRuntime) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = rt.info.chat_template or FALLBACK_TEMPLATE
        self._bos_text = rt.special_text(rt.bos_id) if rt.bos_id >= 0 else ""
        self._fmt = Jinja2ChatFormatter(
            template=template,
            eos_token=rt.special_text(rt.eos_id) if rt.eos_id >= 0 else "",
            bos_token=self._bos_text,
        )
        self._rt = rt

    def render(self, messages: Sequence[Message]) -> str:
        msgs: Any = [dict(m) for m in messages]
        return self._fmt(messages=msgs).prompt

    def tokens(self, messages: Sequence[Message]) -> list[int]:
        text = self.render(messages)
        add_bos = self._rt.add_bos and not (self._bos_text and text.startswith(self._bos_text))
        return self._rt.tokenize(text, add_special=add_bos, parse_special=True)
