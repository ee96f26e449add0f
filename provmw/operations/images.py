"""Images: generated from a prompt, or an image edited by a prompt (OpenAI's ``/images`` wire).

An image is billed by its size and quality (``image:<size>:<quality>`` units, ADR 0053).
When a request leaves them unset, the configuration's ``options.extra_body`` (``size``,
``quality``) fill them, else :data:`DEFAULT_SIZE` and :data:`DEFAULT_QUALITY`: what dall-e-2 and
dall-e-3 make when asked nothing, one square image at standard quality. The adapter sends the size
it billed for, so the worst case is what the wire is asked for; it sends a quality only
when one was given, since gpt-image-1 refuses ``standard`` (its own default, ``auto``,
picks low, medium or high as it goes: a call without a quality is bounded at the dearest
quality its price names for the size, and billed at the one the answer states). Generated images are not
deterministic: the same prompt makes a new image each time, so they are never cached by default.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

import attrs

from provmw._base import serde
from provmw._base.strict_json import plain_json
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError
from provmw.messages import ImagePart
from provmw.responses import ProviderResponse

__all__ = ["DEFAULT_QUALITY", "DEFAULT_SIZE", "MAX_IMAGES", "MOST_IMAGE_TOKENS", "GeneratedImage", "ImageEditRequest",
           "ImageRequest", "ImageResponse", "image_unit"]

DEFAULT_SIZE = "1024x1024"
DEFAULT_QUALITY = "standard"
MAX_IMAGES = 10  # OpenAI's bound on ``n``
# gpt-image-1's output tokens for its largest image at high quality (OpenAI's table: 4,160 for
# 1024x1024, 6,240 for 1536x1024, in proportion to the pixels).
MOST_IMAGE_TOKENS = 6240
_LARGEST_PIXELS = 1536 * 1024
_SIZE = re.compile(r"[1-9][0-9]{1,4}x[1-9][0-9]{1,4}|auto")
_DIMENSIONS = re.compile(r"([1-9][0-9]{0,4})x([1-9][0-9]{0,4})")


def image_unit(size: str, quality: str) -> str:
    """The unit an image of ``size`` and ``quality`` is billed in."""
    return f"image:{size}:{quality}"


def _frozen(value: Mapping[str, Any] | None) -> FrozenMap:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigurationError(f"options must be a mapping of option names to values, got {type(value).__name__}")
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _prompt(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"prompt must be a non-empty string, got {value!r:.40}")


def _size(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not _SIZE.fullmatch(value)):
        raise ConfigurationError(f"size must be None or WIDTHxHEIGHT (such as '1024x1024'), got {value!r:.40}")


def _quality(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.isalpha()):
        raise ConfigurationError(f"quality must be None or a word (standard, hd, low, medium, high), got {value!r:.40}")


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_IMAGES:
        raise ConfigurationError(f"n must be an integer from 1 to {MAX_IMAGES}, got {value!r:.40}")


def _image_bytes(value: object, where: str) -> ImagePart:
    if not isinstance(value, ImagePart) or value.data is None or not value.data:
        raise ConfigurationError(f"{where} must be an ImagePart holding the image's bytes (data), got {value!r:.60}")
    return value


def _image(value: object) -> ImagePart:
    return _image_bytes(ImagePart(data=value) if isinstance(value, bytes) else value, "image")


def _mask(value: object) -> ImagePart | None:
    if value is None:
        return None
    return _image_bytes(ImagePart(data=value) if isinstance(value, bytes) else value, "mask")


def _digest(part: ImagePart | None) -> dict[str, str] | None:
    """An image as the cache key sees it: its bytes' SHA-256, never the bytes."""
    if part is None:
        return None
    assert part.data is not None
    return {"sha256": hashlib.sha256(part.data).hexdigest(), "media_type": part.media_type}


