"""The window with the new drafters: a target's MTP head (or a Gemma 4 assistant) in the
speculation toggle, and Lookup on hybrid targets.

The targets are the generated tiny models of tests/tinymodel.py and tests/tinymodel_gemma4.py
(random weights: the text is noise, but greedy speculation must give plain decoding's text):
a hybrid qwen35 with a built-in MTP head, an lfm2 (hybrid, no head), and the Gemma 4 pair whose
assistant is loaded with File → Open draft…. `p_min` is 0 so the random head's drafts, which are
never confident, are still proposed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import tinymodel_gemma4
from tinymodel import write_lfm2, write_qwen35_mtp

from specchat.core.types import Mode
from specchat.gui.chat.mode_selector import NO_HEAD_TIP

LOAD_MS = 120_000  # a load on a busy 2-core machine (the tiny models load in well under a second)
PROMPT = "w1 w2 w3 hello w4"
# Lookup drafts from what came before: a prompt that says the same thing six times over
REPEATS = " ".join(["w1 w2 w3 w4 w5 w6 w7 w8"] * 6)
SETTINGS: dict[str, Any] = {
    "n_ctx": 512,
    "max_tokens": 24,
    "mode": "off",
    "p_min": 0.0,
    "target_gpu_layers": 0,
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hybrid-models")
    target, assistant = tinymodel_gemma4.write_gemma4_pair(d / "gemma4")
    apart = d / "assistant" / assistant.name  # not beside its target: found only when opened
    apart.parent.mkdir()
    shutil.move(assistant, apart)
    return {
        "qwen35": write_qwen35_mtp(d / "qwen35" / "tiny-qwen35-mtp.gguf"),
        "lfm2": write_lfm2(d / "lfm2" / "tiny-lfm2.gguf"),
        "gemma4": target,
        "assistant": apart,
    }


def loaded(qtbot: Any, w: Any, target: Path, draft: Path | None = None) -> None:
    """Load `target` (and `draft`) the way the window's actions do, and wait until shown."""
    if draft is None:
        w.loader.load(target, None)
    else:
        w.loader.open_draft(draft)
    qtbot.waitUntil(
        lambda: (
            not w.controller.loading_models
            and w.models.target is not None
            and w.models.target.path == target
        ),
        timeout=LOAD_MS,
    )


def reply_in(w: Any, send: Any, mode: Mode, text: str) -> tuple[Any, str]:
    """A new conversation, `mode` clicked in the toggle, `text` sent: (final stats, reply)."""
    w.new_chat()
    w.mode_selector.buttons[mode].click()
    assert w.mode_selector.mode() is mode
    stats = send(w, text)
    return stats, w.chat.last("assistant").text


def compare_offers_mtp(w: Any) -> tuple[bool, str]:
    """Whether the comparison window offers MTP, and under which name."""
    w.open_compare()
    box = w.compare_dialog.mode_box
    i = box.findData(Mode.MTP)
    offered = (box.model().item(i).isEnabled(), box.itemText(i))
    w.compare_dialog.close()
    return offered


def test_built_in_head_is_offered_by_name_and_drafts_the_same_reply(
    qtbot: Any, make_window: Any, send: Any, models: dict[str, Path]
) -> None:
    w = make_window(engine=None, **SETTINGS)
    mtp = w.mode_selector.buttons[Mode.MTP]
    assert not mtp.isEnabled()  # nothing loaded yet
    loaded(qtbot, w, models["qwen35"])
    assert w.models.head == "Built-in MTP"
    assert mtp.isEnabled() and mtp.text() == "Built-in MTP"
    assert mtp.toolTip().startswith("Built-in MTP: ") and "verifies" in mtp.toolTip()
    assert "MTP head: Built-in MTP" in w.models_panel.label.text()
    assert compare_offers_mtp(w) == (True, "Built-in MTP")

    off, off_text = reply_in(w, send, Mode.OFF, PROMPT)
    assert off.mode == "off" and off.tokens == 24 and off_text
    st, text = reply_in(w, send, Mode.MTP, PROMPT)
    assert w.settings.mode == "mtp"  # the choice is kept for the next start
    assert st.mode == "mtp" and st.drafted > 0, st.note
    assert text == off_text and st.tokens == off.tokens
    # the gauge and the line under the reply name the mode; a bar per draft position
    f = w.gauge.figures()
    assert f["mode"] == "MTP" and f["accepted"] == f"{st.accepted}/{st.drafted}"
    assert len(f["positions"]) == len(st.draft_pos_proposed) >= 1
    assert w.chat.last("assistant").meta.text().startswith("MTP · ")


