"""Models: what is loaded and loading others (`loader`, `panel`), and the model manager dialog
(`manager`) built from its tabs, the pair chooser and the installed-models table model."""
