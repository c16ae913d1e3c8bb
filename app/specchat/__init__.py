"""SpecChat: local GGUF chat made faster by speculative decoding."""

__version__ = "0.1.0"
