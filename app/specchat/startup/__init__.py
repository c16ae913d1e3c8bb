"""Starting the desktop app: early flags, logging and the crash dialog (launch), Qt start-up
checks (qt_startup), the headless self-test (selftest), the Linux desktop entry (desktop_entry)."""
