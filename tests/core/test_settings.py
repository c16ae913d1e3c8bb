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


def test_new_users_get_auto_speculation_and_auto_gpu_layers(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path))
    s = load_settings()  # no file yet: a new user
    assert s.mode == "auto"
    assert (s.target_gpu_layers, s.draft_gpu_layers) == ("auto", "auto")
    assert s.target_config().n_gpu_layers == 0  # unresolved "auto" means the CPU
    assert s.target_config(gpu_layers=-1).n_gpu_layers == -1  # the resolved count wins
    assert s.draft_config(gpu_layers=12).n_gpu_layers == 12


def test_an_explicit_choice_survives_saving_and_loading(tmp_path) -> None:
    path = tmp_path / "settings.json"
    for mode in ("off", "draft", "lookup", "auto"):
        save_settings(Settings(mode=mode), path)
        assert load_settings(path).mode == mode
    save_settings(Settings(target_gpu_layers=20, draft_gpu_layers=-1), path)
    loaded = load_settings(path)
    assert (loaded.target_gpu_layers, loaded.draft_gpu_layers) == (20, -1)
    assert loaded.target_config().n_gpu_layers == 20
    assert json.loads(path.read_text())["draft_gpu_layers"] == -1


def test_gpu_layers_values_are_checked() -> None:
    assert Settings(target_gpu_layers="auto", draft_gpu_layers=0).problems() == []
    assert Settings(target_gpu_layers="lots").problems() == [
        "GPU layers must be auto, -1 (all), 0 or a count, not 'lots'"
    ]
    assert Settings(draft_gpu_layers=-5).problems() == [
        "GPU layers must be -1 (all), 0 (CPU only) or a layer count"
    ]
    # from a file: a bad value is dropped, the rest kept
    data = {"target_gpu_layers": "lots", "draft_gpu_layers": 8, "mode": "lookup"}
    assert Settings.from_dict(data) == Settings(draft_gpu_layers=8, mode="lookup")
    assert Settings.from_dict({"target_gpu_layers": True}) == Settings()
