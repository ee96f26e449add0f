"""Every attribute and metric name the plugin emits is a constant of opentelemetry-semantic-conventions
(GenAI, server and error, incubating ones included) or provmw's own (``provmw.``): a rename
upstream fails here."""

from __future__ import annotations

from types import ModuleType

import pytest
from opentelemetry.semconv._incubating.attributes import error_attributes as error_incubating
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes, openai_attributes
from opentelemetry.semconv._incubating.attributes import server_attributes as server_incubating
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes, server_attributes
from otel_harness import SCENARIOS, Recorded, fake_provider, recording, run  # noqa: F401  (a fixture)
from provmw_otel.attributes import call_attributes
from provmw_otel.options import OtelOptions

from provmw.config import ProviderConfig
from provmw.context import ProviderOperation
from provmw.testing import FakeProvider, call_context

MODULES = (gen_ai_attributes, openai_attributes, server_attributes, server_incubating, error_attributes,
           error_incubating)


def constants(*modules: ModuleType) -> set[str]:
    return {v for m in modules for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}


def emitted_names(rec: Recorded) -> set[str]:
    names = {k for s in rec.finished() for k in (s.attributes or {})}
    names |= {k for s in rec.finished() for e in s.events for k in (e.attributes or {})}
    data = rec.metrics.get_metrics_data()
    points = [p for r in (data.resource_metrics if data else []) for sm in r.scope_metrics for m in sm.metrics
              for p in m.data.data_points]
    return names | {k for p in points for k in (p.attributes or {})}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_every_attribute_name_is_a_convention_or_provmw_own(fake: FakeProvider, scenario: str) -> None:
    with recording() as rec:
        await run(scenario, fake, rec.telemetry, OtelOptions(capture_content=True))
        names = emitted_names(rec)
    unknown = {n for n in names if not n.startswith("provmw.")} - constants(*MODULES)
    assert names and unknown == set()


async def test_both_histograms_are_named_by_the_conventions(fake: FakeProvider) -> None:
    with recording() as rec:
        await run("plain", fake, rec.telemetry)
        data = rec.metrics.get_metrics_data()
    assert data is not None
    names = {m.name for r in data.resource_metrics for sm in r.scope_metrics for m in sm.metrics}
    assert names == {gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION, gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE}


@pytest.mark.parametrize("operation", list(ProviderOperation), ids=lambda op: op.value)
def test_every_operation_has_an_operation_name(operation: ProviderOperation) -> None:
    config = ProviderConfig(identifier="c", provider="openai", model="m")
    names = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GenAiOperationNameValues")}
    name = call_attributes(call_context(operation), config)[gen_ai_attributes.GEN_AI_OPERATION_NAME]
    assert isinstance(name, str) and name
    if operation.value in ("chat", "completion", "embedding"):
        assert name in {m.value for m in gen_ai_attributes.GenAiOperationNameValues} | names
