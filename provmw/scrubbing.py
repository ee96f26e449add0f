"""The one place that knows what a credential looks like inside a URL or a provider's text.

``masked_url`` is what every display of a URL uses (configuration reprs, settings errors,
``provmw stack``). ``Scrubber`` removes the credentials a request carried from whatever a
provider sent back, before an error leaves the manager (ADR 0014, amended by ADR 0018), and
from the fields that name an answer (ADR 0042).
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import SplitResult, quote, quote_plus, unquote_plus, urlsplit

import attrs

if TYPE_CHECKING:
    from provmw.config import ProviderConfig
    from provmw.responses import ChatChunk, ProviderResponse

__all__ = ["CUT", "MASK", "Scrubber", "is_key_like", "masked_url", "url_secrets"]

MASK = "***"
# Where provmw cut a provider's text short and went on writing (a hint after a quoted body): a
# secret's beginning right before it is masked, as one at the very end of a text is.
CUT = "\u2026"
# A query parameter whose name contains one of these carries a credential (case-insensitive):
# key, api_key, x-goog-api-key, token, access_token, sig, signature, password, client_secret...
_KEY_LIKE = re.compile(r"key|token|sig|pass|pwd|secret|auth|credential", re.IGNORECASE)
_PARAM = re.compile(r"(^|[&;])([^=&;]*)=([^&;]*)")
# Shorter values cannot be told apart from ordinary words; replacing them would garble the text.
_MIN_SECRET_CHARS = 4
# A cut-off snippet may end with the first characters of a secret: that many are a leak worth masking.
_MIN_TAIL_CHARS = 6


def is_key_like(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a credential."""
    return _KEY_LIKE.search(name) is not None


def masked_url(url: str) -> str:
    """``url`` with its user part's password (or a lone user, which is then the key) and every
    key-like query value masked, for display; never raises."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a URL that does not parse>"
    query = _PARAM.sub(lambda m: f"{m[1]}{m[2]}={MASK}" if is_key_like(unquote_plus(m[2])) else m[0], parts.query)
    return parts._replace(netloc=_masked_netloc(parts), query=query).geturl()


def _masked_netloc(parts: SplitResult) -> str:
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return parts.netloc
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{MASK}@{host}" if colon else f"{MASK}@{host}"


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The credentials inside ``url``: the user part's password (or lone user), ``user:password``
    (what HTTP Basic encodes), and every key-like query value, as written and decoded."""
    if not url:
        return ()
    try:
        parts = urlsplit(url)
    except ValueError:
        return (url,)
    found: list[str] = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        user, _, password = userinfo.partition(":")
        found += [userinfo, password or user, unquote_plus(password or user)]
    for match in _PARAM.finditer(parts.query):
        if is_key_like(unquote_plus(match[2])):
            found += [match[3], unquote_plus(match[3])]
    return tuple(found)


def _forms(secret: str) -> tuple[str, ...]:
    """The ways a secret comes back: as sent, URL-encoded, and base64 (HTTP Basic, tokens)."""
    raw = secret.encode("utf-8")
    b64 = base64.b64encode(raw).decode("ascii")
    return (secret, quote(secret, safe=""), quote_plus(secret), b64, b64.rstrip("="),
            base64.urlsafe_b64encode(raw).decode("ascii").rstrip("="))


# The strings an answer carries that the provider chose and that leave provmw whatever the
# content settings: the ledger's model column, the call log line, span and metric attributes.
_NAMING_FIELDS = ("model", "response_id", "finish_reason")
A = TypeVar("A", "ProviderResponse", "ChatChunk")


