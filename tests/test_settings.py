from __future__ import annotations

from pathlib import Path

import pytest

from provmw.errors import ConfigurationError
from provmw.settings import Settings, find_settings_file, load_settings

GOOD = """
default = "primary"

[plugins]
block = ["noisy"]

[configurations.primary]
provider = "openai"
model = "gpt-4o-mini"
api_key_env = "TEST_OPENAI_KEY"
fallbacks = ["backup"]
options = { temperature = 0.0, max_tokens = 64 }

[configurations.backup]
provider = "anthropic"
model = "claude-haiku"
context_window = 200000

[middleware.call_log]
log_text = true
"""


def write(tmp_path: Path, text: str, name: str = "provmw.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_configurations_fallbacks_and_sections(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, GOOD), environ={"TEST_OPENAI_KEY": "sk-x"})
    primary = settings.configuration(None)
    assert (primary.identifier, primary.fallbacks, primary.options["max_tokens"]) == ("primary", ("backup",), 64)
    assert primary.api_key is not None and primary.api_key.reveal() == "sk-x"
    assert settings.configuration("backup").context_window == 200000
    assert settings.section("call_log")["log_text"] is True
    assert settings.plugins.block == ("noisy",)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not found"):
        load_settings(tmp_path / "nope.toml")


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "default = \n")
    with pytest.raises(ConfigurationError, match=f"{path}: not valid TOML"):
        load_settings(path)


def test_unknown_key_names_file_section_key_and_hint(tmp_path: Path) -> None:
    path = write(tmp_path, '[configurations.a]\nprovider = "openai"\nmodel = "m"\ntimout_s = 3\n')
    with pytest.raises(ConfigurationError, match=r"\[configurations.a\].*'timout_s'.*did you mean 'timeout_s'"):
        load_settings(path, environ={})


def test_unknown_top_level_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unknown key 'configuration'.*did you mean 'configurations'"):
        load_settings(write(tmp_path, "[configuration.a]\n"), environ={})


def test_missing_env_var_for_a_key_is_named_when_the_configuration_is_used(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, GOOD), environ={})
    with pytest.raises(ConfigurationError, match=r"\[configurations.primary\] api_key_env.*TEST_OPENAI_KEY"):
        settings.configuration("primary")


def test_a_missing_key_does_not_stop_loading_or_another_configuration(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, GOOD), environ={})
    assert settings.configuration("backup").api_key is None
    assert settings.configurations["primary"].api_key_env == "TEST_OPENAI_KEY"


def test_invalid_value_names_section_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, '[configurations.a]\nprovider = "openai"\nmodel = "m"\ntimeout_s = -1\n')
    with pytest.raises(ConfigurationError, match=rf"{path}: \[configurations.a\] timeout_s"):
        load_settings(path, environ={})


def test_unknown_fallback_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, '[configurations.a]\nprovider = "openai"\nmodel = "m"\nfallbacks = ["bakup"]\n')
    with pytest.raises(ConfigurationError, match="'bakup' names no configuration"):
        load_settings(path, environ={})


def test_missing_model_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"\[configurations.a\] model: missing"):
        load_settings(write(tmp_path, '[configurations.a]\nprovider = "openai"\n'), environ={})


def test_pyproject_tool_section_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, '[tool.provmw.configurations.a]\nprovider = "openai"\nmodel = "m"\n', "pyproject.toml")
    monkeypatch.chdir(tmp_path)
    assert find_settings_file(environ={}) == Path("pyproject.toml")
    assert load_settings(environ={}).configuration(None).model == "m"


def test_env_var_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[configurations.a]\nprovider = "openai"\nmodel = "m"\n', "custom.toml")
    assert find_settings_file(environ={"PROVMW_CONFIG": str(path)}) == path


def test_unknown_configuration_name_gives_a_hint(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, GOOD), environ={"TEST_OPENAI_KEY": "k"})
    with pytest.raises(ConfigurationError, match="did you mean 'backup'"):
        settings.configuration("bakup")


def test_a_relative_state_path_is_relative_to_the_settings_file(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "provmw.toml").write_text('[middleware.usage]\npath = "state/ledger.db"\n')
    settings = load_settings(tmp_path / "conf" / "provmw.toml", environ={})
    assert settings.relative_to_file("state/ledger.db") == str(tmp_path / "conf" / "state" / "ledger.db")
    assert Settings().relative_to_file("ledger.db") == "ledger.db"


def test_a_state_section_keeps_its_url_sharing_and_backend_keys(tmp_path: Path) -> None:
    text = '[state]\nurl = "redis://:pw-SECRET@db:6379/0"\nshared = ["budget"]\nkey_prefix = "app"\n'
    state = load_settings(write(tmp_path, text), environ={}).state
    assert state is not None
    assert (state.scheme, state.shared, dict(state.options)) == ("redis", ("budget",), {"key_prefix": "app"})
    assert "pw-SECRET" not in repr(state)
    assert state.shown_url == "redis://:***@db:6379/0"


def test_a_state_section_without_a_url_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"\[state\] url: needs a URL"):
        load_settings(write(tmp_path, '[state]\nkey_prefix = "app"\n'), environ={})


def test_an_unknown_shared_concern_is_named_with_a_hint(tmp_path: Path) -> None:
    text = '[state]\nurl = "redis://db"\nshared = ["budgets"]\n'
    with pytest.raises(ConfigurationError, match=r"\[state\] shared: 'budgets'.*did you mean 'budget'"):
        load_settings(write(tmp_path, text), environ={})