def test_without_a_head_mtp_is_not_offered_until_a_target_with_one_loads(
    qtbot: Any, make_window: Any, models: dict[str, Path]
) -> None:
    w = make_window(engine=None, **{**SETTINGS, "mode": "mtp"})  # the last choice was MTP
    loaded(qtbot, w, models["lfm2"])
    mtp = w.mode_selector.buttons[Mode.MTP]
    assert w.models.head is None and w.models.target is not None
    assert not mtp.isEnabled() and mtp.text() == "MTP" and mtp.toolTip() == NO_HEAD_TIP
    assert w.mode_selector.mode() is Mode.LOOKUP
    w.mode_selector.set_mode(Mode.MTP)  # refused while disabled
    assert w.mode_selector.mode() is Mode.LOOKUP
    assert "MTP head" not in w.models_panel.label.text()
    assert compare_offers_mtp(w) == (False, "MTP")
    assert w.settings.mode == "mtp"  # the user's choice stays for a model that has one

    loaded(qtbot, w, models["qwen35"])
    assert mtp.isEnabled() and mtp.text() == "Built-in MTP"
    assert w.mode_selector.mode() is Mode.MTP


def test_an_assistant_opened_as_the_draft_becomes_the_mtp_head(
    qtbot: Any, make_window: Any, send: Any, models: dict[str, Path]
) -> None:
    w = make_window(engine=None, **SETTINGS)
    loaded(qtbot, w, models["gemma4"])
    mtp = w.mode_selector.buttons[Mode.MTP]
    assert w.models.head is None and not mtp.isEnabled()  # the assistant is elsewhere
    loaded(qtbot, w, models["gemma4"], draft=models["assistant"])
    assert w.models.head == "Tiny Gemma4 assistant" and w.models.draft is None
    assert mtp.isEnabled() and mtp.text() == "Tiny Gemma4 assistant"
    assert not w.mode_selector.buttons[Mode.DRAFT].isEnabled()  # it is no draft model

    _, off_text = reply_in(w, send, Mode.OFF, PROMPT)
    st, text = reply_in(w, send, Mode.MTP, PROMPT)
    assert st.mode == "mtp" and text == off_text
    # the tiny assistant is built to predict its target: its drafts are kept
    assert st.drafted > 0 and st.accepted > st.drafted // 2, (st.accepted, st.drafted)
    assert w.gauge.figures()["acceptance"].endswith("%")


def test_lookup_drafts_on_a_hybrid_target_and_keeps_its_text(
    qtbot: Any, make_window: Any, send: Any, models: dict[str, Path]
) -> None:
    from specchat.core.decoding.runtime import RuntimeConfig
    from specchat.core.engines.local import Engine

    eng = Engine(models["lfm2"], target_config=RuntimeConfig(n_ctx=512, n_gpu_layers=0))
    try:
        # draft lengths from the text alone, not from how busy this machine is right now
        eng.cost.steady()
        w = make_window(engine=eng, **{**SETTINGS, "max_tokens": 48})
        assert w.models.head is None
        off, off_text = reply_in(w, send, Mode.OFF, REPEATS)
        st, text = reply_in(w, send, Mode.LOOKUP, REPEATS)
        assert st.mode == "lookup" and st.drafted > 0, st.note
        assert text == off_text and st.tokens == off.tokens
        f = w.gauge.figures()
        assert f["mode"] == "Prompt lookup" and f["accepted"] == f"{st.accepted}/{st.drafted}"
        w.close()
    finally:
        eng.close()
