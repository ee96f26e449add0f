"""A generated corpus of every kind of personal data the guard redacts (e-mail, phone, card, IBAN,
IPv4 and IPv6 addresses), each value in prose, in a JSON document and in tool-call arguments; and of
every kind of secret it blocks (provider keys, cloud and code-host tokens, JWTs, private keys,
bearer tokens).

Every value is drawn distinctive: a random local part, at least nine digits, no loopback or
unspecified address. Finding one in a store, a log line or a span can then only mean it leaked,
never that the same text was there for another reason (the fake's port, a float of a vector).

Below the corpus, where its values are looked for: each sink's contents read as texts (the fake
provider's requests, every key of a Redis prefix, every row of a SQLite file and its bytes, log
records, spans, metrics), and ``found_raw``, which names the values a sink holds.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import redis
from hypothesis import assume
from hypothesis import strategies as st
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from provmw_guard.iban import IBAN_LENGTHS, mod97

from provmw.testing import FakeProvider

__all__ = ["CARD_BRANDS", "KINDS", "SECRETS", "Case", "Value", "as_text", "case_of", "cases", "file_texts",
           "found_raw", "log_texts", "luhn_digit", "metric_texts", "needles", "redis_texts", "requests_sent",
           "secrets", "span_texts", "sqlite_rows_texts", "twins", "values"]

KINDS = ("email", "phone", "card", "iban", "ip4", "ip6")
DIGITS, LOWER, UPPER = "0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
WORDS = ("the", "order", "for", "Ada", "is", "ready", "see", "note", "mail", "call", "pay", "from")
# What a value stands between in prose: a word boundary the guard must see as one.
AROUND = ((" ", " "), ("(", ")"), (" ", ". "), ('"', '"'), (" ", ", "), ("\n", "\n"), (" <", "> "))


@attrs.frozen
class Value:
    """One piece of personal data: its kind (one of ``KINDS``) and its text as the caller wrote it."""

    kind: str
    text: str


@attrs.frozen
class Case:
    """One example: its values and the texts a call sends that hold them, each holding every value."""

    values: tuple[Value, ...]
    prose: str  # words and punctuation around each value
    document: str  # a JSON object of every value (a card's digits also as a JSON number)
    lines: tuple[str, ...]  # one short line per value: what the fake's tool is asked, one call a line
    arguments: str  # a tool call's JSON arguments in the history: every value, a card's digits as a number

    @property
    def raw(self) -> frozenset[str]:
        """Every form a value may take where it must not be (``needles``)."""
        return frozenset(needle for value in self.values for needle in needles(value))


def needles(value: Value) -> set[str]:
    """What of ``value`` must not be found: its text, and a card's bare digits, a bearer token without
    its scheme, a private key's body without its armour."""
    found = {value.text}
    if value.kind == "card":
        found.add(_digits(value))
    elif value.kind == "secret:bearer_token":
        found.add(value.text.split()[-1])
    elif value.kind == "secret:private_key":
        found.add(value.text.splitlines()[1])
    return found


def _digits(value: Value) -> str:
    return "".join(c for c in value.text if c.isdigit())


def luhn_digit(body: str) -> str:
    """The check digit that makes ``body`` + it pass the Luhn check payment cards carry."""
    total = 0
    for i, c in enumerate(reversed(body)):
        d = int(c) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return str(-total % 10)


# Strategies are made once, here: a strategy made inside a composite is made again on every draw, and
# making one costs more than drawing from it.
_DIGIT_RUNS = {n: st.text(DIGITS, min_size=n, max_size=n) for n in range(1, 20)}
_LOCAL = st.tuples(st.sampled_from(LOWER), st.text(LOWER + DIGITS, min_size=5, max_size=9),
                   st.sampled_from(["", ".x", "+tag", "_y", "-z"])).map("".join)
