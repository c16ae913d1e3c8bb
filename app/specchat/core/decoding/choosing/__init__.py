"""Choosing tokens: in llama.cpp's graph (`backend_sampler`), corrected on the host at a few ids
(`candidates`), or from raw rows (`sampling`'s warp into `dist`'s distributions); exact
speculative acceptance (`speculative`); and the target's choice each step (`chooser`)."""
