"""The guard on the operations beyond chat, through a ServiceManager against the fake provider: what
each sends as text reaches the provider as placeholders, and a Responses answer (and an image answer's
revised prompt) comes back restored."""

from __future__ import annotations

import json

import pytest

from provmw.errors import GuardRefusedError
from provmw.messages import ToolSpec
from provmw.testing import FakeProvider

from .conftest import Manager

EMAIL = "ada@example.com"
SCHEMA = {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"],
          "additionalProperties": False}


def sent(fake: FakeProvider) -> str:
    return json.dumps(fake.received[-1].body)


async def test_a_responses_input_goes_out_redacted_and_its_answer_comes_back_restored(
        manager: Manager, fake: FakeProvider) -> None:
    async with manager() as built:
        answer = await built.respond(f"write to {EMAIL}", instructions=f"cc {EMAIL}")
    assert EMAIL not in sent(fake) and "<EMAIL_1>" in sent(fake)
    assert answer.text == f"echo: write to {EMAIL}" and EMAIL in json.dumps(answer.to_dict()["output"])


async def test_a_responses_tool_call_and_parsed_answer_are_restored(manager: Manager, fake: FakeProvider) -> None:
    mail = ToolSpec(name="mail", parameters=SCHEMA)
    async with manager() as built:
        called = await built.respond(f"mail {EMAIL}", tools=[mail])
        parsed = await built.respond(f"mail {EMAIL}", response_schema=SCHEMA)
    assert EMAIL in called.tool_calls[0].arguments and EMAIL in called.output[0].to_dict()["arguments"]
    assert parsed.parsed == {"to": f"echo: mail {EMAIL}"}


async def test_an_images_prompt_and_a_reranks_documents_go_out_redacted(manager: Manager,
                                                                       fake: FakeProvider) -> None:
    async with manager() as built:
        await built.generate_image(f"a portrait of {EMAIL}", configuration="main")
        image_body = sent(fake)
        await built.moderate([f"hello {EMAIL}", "plain"])
    assert EMAIL not in image_body and "<EMAIL_1>" in image_body
    assert EMAIL not in sent(fake) and "<EMAIL_1>" in sent(fake)


async def test_an_images_revised_prompt_comes_back_restored(manager: Manager, fake: FakeProvider) -> None:
    async with manager(model="dall-e-3") as built:
        answer = await built.generate_image(f"a portrait of {EMAIL}")
    assert "<EMAIL_1>" in sent(fake) and answer.images[0].revised_prompt == f"a picture of a portrait of {EMAIL}"


async def test_an_output_rule_reads_an_images_revised_prompt(manager: Manager) -> None:
    deny = [{"rule": "no-pictures", "regex": "picture", "stage": "output"}]
    async with manager(model="dall-e-3", guard={"deny": deny}) as built:
        with pytest.raises(GuardRefusedError, match="deny:no-pictures"):
            await built.generate_image("a cat")
