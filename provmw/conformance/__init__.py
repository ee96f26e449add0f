"""The provider adapter conformance suite: pytest tests an adapter inherits.

Subclass ``AdapterConformance`` in a test module (its name must start with ``Test``), set
``adapter`` and ``usage_with_cache``, and implement ``config(fake, **fields)`` to point at
the ``FakeProvider`` wire the adapter speaks; pytest-asyncio (``asyncio_mode = "auto"``)
runs the tests::

    class TestAcmeAdapter(AdapterConformance):
        adapter = AcmeAdapter()
        usage_with_cache = ({"in": 10, "cached": 4, "out": 2},
                            Usage(input_tokens=10, cached_input_tokens=4, output_tokens=2))
        status_errors = {**AdapterConformance.status_errors, 529: ProviderUnavailableError}

        def config(self, fake, **fields):
            return ProviderConfig(identifier="acme", provider="acme", model="m",
                                  base_url=fake.openai_base_url, **fields)

What runs follows the adapter's ``capabilities``: an operation it does not offer must
raise ``UnsupportedOperationError`` before any request; one it offers must work. Images
follow ``vision_url`` and ``vision_bytes``: an adapter taking inline bytes only passes the
tests of bytes and must refuse an image by URL, before any request. The expectations are
data a subclass extends with what its provider documents: ``status_errors`` and
``coded_errors`` (the error table onto the tree), ``quota_faults`` (a 429 with and without
an exhausted quota), ``stream_error`` (an in-band error event), ``retry_hints`` (the
Retry-After header and the wire's own hints), ``usage_with_cache`` (a raw usage body of
the wire, cache counts included, and the ``Usage`` it means), ``owned_extra_body`` (an
``extra_body`` each that names a field the call was priced on, e.g. the wire's own name
for the output bound) and ``image_url`` (an image URL the provider takes).

The operations beyond chat (Responses, images, image edits, transcription, speech, rerank,
moderation) follow their capabilities too (``provmw.conformance.operations``): each is called
on ``operation_config(fake, operation)`` (``config(fake)`` with the model of
``operation_models``), its faults go to the fake's route named in ``operation_routes``, and
``operation_mistyped`` and ``owned_operation_body`` are its tables of a mistyped answer and of
``extra_body`` fields it was priced on. An adapter without chat (rerank only) passes the
operations' cases and a refusal of chat; the chat cases stand aside for it.

What reaches the wire is read from the fake's record of each request, in a way that holds
for every wire: the options' values, the system prompt and the images are somewhere in the
body; ``extra_body`` leaves every field the adapter writes as it was. Streams must survive
their events split across reads and raise when they end, however cleanly, before their
documented end. Answers with a wrongly typed field are ``MalformedResponseError``.

``expected_failures`` maps a test's name to the reason it is known to fail: the function's
name (every case of it) or one case's (``"test_x[model-chat]"``); each is marked
``xfail(strict=True)``, so it must fail until the reason goes. Import it as
``provmw.testing.AdapterConformance``.
"""

from __future__ import annotations

from provmw.conformance.base import ConformanceBase
from provmw.conformance.chat import AnswerTests
from provmw.conformance.errors import SENTINEL_KEY, ErrorTests
from provmw.conformance.operations import OperationTests
from provmw.conformance.streams import StreamTests
from provmw.conformance.wire import WireTests

__all__ = ["SENTINEL_KEY", "AdapterConformance", "ConformanceBase"]


class AdapterConformance(AnswerTests, StreamTests, WireTests, ErrorTests, OperationTests):
    """Subclass in your adapter's tests, set ``adapter`` and ``usage_with_cache``, implement ``config(fake)``."""
