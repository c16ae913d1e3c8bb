"""Render the window with the hybrid-model drafters to PNG files:

- hybrid-lookup.png: the generated hybrid lfm2 (tests/tinymodel.py) answering a prompt that
  repeats itself in Prompt lookup (its text the same as with speculation off), the gauge
  showing what was drafted and accepted (few: a model with random weights does not quote).
  Draft lengths are priced with the flat cost curve (as `specchat-cli generate --cost-curve
  flat`): the tiny model's measured curve, a decode of a fraction of a millisecond timed on a
  shared CPU, prices every draft out;
- mtp-toggle.png: the tiny Gemma 4 target with its assistant opened as the draft (File → Open
  draft…), the speculation toggle naming the assistant, a reply drafted with it, the gauge and
  its per-position bars.

    xvfb-run -a .venv/bin/python tests/gui/screenshot_hybrid.py [OUT_DIR]

(or with QT_QPA_PLATFORM=offscreen). OUT_DIR defaults to docs/screenshots. The models are
generated in a temporary directory (random weights: the replies are noise, but greedy
speculation gives plain decoding's text), and the data directory is a temporary one, so the
user's settings and conversations are untouched. p_min is 0 so every draft is proposed. Exit
status 1 when a reply was not drafted as the picture claims.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the model writers

PROMPT = "w1 w2 w3 hello w4"
REPEATS = " ".join(["w1 w2 w3 w4 w5 w6 w7 w8"] * 6)  # Lookup drafts from what came before


def wait_until(app, predicate, timeout: float = 600.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise TimeoutError("timed out")
        app.processEvents()
        time.sleep(0.01)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default="docs/screenshots")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="specchat-hybrid-shots-"))
    os.environ["SPECCHAT_DATA_DIR"] = str(work / "data")

    import tinymodel_gemma4
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication
    from tinymodel import write_lfm2

    from specchat.core.decoding.pricing.cost_curve import CostCurve
    from specchat.core.state.settings import Settings
    from specchat.core.types import Mode
    from specchat.gui.app import create_application
    from specchat.gui.main_window import MainWindow

    lfm2 = write_lfm2(work / "models" / "lfm2" / "tiny-lfm2.gguf")
    target, assistant = tinymodel_gemma4.write_gemma4_pair(work / "models" / "gemma4")
    apart = work / "models" / "assistant" / assistant.name  # opened as the draft, by hand
    apart.parent.mkdir(parents=True)
    shutil.move(assistant, apart)

    app = create_application([sys.argv[0]])
    QApplication.setStyle("Fusion")
    app.setPalette(app.style().standardPalette())
    settings = Settings(max_tokens=64, mode="off", p_min=0.0, n_ctx=512, target_gpu_layers=0)
    w = MainWindow(settings=settings, autoload=False, open_manager_on_first_run=False)
    w.resize(1400, 900)
    w.show()

    def load(path: Path, draft: Path | None = None) -> None:
        if draft is None:
            w.loader.load(path, None)
        else:
            w.loader.open_draft(draft)
        wait_until(app, lambda: not w.controller.loading_models and w.models.target is not None)
        # the cost curve is measured in the background after a load: let it finish first
        wait_until(app, lambda: not w.controller.worker.measuring and w.controller.busy is False)

    def reply(mode: Mode, text: str):  # type: ignore[no-untyped-def]
        w.new_chat()
        w.mode_selector.buttons[mode].click()
        w.input.setPlainText(text)
        w.send(w.input.toPlainText())
        wait_until(app, lambda: w.session.streaming)
        wait_until(app, lambda: not w.session.streaming)
        # the last conversation's widgets go (deleted later: processEvents alone keeps them)
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        settle = time.monotonic() + 0.5  # and the layout settles
        wait_until(app, lambda: time.monotonic() > settle)
        return w.gauge.stats

    def last_text() -> str:
        last = w.chat.last("assistant")
        return last.text if last is not None else ""

    problems: list[str] = []
    load(lfm2)
    # priced as `--cost-curve flat` prices it: the tiny model's measured curve (a decode of
    # 0.2 ms, timed beside other programs on a shared CPU) prices every draft out
    engine = w.controller.engine
    assert engine is not None
    engine.use_cost_curve(CostCurve.flat())
    reply(Mode.OFF, REPEATS)  # what Lookup's reply must equal
    off_text = last_text()
    st = reply(Mode.LOOKUP, REPEATS)
    if st is None or st.mode != "lookup" or not st.drafted:
        problems.append(f"hybrid lookup reply not drafted: {st}")
    elif last_text() != off_text:
        problems.append("the Lookup reply differs from the Off reply")
    else:
        print(f"lookup on lfm2: {st.accepted}/{st.drafted} accepted, {st.tokens} tokens")
    w.grab().save(str(out / "hybrid-lookup.png"))

    load(target)
    load(target, apart)
    b = w.mode_selector.buttons[Mode.MTP]
    if not b.isEnabled() or b.text() != w.models.head:
        problems.append(f"the toggle does not offer the assistant: {b.text()!r}")
    st = reply(Mode.MTP, PROMPT)
    if st is None or st.mode != "mtp" or not st.drafted:
        problems.append(f"MTP reply not drafted: {st}")
    else:
        print(f"mtp with {w.models.head}: {st.accepted}/{st.drafted} accepted")
    w.grab().save(str(out / "mtp-toggle.png"))
    w.close()
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