@attrs.frozen
class Scrubber:
    """Replaces known secrets (and their encoded forms) in text and in errors with ``***``.

    An adapter that sends credentials the configuration does not hold (a signature's key id, a
    token it fetched) scrubs its own errors: ``with Scrubber.of(sent):`` around the request,
    inside any code that cuts or re-wraps an error body, so no cut-off secret is left behind.
    """

    forms: tuple[str, ...]

    @classmethod
    def of(cls, secrets: Iterable[str]) -> Scrubber:
        """A scrubber for ``secrets``; values too short to recognise are left out."""
        forms = {form for s in secrets if len(s) >= _MIN_SECRET_CHARS for form in _forms(s)}
        return cls(tuple(sorted((f for f in forms if len(f) >= _MIN_SECRET_CHARS), key=len, reverse=True)))

    @classmethod
    def for_config(cls, config: ProviderConfig) -> Scrubber:
        """Every credential a request made from ``config`` carries: the key, each header value,
        and the credentials inside ``base_url``."""
        key = config.api_key.reveal() if config.api_key else ""
        return _scrubber_of((key, *config.headers.values(), *url_secrets(config.base_url)))

    def text(self, text: str) -> str:
        """``text`` without any secret, including one cut short at its end or before a ``CUT`` mark."""
        if not any(form[:_MIN_TAIL_CHARS] in text for form in self.forms):
            return text  # the usual case, and cheap: every match below begins with one of these
        before = None
        while before != text:  # a replacement can join the pieces of another occurrence
            before = text
            for form in self.forms:
                text = text.replace(form, MASK)
        if CUT in text:  # each piece before a cut mark may end with a cut-off secret, as the text may
            return CUT.join(self._tails(piece) for piece in text.split(CUT))
        return self._tails(text)

    def _tails(self, text: str) -> str:
        for form in self.forms:
            text = _masked_tail(text, form)
        return text

    def answer(self, answer: A) -> A:
        """``answer`` (a response or a streamed chunk) with no secret in the fields that name it
        (model, id, finish reason): a provider may echo a key there, and logs, the ledger and
        traces copy them whatever their content settings."""
        if not self.forms:
            return answer
        changed: dict[str, Any] = {}
        for name in _NAMING_FIELDS:
            value = getattr(answer, name, None)
            if isinstance(value, str) and (clean := self.text(value)) != value:
                changed[name] = clean
        return attrs.evolve(answer, **changed) if changed else answer

    def __enter__(self) -> Scrubber:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        """``with scrubber:`` scrubs whatever error leaves the block, in place, and lets it go on."""
        if exc is not None:
            self.error(exc)

    def error(self, exc: BaseException) -> None:
        """Scrub ``exc`` in place (its arguments and string attributes), and the errors it chains."""
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen and self.forms:
            seen.add(id(current))
            self._one(current)
            current = current.__cause__ or current.__context__

    def _one(self, exc: BaseException) -> None:
        exc.args = tuple(self._value(a) for a in exc.args)
        for name, value in list(vars(exc).items()):
            setattr(exc, name, self._value(value))

    def _value(self, value: Any) -> Any:
        # Text, the raw body an error keeps (bytes), and the headers it keeps (a mapping of text).
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bytes):
            return self.text(value.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        if isinstance(value, Mapping):
            return self._mapping(value)
        return value

    def _mapping(self, value: Mapping[Any, Any]) -> Mapping[Any, Any]:
        items = [(k, self.text(v) if isinstance(v, str) else v) for k, v in value.items()]
        if all(new == old for (_, new), old in zip(items, value.values(), strict=True)):
            return value
        # Of the kind a copy is (headers stay case-insensitive, so a retry hint is still found), else a dict.
        copy = getattr(value, "copy", None)
        kind = type(copy()) if callable(copy) else dict
        try:
            return kind(items)
        except TypeError:
            return dict(items)


# Every answer is scrubbed: a configuration's few secrets are encoded once, not on every call.
@functools.lru_cache(maxsize=256)
def _scrubber_of(secrets: tuple[str, ...]) -> Scrubber:
    return Scrubber.of(secrets)


def _masked_tail(text: str, form: str) -> str:
    # Where text's last len(form) - 1 characters hold the start of ``form`` (the longest first),
    # found with ``find`` rather than one ``endswith`` per length: answers pass here on every call.
    head, at = form[:_MIN_TAIL_CHARS], max(0, len(text) - len(form) + 1)
    while (at := text.find(head, at)) != -1:
        if form.startswith(text[at:]):
            return text[:at] + MASK
        at += 1
    return text