_DOMAIN = st.tuples(st.lists(st.text(LOWER, min_size=3, max_size=8), min_size=1, max_size=2),
                    st.text(LOWER, min_size=2, max_size=6)).map(lambda d: ".".join([*d[0], d[1]]))
_COUNTRY_CODE = st.tuples(st.sampled_from("123456789"), st.text(DIGITS, max_size=1)).map("".join)
_GROUPS = st.lists(st.text(DIGITS, min_size=3, max_size=4), min_size=3, max_size=3)
_PHONE_FORMS = st.sampled_from(["international", "compact", "national"])
_SEPARATORS = st.sampled_from(["", " ", "-"])
_COUNTRIES = st.sampled_from(sorted(IBAN_LENGTHS))
_BBANS = {n - 4: st.text(DIGITS + UPPER, min_size=n - 4, max_size=n - 4) for n in set(IBAN_LENGTHS.values())}
_OCTETS = st.tuples(st.integers(11, 223).filter(lambda n: n != 127), *[st.integers(10, 254)] * 3)
_HEXTETS = st.lists(st.integers(0x100, 0xFFFF), min_size=8, max_size=8)
_ZEROS = st.lists(st.integers(1, 7), max_size=3, unique=True)  # hextets set to zero: what compresses
_FORMS = st.integers(0, 2)


@st.composite
def emails(draw: st.DrawFn) -> str:
    return f"{draw(_LOCAL)}@{draw(_DOMAIN)}"


@st.composite
def phones(draw: st.DrawFn) -> str:
    form = draw(_PHONE_FORMS)
    if form == "national":
        return f"(0{draw(_DIGIT_RUNS[2])}) {draw(_DIGIT_RUNS[4])} {draw(_DIGIT_RUNS[4])}"
    country, groups = draw(_COUNTRY_CODE), draw(_GROUPS)
    if form == "compact":
        return f"+{country}{''.join(groups)}"
    return f"+{country} " + ("-" if draw(st.booleans()) else " ").join(groups)


# A brand's first digits, its length and how its number is grouped when written.
CARD_BRANDS = (("4", 16, (4, 4, 4, 4)), *((f"5{d}", 16, (4, 4, 4, 4)) for d in "12345"),
               ("34", 15, (4, 6, 5)), ("37", 15, (4, 6, 5)))
_BRANDS = st.sampled_from(CARD_BRANDS)


@st.composite
def cards(draw: st.DrawFn) -> str:
    prefix, length, groups = draw(_BRANDS)
    body = prefix + draw(_DIGIT_RUNS[length - len(prefix) - 1])
    number = body + luhn_digit(body)
    cuts = list(itertools.accumulate(groups, initial=0))
    return draw(_SEPARATORS).join(number[a:b] for a, b in itertools.pairwise(cuts))


@st.composite
def ibans(draw: st.DrawFn) -> str:
    country = draw(_COUNTRIES)
    bban = draw(_BBANS[IBAN_LENGTHS[country] - 4])
    check = next(f"{n:02d}" for n in range(2, 99) if mod97(f"{country}{n:02d}{bban}"))
    compact = f"{country}{check}{bban}"
    return " ".join(compact[i:i + 4] for i in range(0, len(compact), 4)) if draw(st.booleans()) else compact


@st.composite
def ip4s(draw: st.DrawFn) -> str:
    return ".".join(map(str, draw(_OCTETS)))


@st.composite
def ip6s(draw: st.DrawFn) -> str:
    groups = draw(_HEXTETS)
    for at in draw(_ZEROS):
        groups[at] = 0
    address = ipaddress.IPv6Address(int("".join(f"{g:04x}" for g in groups), 16))
    return [str(address), address.exploded, str(address).upper()][draw(_FORMS)]


def _token(alphabet: str, low: int, high: int) -> st.SearchStrategy[str]:
    """Random characters ending in a digit: a provider key with none is taken for a hyphenated phrase."""
    return st.builds(lambda text, digit: text + digit, st.text(alphabet, min_size=low, max_size=high),
                     st.sampled_from(DIGITS))