@attrs.frozen
class ImageRequest:
    """A prompt to make ``n`` images of, at a ``size`` and ``quality`` (None: see the module's docstring)."""

    prompt: str = attrs.field(validator=_prompt)
    size: str | None = attrs.field(default=None, validator=_size)
    quality: str | None = attrs.field(default=None, validator=_quality)
    n: int = attrs.field(default=1, validator=_count)
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen)

    def resolved(self, options: Mapping[str, Any]) -> tuple[str, str]:
        """The size and quality billed: the request's, else the options' ``extra_body`` (where a
        configuration gives vendor fields), else the defaults."""
        extra = options.get("extra_body") or {}
        return str(self.size or extra.get("size") or DEFAULT_SIZE), str(self.quality or extra.get("quality")
                                                                         or DEFAULT_QUALITY)

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "size": self.size, "quality": self.quality, "n": self.n,
                "options": plain_json(self.options)}

    def needs(self, *, streaming: bool) -> frozenset[str]:
        return frozenset({"images"})

    def input_bytes(self) -> int:
        return len(self.prompt.encode("utf-8"))

    def estimate_tokens(self) -> int:
        return len(self.prompt) // 4 + 1

    def most_output_tokens(self, options: Mapping[str, Any]) -> int | None:
        """gpt-image models report output tokens (priced at 0 in the bundled table: the units carry
        the cost), in proportion to the pixels at high quality: ``n`` images at that rate, the
        size unset or ``auto`` counted as the largest they make (1536x1024: 6,240 tokens)."""
        given = _DIMENSIONS.fullmatch(self.resolved(options)[0])
        pixels = int(given[1]) * int(given[2]) if given else 0
        return self.n * max(MOST_IMAGE_TOKENS, math.ceil(pixels * MOST_IMAGE_TOKENS / _LARGEST_PIXELS))

    def provider_chooses(self, options: Mapping[str, Any]) -> tuple[bool, bool]:
        """Whether the provider chooses the size, and the quality: when asked ``auto``, and the quality
        when nobody gave one (gpt-image-1's default is ``auto``). What it chooses is billed as its
        answer states; anything else must be what was asked (the adapter refuses another)."""
        size, quality = self.resolved(options)
        given = self.quality or (options.get("extra_body") or {}).get("quality")
        return size == "auto", quality == "auto" or not given

    def most_units(self, options: Mapping[str, Any]) -> Mapping[str, float]:
        # What the provider chooses is ``auto`` in the unit: the worst case takes the dearest the
        # price names there (Price.most_units_usd).
        size, quality = self.resolved(options)
        quality = "auto" if self.provider_chooses(options)[1] else quality
        return {image_unit(size, quality): float(self.n)}

    def deterministic(self, options: Mapping[str, Any]) -> bool:
        return False

    def texts(self) -> tuple[str, ...]:
        return (self.prompt,)

    def with_texts(self, texts: Sequence[str]) -> Self:
        """The same request with its prompt replaced (a guard's rewrite: the images are bytes, left alone)."""
        if len(texts) != 1:
            raise ConfigurationError(f"texts: an image request has 1 text (its prompt), got {len(texts)}")
        return attrs.evolve(self, prompt=texts[0])


@attrs.frozen
class ImageEditRequest(ImageRequest):
    """An image (its bytes; ``bytes`` are taken as a PNG) edited by a prompt, where ``mask``'s
    transparent pixels allow it (None: the whole image)."""

    image: ImagePart = attrs.field(kw_only=True, converter=_image)
    mask: ImagePart | None = attrs.field(default=None, kw_only=True, converter=_mask)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "image": _digest(self.image), "mask": _digest(self.mask)}

    def needs(self, *, streaming: bool) -> frozenset[str]:
        return frozenset({"image_edits"})

    def input_bytes(self) -> int:
        # The image and the mask are input tokens on the models that bill tokens (gpt-image-1): each
        # counts at most as the largest image those models make.
        return super().input_bytes() + MOST_IMAGE_TOKENS * (1 + (self.mask is not None))


def _b64(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError("data: expected base64 text") from None


@attrs.frozen(kw_only=True)
class GeneratedImage:
    """One image made: its URL (kept by the provider for a while) or its bytes, and the prompt
    the model drew from when it revised the one given."""

    url: str | None = None
    data: bytes | None = attrs.field(default=None, repr=lambda data: "None" if data is None else f"<{len(data)} bytes>")
    revised_prompt: str | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.url, str | None) or not isinstance(self.data, bytes | None) \
                or (self.url is None) == (self.data is None):
            raise ConfigurationError("a generated image needs exactly one of url (a string) or data (bytes)")

    def to_dict(self) -> dict[str, Any]:
        data = None if self.data is None else base64.b64encode(self.data).decode("ascii")
        return {"url": self.url, "data": data, "revised_prompt": self.revised_prompt}

    @classmethod
    def from_dict(cls, value: object, where: str = "image") -> GeneratedImage:
        data = serde.mapping(value, where)
        encoded = serde.get(data, "data", str, where, default=None)
        return cls(url=serde.get(data, "url", str, where, default=None),
                   data=None if encoded is None else _b64(encoded),
                   revised_prompt=serde.get(data, "revised_prompt", str, where, default=None))


def _images(value: Iterable[GeneratedImage]) -> tuple[GeneratedImage, ...]:
    images = tuple(value)
    if not all(isinstance(image, GeneratedImage) for image in images):
        raise ConfigurationError("images must be GeneratedImages")
    return images


@attrs.frozen(kw_only=True)
class ImageResponse(ProviderResponse):
    """The images made, in the provider's order; ``usage.units`` counts them by size and quality."""

    TYPE = "image"

    images: tuple[GeneratedImage, ...] = attrs.field(default=(), converter=_images)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "images": [image.to_dict() for image in self.images]}

    @classmethod
    def _fields_from(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        rows = serde.get(data, "images", list, cls.TYPE)
        images = tuple(GeneratedImage.from_dict(row, f"image.images[{i}]") for i, row in enumerate(rows))
        return {**super()._fields_from(data), "images": images}
