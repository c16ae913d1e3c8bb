"""Qt layer: widgets and threads over specchat.core. Only this package imports Qt.

- `main_window`: the window, which only builds and wires widgets; `app`: the entry point;
- `chat/`: the conversation (session, message column, rendering, conversation list, input);
- `models/`: what is loaded (`loader`, `panel`) and the model manager dialog with its parts;
- `stats/`: the gauge, the comparison window and stats texts;
- `threads/`: the inference thread, downloads and short background tasks;
- `widgets`, `errors`, `resources`, `settings_dialog`: shared pieces.
"""