_KEY, _ALNUM = LOWER + UPPER + DIGITS + "_-", LOWER + UPPER + DIGITS
SECRETS: dict[str, st.SearchStrategy[str]] = {
    "anthropic_key": _token(_KEY, 24, 40).map("sk-ant-api03-".__add__),
    "openai_key": _token(_KEY, 24, 40).map("sk-proj-".__add__),
    "aws_access_key_id": st.text(UPPER + DIGITS, min_size=16, max_size=16).map("AKIA".__add__),
    "google_api_key": st.text(_KEY, min_size=35, max_size=35).map("AIza".__add__),
    "github_token": st.text(_ALNUM, min_size=36, max_size=40).map("ghp_".__add__),
    "slack_token": _token(_ALNUM + "-", 12, 30).map("xoxb-".__add__),
    "jwt": st.tuples(*[st.text(_ALNUM, min_size=12, max_size=20)] * 3).map(lambda p: f"eyJ{p[0]}.eyJ{p[1]}.{p[2]}"),
    "private_key": st.text(_ALNUM + "+/", min_size=40, max_size=64).map(
        lambda body: f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"),
    "bearer_token": st.text(_ALNUM + "._~+/-", min_size=20, max_size=40).map("Bearer ".__add__),
}
_SECRET = st.one_of([st.builds(Value, st.just(f"secret:{rule}"), made) for rule, made in SECRETS.items()])


def secrets() -> st.SearchStrategy[Value]:
    """A secret the guard blocks, of kind ``secret:<its rule>``."""
    return _SECRET


_STRATEGIES = {"email": emails(), "phone": phones(), "card": cards(), "iban": ibans(), "ip4": ip4s(), "ip6": ip6s()}


def values(kinds: Iterable[str] = KINDS) -> st.SearchStrategy[Value]:
    """A value of one of ``kinds``."""
    return st.one_of([st.builds(Value, st.just(kind), _STRATEGIES[kind]) for kind in kinds])


_WORDS = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
_AROUND = st.sampled_from(AROUND)
# One to six values, or up to five after a first one drawn apart.
_VALUES = {False: st.lists(values(), min_size=1, max_size=6), True: st.lists(values(), max_size=5)}
_KINDS = st.lists(st.sampled_from(KINDS), min_size=1, max_size=6)


@st.composite
def cases(draw: st.DrawFn, first: st.SearchStrategy[Value] | None = None) -> Case:
    """An example of one to six values (every kind appears across a corpus) in each form a call sends;
    ``first``, when given, draws the first of them (a secret, say)."""
    chosen = [draw(first)] if first is not None else []
    chosen += draw(_VALUES[first is not None])
    return case_of(chosen, [draw(_WORDS) for _ in chosen], [draw(_AROUND) for _ in chosen])


@st.composite
def twins(draw: st.DrawFn) -> tuple[Case, Case]:
    """Two cases with the same words around values of the same kinds, every value different: once
    redacted, the two are one text (one cache entry)."""
    kinds = draw(_KINDS)
    words, around = [draw(_WORDS) for _ in kinds], [draw(_AROUND) for _ in kinds]
    pair = [[Value(kind, draw(_STRATEGIES[kind])) for kind in kinds] for _ in range(2)]
    texts = [value.text for values in pair for value in values]
    assume(len(set(texts)) == len(texts))
    return case_of(pair[0], words, around), case_of(pair[1], words, around)


def case_of(chosen: Sequence[Value], words: Sequence[str] | None = None,
            around: Sequence[tuple[str, str]] | None = None) -> Case:
    """The case of ``chosen`` values, each after its ``words`` and between its ``around`` in prose."""
    words = words or ["see"] * len(chosen)
    around = around or [(" ", " ")] * len(chosen)
    pieces = [piece for v, w, (before, after) in zip(chosen, words, around, strict=True)
              for piece in (w, before, v.text, after)]
    lines = tuple(f"{w} {v.text}" for v, w in zip(chosen, words, strict=True))
    return Case(tuple(chosen), "".join(pieces).strip(), _document(chosen), lines, _arguments(chosen))


def _document(chosen: Sequence[Value]) -> str:
    fields: dict[str, object] = {f"{v.kind}_{i}": v.text for i, v in enumerate(chosen)}
    fields.update({f"card_{i}_digits": int(_digits(v)) for i, v in enumerate(chosen) if v.kind == "card"})
    return json.dumps({"customer": fields, "note": "as given"})


def _arguments(chosen: Sequence[Value]) -> str:
    fields: dict[str, object] = {f"field_{i}": v.text for i, v in enumerate(chosen)}
    fields.update({f"number_{i}": int(_digits(v)) for i, v in enumerate(chosen) if v.kind == "card"})
    return json.dumps(fields)


def requests_sent(fake: FakeProvider) -> list[str]:
    """Every request the fake received: route, model, body and headers."""
    return [json.dumps([r.route, r.model, r.body, dict(r.headers)]) for r in fake.received]


def redis_texts(client: redis.Redis, prefix: str) -> list[str]:
    """Every key under ``prefix`` and everything it holds, whatever its type."""
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    with client.pipeline(transaction=False) as types:
        for key in keys:
            types.type(key)
        kinds = [kind.decode() for kind in types.execute()]
    with client.pipeline(transaction=False) as reads:
        read: dict[str, Callable[[bytes], object]] = {
            "string": reads.get, "hash": reads.hgetall, "list": lambda k: reads.lrange(k, 0, -1),
            "set": reads.smembers, "zset": lambda k: reads.zrange(k, 0, -1, withscores=True), "stream": reads.xrange}
        for key, kind in zip(keys, kinds, strict=True):
            if kind in read:  # not "none": a key that expired since the scan
                read[kind](key)
        return [as_text(keys), *map(as_text, reads.execute())]


def as_text(value: Any) -> str:
    """Bytes anywhere in ``value`` decoded, the whole as one text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Mapping):
        return " ".join(f"{as_text(k)} {as_text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return " ".join(as_text(v) for v in value)
    return str(value)


def sqlite_rows_texts(path: Path) -> list[str]:
    """Every column of every row of every table of the SQLite file."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        tables = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [as_text(row) for table in tables for row in connection.execute(f'SELECT * FROM "{table}"')]


def file_texts(path: Path) -> list[str]:
    """The bytes of a SQLite file and of its companions (write-ahead log, spill file): what a deleted row leaves."""
    return [as_text(f.read_bytes()) for f in path.parent.iterdir() if f.name.startswith(path.name)]


def log_texts(log: pytest.LogCaptureFixture) -> list[str]:
    """Each record as the handler formats it (with any traceback), and its message and arguments apart."""
    return [log.text, *(f"{r.getMessage()} {r.args!r}" for r in log.records)]


def span_texts(spans: InMemorySpanExporter) -> list[str]:
    """Each span as the SDK serializes it: name, attributes, events and theirs, status, links, resource."""
    return [span.to_json() for span in spans.get_finished_spans()]


def metric_texts(metrics: InMemoryMetricReader) -> list[str]:
    """The attributes of every data point of every metric."""
    data = metrics.get_metrics_data()
    return [] if data is None else [repr(dict(point.attributes or {})) for resource in data.resource_metrics
                                    for scope in resource.scope_metrics for metric in scope.metrics
                                    for point in metric.data.data_points]


def found_raw(raw: Iterable[str], sinks: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """The raw values each sink holds (in any case), for the sinks that hold any."""
    found = {}
    for sink, texts in sinks.items():
        held = "\n".join(texts).casefold()
        if leaked := sorted(value for value in raw if value.casefold() in held):
            found[sink] = leaked
    return found
