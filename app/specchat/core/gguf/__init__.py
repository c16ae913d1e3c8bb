"""gguf"""
