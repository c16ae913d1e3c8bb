"""Settings: defaults, validation with the engine's own messages, persistence."""

from __future__ import annotations

import json

from specchat.core.state.settings import Settings, load_settings, save_settings, settings_path


def test_defaults_are_valid_and_map_to_engine_configs() -> None:
    s = Settings().validate()
    p = s.generation_params()
    assert p.max_tokens == s.max_tokens and p.k_max == s.k_max and p.k_init <= p.k_max
    assert s.target_config().n_ctx == s.n_ctx == s.draft_config().n_ctx
    assert s.generation_params(max_tokens=7).max_tokens == 7


def test_problems_use_the_engine_messages() -> None:
    bad = Settings(top_p=0.0, temperature=-1, n_ctx=10, n_threads=-2)
    problems = bad.problems()
    assert "top_p must be in (0, 1]" in problems
    assert "temperature must be between 0 and 10" in problems
    assert "context size must be between 256 and 1,048,576 tokens" in problems
    assert "threads must be 0 (automatic) or a positive count" in problems
    assert Settings(mode="warp").problems()


def test_reload_is_needed_only_for_model_settings() -> None:
    s = Settings()
    assert not s.needs_reload(s.with_(temperature=0.7, k_max=4))
    assert s.needs_reload(s.with_(n_ctx=2048))
    assert s.needs_reload(s.with_(draft_gpu_layers=-1))


def test_round_trip_in_the_data_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path))
    s = Settings(temperature=0.7, seed=42, mode="lookup", highlight_draft=False)
    save_settings(s)
    assert settings_path() == tmp_path / "settings.json"
    assert load_settings() == s


def test_damaged_files_fall_back_to_defaults(tmp_path) -> None:
    path = tmp_path / "settings.json"
    assert load_settings(path) == Settings()  # missing
    path.write_text("{not json")
    assert load_settings(path) == Settings()
    path.write_text(json.dumps({"temperature": "hot", "top_k": 40, "unknown": 1}))
    assert load_settings(path) == Settings(top_k=40)
    path.write_text(json.dumps({"top_p": 5.0, "max_tokens": 99}))  # out of range: dropped
    assert load_settings(path) == Settings(max_tokens=99)
