"""ImageRequest and ImageEditRequest: validation, bounds, canonical form; ImageResponse's round trip."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from provmw.context import ProviderOperation
from provmw.errors import ConfigurationError, InvalidDataError
from provmw.messages import ImagePart
from provmw.operations import OPERATIONS, response_types
from provmw.operations.images import MOST_IMAGE_TOKENS, GeneratedImage, ImageEditRequest, ImageRequest, ImageResponse
from provmw.responses import Usage

PNG = b"\x89PNG\r\n\x1a\nfake"


@pytest.mark.parametrize(("fields", "named"), [
    ({"prompt": ""}, "prompt"),
    ({"prompt": 3}, "prompt"),
    ({"prompt": "p", "size": "big"}, "size"),
    ({"prompt": "p", "size": 1024}, "size"),
    ({"prompt": "p", "quality": "very high"}, "quality"),
    ({"prompt": "p", "n": 0}, "n must"),
    ({"prompt": "p", "n": 11}, "n must"),
    ({"prompt": "p", "n": True}, "n must"),
    ({"prompt": "p", "options": [("size", "x")]}, "options"),
])
def test_a_wrong_field_is_a_configuration_error_naming_it(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        ImageRequest(**fields)


@pytest.mark.parametrize(("fields", "named"), [
    ({"image": ImagePart(url="https://example.com/a.png")}, "image must"),
    ({"image": b""}, "image must"),
    ({"image": "a.png"}, "image must"),
    ({"image": PNG, "mask": "m.png"}, "mask must"),
])
def test_an_edit_needs_the_images_bytes(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        ImageEditRequest(prompt="p", **fields)


def test_bytes_are_taken_as_a_png() -> None:
    request = ImageEditRequest(prompt="p", image=PNG, mask=PNG)
    assert request.image == ImagePart(data=PNG, media_type="image/png") and request.mask == request.image


def test_the_worst_case_is_n_images_of_the_size_and_quality_asked() -> None:
    assert ImageRequest("p", size="1792x1024", quality="hd", n=3).most_units({}) == {"image:1792x1024:hd": 3.0}


def test_unset_size_and_quality_come_from_a_configurations_extra_body_else_the_size_default_and_any_quality() -> None:
    request, extra = ImageRequest("p", n=2), {"extra_body": {"quality": "medium", "size": "1024x1536"}}
    assert request.most_units({}) == {"image:1024x1024:auto": 2.0}
    assert request.resolved({}) == ("1024x1024", "standard")
    assert request.most_units(extra) == {"image:1024x1536:medium": 2.0}
    assert ImageRequest("p", quality="low").most_units(extra) == {"image:1024x1536:low": 1.0}


@pytest.mark.parametrize(("size", "n", "tokens"), [("1024x1024", 1, 6240), ("1536x1024", 2, 12_480),
                                                   ("auto", 1, 6240), ("2048x2048", 1, 16_640)])
def test_output_tokens_are_bounded_by_the_pixels_at_high_quality(size: str, n: int, tokens: int) -> None:
    assert ImageRequest("p", size=size, n=n).most_output_tokens({}) == tokens


def test_images_are_never_deterministic_and_are_generated_media() -> None:
    request = ImageRequest("p", options={"temperature": 0, "seed": 1})
    assert not request.deterministic({"temperature": 0})
    assert OPERATIONS[ProviderOperation.IMAGE].generated and OPERATIONS[ProviderOperation.IMAGE_EDIT].generated


def test_each_operation_needs_its_own_capability() -> None:
    assert ImageRequest("p").needs(streaming=False) == frozenset({"images"})
    assert ImageEditRequest("p", image=PNG).needs(streaming=False) == frozenset({"image_edits"})


def test_input_bytes_are_the_prompts_utf8_and_an_edits_images_at_their_largest() -> None:
    assert ImageRequest("日本").input_bytes() == 6
    assert ImageEditRequest("日本", image=PNG).input_bytes() == 6 + MOST_IMAGE_TOKENS
    assert ImageEditRequest("日本", image=PNG, mask=PNG).input_bytes() == 6 + 2 * MOST_IMAGE_TOKENS


def test_the_canonical_form_holds_the_images_digest_never_their_bytes() -> None:
    body = ImageEditRequest("p", image=PNG, options={"background": "transparent"}).to_dict()
    assert body["image"] == {"sha256": hashlib.sha256(PNG).hexdigest(), "media_type": "image/png"}
    assert body["mask"] is None and body["options"] == {"background": "transparent"}
    assert "fake" not in json.dumps(body)


def test_the_prompt_is_the_text_a_guard_may_rewrite() -> None:
    request = ImageEditRequest("a cat", image=PNG)
    assert request.texts() == ("a cat",)
    assert request.with_texts(["a dog"]) == ImageEditRequest("a dog", image=PNG)
    with pytest.raises(ConfigurationError, match="1 text"):
        request.with_texts([])


def test_a_generated_image_holds_a_url_or_bytes_never_both() -> None:
    with pytest.raises(ConfigurationError, match="exactly one"):
        GeneratedImage(url="https://x", data=b"y")
    with pytest.raises(ConfigurationError, match="exactly one"):
        GeneratedImage()


def test_a_response_round_trips_through_plain_json() -> None:
    response = ImageResponse(provider="openai", model="dall-e-3", served_by="oa",
                             usage=Usage(units={"image:1024x1024:hd": 2}),
                             images=[GeneratedImage(data=PNG, revised_prompt="a cat"), GeneratedImage(url="https://x")])
    data = json.loads(json.dumps(response.to_dict()))
    assert response_types()[data["type"]].from_dict(data) == response
    assert response_types()["image"] is ImageResponse


@pytest.mark.parametrize(("images", "named"), [("x", "images"), ([{"data": "not base64!"}], "base64"),
                                               ([{"url": 3}], "url")])
def test_a_wrong_dict_is_refused_naming_the_field(images: Any, named: str) -> None:
    data = {**ImageResponse(provider="p", model="m").to_dict(), "images": images}
    with pytest.raises(InvalidDataError, match=named):
        ImageResponse.from_dict(data)
