"""Remote servers in the window: the connection dialog, the server list model and the threads
that talk to servers. The wiring into the main window lives with the window (docs/remote.md)."""
