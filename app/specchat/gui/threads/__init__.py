"""Work off the GUI thread: the inference thread (`engine`), model downloads (`downloads`) and
short background tasks (`tasks`). Each reports back through queued signals only."""
