"""Qt layer: widgets and workers over specchat.core. Only this package imports Qt."""

from . import qt_compat  # noqa: F401  (guards against PySide6 6.12.0 reference leaks)
