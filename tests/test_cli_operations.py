"""``provmw respond / image / transcribe / speak / rerank / moderate`` end to end against the fake
provider, through the full stack, as ``provmw chat`` is tested."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from provmw.cli import main
from provmw.testing import FakeProvider, Fault

CONFIGURATIONS = {"chat": ("openai", "gpt-4o-mini"), "rank": ("cohere", "rerank-v3.5"),
                  "mod": ("openai", "omni-moderation-latest"), "img": ("openai", "dall-e-3"),
                  "ear": ("openai", "whisper-1"), "voice": ("openai", "tts-1")}


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The usage ledger goes where the command runs: here, not in the checkout."""
    monkeypatch.chdir(tmp_path)


def settings_file(fake: FakeProvider, tmp_path: Path) -> str:
    path = tmp_path / "provmw.toml"
    path.write_text("".join(
        f'[configurations.{name}]\nprovider = "{provider}"\nmodel = "{model}"\n'
        f'base_url = "{fake.url if provider == "cohere" else fake.openai_base_url}"\n'
        for name, (provider, model) in CONFIGURATIONS.items()))
    return str(path)


async def run(fake: FakeProvider, tmp_path: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = await asyncio.to_thread(main, ["--config", settings_file(fake, tmp_path), *argv], out)
    return status, out.getvalue()


async def test_rerank_prints_the_documents_best_first_and_the_search_units_cost(fake: FakeProvider,
                                                                                tmp_path: Path) -> None:
    status, text = await run(fake, tmp_path, "rerank", "red apple", "pear", "red apple", "apple pie", "-c", "rank")
    assert status == 0
    assert text.splitlines()[:3] == ["1. [1] 1.0000  red apple", "2. [2] 0.5000  apple pie", "3. [0] 0.0000  pear"]
    assert text.splitlines()[3] == ("-- served_by=rank model=rerank-v3.5 tokens in=0 out=0 units search_unit=1 "
                                    "cost=$0.002 cached=False")


async def test_rerank_top_n_prints_only_the_best(fake: FakeProvider, tmp_path: Path) -> None:
    status, text = await run(fake, tmp_path, "rerank", "apple", "pear", "apple", "-c", "rank", "--top-n", "1")
    assert status == 0 and text.splitlines()[0] == "1. [1] 1.0000  apple" and text.splitlines()[1].startswith("--")
    assert fake.received[-1].body["top_n"] == 1


async def test_moderate_prints_each_verdict_and_exits_1_when_one_is_flagged(fake: FakeProvider,
                                                                            tmp_path: Path) -> None:
    status, text = await run(fake, tmp_path, "moderate", "hello", "kill it", "-c", "mod")
    assert status == 1
    assert text.splitlines()[:2] == ["'hello': not flagged", "'kill it': flagged: harassment/threatening, violence"]
    assert "served_by=mod model=omni-moderation-latest" in text and "cost=$0 " in text


async def test_moderate_exits_0_when_nothing_is_flagged(fake: FakeProvider, tmp_path: Path) -> None:
    status, text = await run(fake, tmp_path, "moderate", "a quiet afternoon", "-c", "mod")
    assert status == 0 and text.startswith("'a quiet afternoon': not flagged\n")


async def test_respond_prints_the_answer_and_its_cost(fake: FakeProvider, tmp_path: Path) -> None:
    status, text = await run(fake, tmp_path, "respond", "hello cli", "-c", "chat")
    assert status == 0 and text.splitlines()[0] == "echo: hello cli"
    assert text.splitlines()[1].startswith("-- served_by=chat model=gpt-4o-mini tokens in=2 out=3 cost=$")


async def test_image_writes_each_image_to_a_numbered_file(fake: FakeProvider, tmp_path: Path) -> None:
    status, text = await run(fake, tmp_path, "image", "a cat", "-c", "img", "--n", "2", "--out",
                             str(tmp_path / "cat.png"))
    assert status == 0
    assert (tmp_path / "cat-1.png").read_bytes().startswith(b"\x89PNG") and (tmp_path / "cat-2.png").exists()
    assert "units image:1024x1024:standard=2 cost=$0.08" in text


async def test_image_without_out_says_how_to_save_it(fake: FakeProvider, tmp_path: Path) -> None:
    status, text = await run(fake, tmp_path, "image", "a cat", "-c", "img")
    assert status == 0 and "bytes (give --out FILE to save them)" in text.splitlines()[0]


async def test_transcribe_prints_the_text_and_its_seconds(fake: FakeProvider, tmp_path: Path) -> None:
    (tmp_path / "hello.mp3").write_bytes(b"\xff\xfb" + bytes(4_000))
    status, text = await run(fake, tmp_path, "transcribe", str(tmp_path / "hello.mp3"), "-c", "ear")
    assert status == 0 and text.splitlines()[0] and " units audio_second=" in text.splitlines()[1]
    assert fake.count(route="transcriptions") == 1


async def test_transcribe_of_a_missing_file_exits_2_before_any_request(
        fake: FakeProvider, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = await run(fake, tmp_path, "transcribe", str(tmp_path / "missing.wav"), "-c", "ear")
    assert status == 2 and "ConfigurationError: cannot read" in capsys.readouterr().err
    assert fake.count() == 0


async def test_speak_writes_the_audio_to_out(fake: FakeProvider, tmp_path: Path) -> None:
    status, text = await run(fake, tmp_path, "speak", "hello world", "-c", "voice", "--out", str(tmp_path / "s.mp3"))
    assert status == 0 and (tmp_path / "s.mp3").read_bytes().startswith(b"\xff\xfb")
    assert text.startswith(f"{tmp_path / 's.mp3'}: ") and "units character=11" in text


async def test_an_operation_the_provider_lacks_exits_2_before_any_request(
        fake: FakeProvider, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = await run(fake, tmp_path, "rerank", "q", "doc", "-c", "chat")
    assert status == 2 and fake.count() == 0
    assert "UnsupportedOperationError: provider 'openai' (configuration 'chat') does not support the 'rerank'" \
        in capsys.readouterr().err


async def test_a_provider_refusal_exits_2_with_its_message(fake: FakeProvider, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    fake.script(Fault(status=401, message="invalid api token"), route="rerank")
    status, _ = await run(fake, tmp_path, "rerank", "q", "doc", "-c", "rank")
    assert status == 2
    assert "AuthenticationError: cohere/rerank-v3.5 (HTTP 401): invalid api token" in capsys.readouterr().err


def test_speak_without_out_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["speak", "hello"], io.StringIO())
    assert exited.value.code == 2 and "--out" in capsys.readouterr().err
