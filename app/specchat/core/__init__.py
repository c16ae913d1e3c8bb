"""Qt-free core: engine, speculative decoding, models, downloads, history.

Nothing in this package imports Qt; it runs and is tested headless.
"""
