"""``provmw check`` lists every problem up front and exits non-zero when it finds one."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from provmw.cli import main

TWO = """
[plugins]
autoload = false

[configurations.a]
provider = "openai"
model = "m"
api_key_env = "CHECK_A_KEY"
fallbacks = ["b"]
price = {{ input_usd_per_mtok = 1.0 }}  # an unpriced model is a note, and would show

[configurations.b]
provider = "openai"
model = "m"
headers_env = {{ "api-key" = "CHECK_B_HEADER" }}
price = {{ input_usd_per_mtok = 1.0 }}
{extra}
"""


def check(tmp_path: Path, extra: str = "") -> tuple[int, str]:
    path = tmp_path / "provmw.toml"
    path.write_text(TWO.format(extra=extra))
    out = io.StringIO()
    return main(["--config", str(path), "check"], out), out.getvalue()


def test_every_missing_variable_is_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHECK_A_KEY", raising=False)
    monkeypatch.delenv("CHECK_B_HEADER", raising=False)
    status, printed = check(tmp_path)
    assert status == 1
    assert "[configurations.a] api_key_env: environment variable CHECK_A_KEY is not set" in printed
    assert "[configurations.b] headers_env.api-key: environment variable CHECK_B_HEADER is not set" in printed


def test_settings_that_check_out_exit_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_A_KEY", "sk-a")
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    assert check(tmp_path) == (0, f"settings: {tmp_path / 'provmw.toml'}\nusage ledger: {tmp_path / 'provmw.sqlite3'}\n"
                                  "ok: settings, keys, plugins, state and ledger check out\n")


def test_a_state_url_no_plugin_serves_is_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_A_KEY", "sk-a")
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    status, printed = check(tmp_path, '[state]\nurl = "redis://127.0.0.1:6379/0"')
    assert status == 1 and "[state] url: no" in printed and "redis:// state" in printed


def test_a_middleware_section_error_is_a_problem_besides_the_keys(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHECK_A_KEY", raising=False)
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    status, printed = check(tmp_path, "[middleware.retry]\nmax_atempts = 3")
    assert status == 1 and "CHECK_A_KEY" in printed and "max_atempts" in printed
    assert printed.endswith("2 problem(s) found\n")


def test_a_file_that_does_not_load_is_the_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "provmw.toml"
    path.write_text("default = \n")
    out = io.StringIO()
    assert main(["--config", str(path), "check"], out) == 1
    assert "not valid TOML" in out.getvalue() and out.getvalue().endswith("1 problem(s) found\n")


@pytest.mark.parametrize("base_url", ["https://ada:s3cret-pass@llm.example.com/v1",
                                      "https://llm.example.com/v1?api_key=s3cret-pass"], ids=["userinfo", "query"])
def test_a_base_url_carrying_credentials_beside_api_key_env_is_a_problem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_url: str) -> None:
    monkeypatch.setenv("CHECK_A_KEY", "sk-a")
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    status, printed = check(tmp_path, f'\n[configurations.c]\nprovider = "openai"\nmodel = "m"\n'
                                      f'api_key_env = "CHECK_A_KEY"\nbase_url = "{base_url}"\n')
    assert status == 1
    assert "[configurations.c] base_url" in printed and "carries credentials" in printed
    assert "s3cret-pass" not in printed


def test_an_autoload_switch_neither_true_nor_false_is_a_problem(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_A_KEY", "sk-a")
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    monkeypatch.setenv("PROVMW_DISABLE_PLUGIN_AUTOLOAD", "maybe")
    status, printed = check(tmp_path)
    assert status == 1 and "PROVMW_DISABLE_PLUGIN_AUTOLOAD: 'maybe' is neither true" in printed


def test_an_empty_key_variable_is_a_problem_not_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_A_KEY", "")
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    status, printed = check(tmp_path)
    assert status == 1
    assert "[configurations.a] api_key_env: environment variable CHECK_A_KEY is set but empty" in printed


def test_a_sqlite_ledger_under_a_missing_folder_is_a_ledger_problem(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_A_KEY", "sk-a")
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    status, printed = check(tmp_path, '[middleware.usage]\npath = "gone/ledger.sqlite3"')
    assert status == 1
    assert "ledger (1 problem(s)):\n  problem: " in printed
    assert f"{tmp_path / 'gone'} is a folder that does not exist, and the SQLite file ledger.sqlite3" in printed


def test_a_file_where_the_ledger_folder_should_be_is_a_ledger_problem(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_A_KEY", "sk-a")
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    (tmp_path / "taken").write_text("not a folder")
    status, printed = check(tmp_path, '[middleware.usage]\npath = "taken/ledger.sqlite3"')
    assert status == 1 and "taken is a file, not a folder" in printed


def test_a_ledger_file_that_is_no_database_is_a_ledger_problem(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_A_KEY", "sk-a")
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    (tmp_path / "provmw.sqlite3").write_text("x" * 200)
    status, printed = check(tmp_path)
    assert status == 1 and "cannot be opened for writing (file is not a database)" in printed


def test_every_problem_is_listed_under_its_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHECK_A_KEY", raising=False)
    monkeypatch.setenv("CHECK_B_HEADER", "h-b")
    status, printed = check(tmp_path, '[middleware.usage]\npath = "gone/ledger.sqlite3"\n[middleware.retry]\nx = 1')
    sections = [line.split(" (")[0] for line in printed.splitlines() if line.endswith("problem(s)):")]
    assert status == 1 and sections == ["settings", "credentials", "ledger"]
    assert printed.endswith("3 problem(s) found\n")


def test_every_settings_table_that_does_not_load_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "provmw.toml"
    path.write_text('[configurations.a]\nprovider = "openai"\nmodel = "m"\ntemprature = 0\n\n'
                    '[configurations.b]\nprovider = "openai"\nmodel = "m"\nbase_urll = "x"\n')
    out = io.StringIO()
    assert main(["--config", str(path), "check"], out) == 1
    assert "temprature" in out.getvalue() and "base_urll" in out.getvalue()


def test_every_middleware_section_that_does_not_build_is_listed(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_A_KEY", "k")
    monkeypatch.setenv("CHECK_B_HEADER", "h")
    status, printed = check(tmp_path, '[middleware.retyr]\nmax_attempts = 3\n[middleware.budget]\nmode = "stric"\n')
    assert status == 1
    assert "[middleware.retyr] names no installed middleware" in printed and "mode must be one of" in printed
