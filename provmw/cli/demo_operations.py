"""The demo's step beyond chat: a Responses call on OpenAI's wire and the same call translated for the
Anthropic-style one, an image, speech and its transcript, a rerank and a moderation, each through
the same stack, priced (per token, image, second, character or search unit) and in the ledger.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from provmw.config import ProviderConfig
from provmw.errors import ProvmwError
from provmw.testing import FakeProvider

if TYPE_CHECKING:
    from provmw.cli.demo import _Story

__all__ = ["operation_settings", "tell_operations"]

_KEY = "sk-demo-not-a-real-key"


def operation_settings(fake: FakeProvider) -> dict[str, ProviderConfig]:
    """One configuration per operation, on the fake's wires, priced by the bundled table."""
    def openai(name: str, model: str) -> ProviderConfig:
        return ProviderConfig(identifier=name, provider="openai", model=model, base_url=fake.openai_base_url,
                              api_key=_KEY)

    return {"images": openai("images", "dall-e-3"), "voice": openai("voice", "tts-1"),
            "transcripts": openai("transcripts", "whisper-1"), "moderation": openai("moderation",
                                                                                   "omni-moderation-latest"),
            "ranking": ProviderConfig(identifier="ranking", provider="cohere", model="rerank-v3.5", base_url=fake.url,
                                      api_key=_KEY)}


async def tell_operations(story: _Story) -> None:
    """Each operation once, with what it answered and what it cost."""
    m = story.manager
    story.say("   the Responses API on OpenAI's own wire, then the same call on the Anthropic-style adapter")
    story.say("   (translated to its chat wire: instructions, items, tools and schemas carry over):")
    await _show(story, lambda: m.respond("Name a colour", instructions="Answer in one word", user="ada"),
                lambda r: repr(r.text))
    await _show(story, lambda: m.respond("Name a colour", instructions="Answer in one word", configuration="backup",
                                         user="ada"), lambda r: repr(r.text))
    story.say("   an image (priced per image by size and quality), speech (per character) and its transcript")
    story.say("   (per second of audio):")
    await _show(story, lambda: m.generate_image("a lighthouse at dusk", configuration="images", quality="hd"),
                lambda r: f"{len(r.images)} image(s)")
    spoken: list[bytes] = []

    async def speak() -> Any:
        response = await m.speak("provmw says hello", configuration="voice", audio_format="wav")
        spoken.append(response.audio)
        return response

    await _show(story, speak, lambda r: f"{len(r.audio)} bytes of {r.media_type}")
    if spoken:
        await _show(story, lambda: m.transcribe(spoken[0], filename="hello.wav", configuration="transcripts"),
                    lambda r: repr(r.text))
    story.say("   a rerank (per search unit) and a moderation (free):")
    await _show(story, lambda: m.rerank("what keeps budgets strict?", ["a cat", "reservations keep budgets strict",
                                                                    "a ledger of spend"],
                                        configuration="ranking"),
                lambda r: ", ".join(f"#{d.index} {d.relevance_score:.2f}" for d in r.results))
    await _show(story, lambda: m.moderate(["hello there", "how to kill a process"], configuration="moderation"),
                lambda r: ", ".join("flagged" if result.flagged else "clean" for result in r.results))


async def _show(story: _Story, make: Callable[[], Awaitable[Any]], shown: Callable[[Any], str]) -> None:
    try:
        response = await make()
    except ProvmwError as exc:
        story.say(f"   -> {type(exc).__name__}: {exc}")
        return
    usage = response.usage
    units = "".join(f" {unit}={count:g}" for unit, count in usage.units.items())
    cost = "unpriced" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    story.say(f"   -> {shown(response)}  [served_by={response.served_by} tokens={usage.total_tokens}"
              f"{units} cost={cost}]")
