"""``provmw keys`` end to end in a temporary folder: the key shown once, then only its record."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from provmw.cli import main
from provmw.gateway import KeyRecord, SqliteKeyStore


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "provmw.toml"
    path.write_text('[middleware.usage]\npath = "ledger/usage.sqlite3"\n')
    return str(path)


def keys(config: str, *argv: str) -> tuple[int, str]:
    return run("--config", config, "keys", *argv)


def created(config: str, *argv: str) -> tuple[str, str]:
    status, text = keys(config, "create", "--organisation", "acme", *argv)
    assert status == 0
    whole, _ = text.split("\n", 1)
    return whole, text


def record(path: Path, key_id: str) -> KeyRecord | None:
    async def get() -> KeyRecord | None:
        store = SqliteKeyStore(path)
        try:
            return await store.get(key_id)
        finally:
            await store.aclose()

    return asyncio.run(get())


def key_id(whole: str) -> str:
    return whole.split("_")[1]


def test_create_prints_the_key_alone_first_then_its_record(config: str, tmp_path: Path) -> None:
    whole, text = created(config, "--team", "search", "--model", "gpt", "--model", "claude", "--name", "ci")
    assert whole.startswith("pmk_")
    assert text.count(whole) == 1
    assert "search" in text and "gpt,claude" in text
    found = record(tmp_path / "ledger" / "provmw-keys.sqlite3", key_id(whole))  # beside the ledger
    assert found is not None
    assert found.models == ("gpt", "claude")


def test_the_secret_is_shown_once_and_never_again(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    whole, _ = created(config)
    later = [keys(config, "list")[1], keys(config, "list", "--format", "json")[1],
             keys(config, "disable", key_id(whole))[1], keys(config, "rotate", key_id(whole))[1]]
    secret = whole.split("_", 2)[2]
    assert not any(secret in text for text in later)
    assert secret not in capsys.readouterr().err


def test_list_as_json_gives_each_keys_record(config: str) -> None:
    first, _ = created(config, "--team", "search")
    status, _ = keys(config, "create", "--organisation", "globex")
    status, text = keys(config, "list", "--organisation", "acme", "--format", "json")
    assert status == 0
    [row] = json.loads(text)
    assert (row["key_id"], row["team"], row["models"], row["status"]) == (key_id(first), "search", [], "enabled")
    assert not any("sha" in field or "secret" in field for field in row)


def test_disable_shows_in_the_list_and_in_verify(config: str, tmp_path: Path) -> None:
    whole, _ = created(config)
    status, text = keys(config, "disable", key_id(whole))
    assert status == 0
    assert text.startswith(f"disabled {key_id(whole)}")
    assert "disabled" in keys(config, "list")[1].splitlines()[1]
    found = record(tmp_path / "ledger" / "provmw-keys.sqlite3", key_id(whole))
    assert found is not None
    assert found.disabled


def test_rotate_prints_a_new_key_and_a_second_rotation_of_the_old_is_refused(
        config: str, capsys: pytest.CaptureFixture[str]) -> None:
    old, _ = created(config)
    status, text = keys(config, "rotate", key_id(old))
    new = text.split("\n", 1)[0]
    assert (status, new.startswith("pmk_"), new != old) == (0, True, True)
    assert keys(config, "rotate", key_id(old))[0] == 2
    assert f"rotated already, to '{key_id(new)}'" in capsys.readouterr().err


def test_budget_sets_and_removes_a_teams_limit_before_any_key(config: str) -> None:
    assert keys(config, "budget", "--team", "acme/search", "--period", "day", "--max-requests", "3",
                "--max-cost-usd", "2.5") == (0, "team:acme/search day: $2.5, 3 requests\n")
    assert keys(config, "budget", "--team", "acme/search", "--period", "day", "--remove") == \
        (0, "team:acme/search day: removed\n")


def test_budget_sets_a_users_limit_within_its_organisation(config: str) -> None:
    assert keys(config, "budget", "--user", "acme/grace", "--period", "week", "--max-tokens", "500") == \
        (0, "user:acme/grace week: 500 tokens\n")


def test_a_budget_with_neither_a_maximum_nor_remove_is_refused(config: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    created(config)  # the store exists
    assert keys(config, "budget", "--organisation", "acme", "--period", "month")[0] == 2
    assert "--max-requests, or --remove" in capsys.readouterr().err


@pytest.mark.parametrize(("whose", "field"), [(("--organisation", "a/b"), "organisation"),
                                              (("--team", "a/b\x07"), "team"), (("--team", "a\n/b"), "organisation")])
def test_a_budget_for_a_name_no_key_may_have_is_refused_naming_the_field(
        config: str, capsys: pytest.CaptureFixture[str], whose: tuple[str, str], field: str) -> None:
    created(config)
    assert keys(config, "budget", *whose, "--period", "day", "--max-requests", "1")[0] == 2
    assert f"{field}: a name is at most" in capsys.readouterr().err


def test_a_budget_for_an_unknown_key_is_refused(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    created(config)
    assert keys(config, "budget", "--key", "0123456789ab", "--period", "day", "--max-requests", "1")[0] == 2
    assert "no virtual key '0123456789ab'" in capsys.readouterr().err


def test_with_no_key_store_list_is_empty_and_disable_is_refused(config: str, tmp_path: Path) -> None:
    assert keys(config, "list") == (0, "(no keys)\n")
    assert keys(config, "disable", "0123456789ab")[0] == 2
    assert not (tmp_path / "ledger" / "provmw-keys.sqlite3").exists()


def test_keys_names_another_store(config: str, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere.sqlite3"
    status, text = keys(config, "create", "--organisation", "acme", "--keys", str(other))
    assert status == 0
    assert record(other, key_id(text.split("\n", 1)[0])) is not None


def test_create_with_a_guard_names_the_policy_the_gateway_needs(
        config: str, capsys: pytest.CaptureFixture[str]) -> None:
    created(config, "--guard", "strict")
    assert "[middleware.guard.policies.strict] (plugin provmw-guard); while the settings lack it, it refuses " \
        "them (503)" in capsys.readouterr().err


def test_create_without_a_guard_does_not_warn(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    created(config)
    assert "middleware.guard" not in capsys.readouterr().err
