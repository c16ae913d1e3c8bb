"""Qt layer: widgets and workers over specchat.core. Only this package imports Qt."""
