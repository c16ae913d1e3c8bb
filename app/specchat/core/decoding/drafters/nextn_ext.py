"""llama.cpp's two staging calls that MTP and assistant drafting need (`src/llama-ext.h`:
`llama_set_embeddings_nextn`, `llama_get_embeddings_nextn_ith`), resolved by their C++ mangled
names (Itanium and MSVC) since the header has C++ linkage, and the target's context and model
pointers they are called with."""

from __future__ import annotations

import ctypes
from typing import Any

from specchat.core.decoding.config import ModelLoadError
from specchat.core.decoding.runtime import ModelRuntime

_EXT_NAMES = {
    "llama_set_embeddings_nextn": (
        "llama_set_embeddings_nextn",
        "_Z26llama_set_embeddings_nextnP13llama_contextbb",
        "?llama_set_embeddings_nextn@@YAXPEAUllama_context@@_N1@Z",
    ),
    "llama_get_embeddings_nextn_ith": (
        "llama_get_embeddings_nextn_ith",
        "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
        "?llama_get_embeddings_nextn_ith@@YAPEAMPEAUllama_context@@H@Z",
    ),
}


class NextnCalls:
    """The two staging calls, as plain ctypes functions (an address comes back as an int)."""

    def __init__(self, lib: Any) -> None:
        def find(key: str) -> Any:
            for name in _EXT_NAMES[key]:
                fn = getattr(lib, name, None)
                if fn is not None:
                    return fn
            raise ModelLoadError(
                f"this llama.cpp build does not export {key}: MTP and assistant drafting "
                "need llama-cpp-python 0.3.36's library"
            )

        self.set_nextn = find("llama_set_embeddings_nextn")
        self.set_nextn.argtypes = [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool]
        self.set_nextn.restype = None
        self.nextn_ith = find("llama_get_embeddings_nextn_ith")
        self.nextn_ith.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        self.nextn_ith.restype = ctypes.c_void_p


def target_handles(rt: ModelRuntime) -> tuple[Any, Any]:
    """The target's llama_context and llama_model pointers."""
    ctx = getattr(rt, "ctx_ptr", None) or rt._ctx_ptr
    model = getattr(rt, "model_ptr", None) or rt._model.model
    return ctx, model
