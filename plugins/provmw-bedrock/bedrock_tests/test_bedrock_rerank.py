"""Rerank on Bedrock: Agent Runtime's /rerank, signed as Converse is, its answer bounded, billed
a search unit per 100 documents, and priced into the ledger through the whole stack."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from provmw_bedrock import BedrockAdapter
from provmw_bedrock.rerank import model_arn, rerank_results, rerank_url
from provmw_bedrock.signing import region_in

from bedrock_tests.conftest import ACCESS_KEY, REGION
from bedrock_tests.sigv4_server import SigV4Server
from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, InvalidDataError, InvalidRequestError, ProviderUnavailableError
from provmw.http import HttpClient
from provmw.manager import ServiceManager
from provmw.operations.rerank import RerankRequest
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings
from provmw.stores.usage import SqliteUsageStore
from provmw.testing import FakeProvider, Fault

MODEL = "cohere.rerank-v3-5:0"
APPLES = RerankRequest(query="red apple", documents=("apple pie", "green pear", "a red apple"), top_n=2)


def config(base_url: str | None = None, model: str = MODEL, **fields: Any) -> ProviderConfig:
    return ProviderConfig(identifier="rank", provider="bedrock", model=model, base_url=base_url, **fields)


def test_a_bedrock_runtime_base_url_reranks_on_its_regions_agent_runtime() -> None:
    url = rerank_url(config("https://bedrock-runtime-fips.us-east-1.amazonaws.com/"), "us-east-1")
    assert url == "https://bedrock-agent-runtime-fips.us-east-1.amazonaws.com/rerank"


def test_without_base_url_rerank_goes_to_the_regions_agent_runtime() -> None:
    assert rerank_url(config(), "eu-west-3") == "https://bedrock-agent-runtime.eu-west-3.amazonaws.com/rerank"
    assert rerank_url(config(), "cn-north-1") == "https://bedrock-agent-runtime.cn-north-1.amazonaws.com.cn/rerank"


def test_a_bedrock_runtime_vpc_endpoint_is_refused_naming_the_agent_runtime() -> None:
    vpce = config("https://vpce-0abc.bedrock-runtime.us-east-1.vpce.amazonaws.com")
    with pytest.raises(ConfigurationError, match="Agent Runtime"):
        rerank_url(vpce, "us-east-1")


def test_an_agent_runtime_endpoint_names_its_region() -> None:
    assert region_in("https://bedrock-agent-runtime.ap-southeast-2.amazonaws.com") == "ap-southeast-2"


def test_the_model_is_named_by_its_regions_foundation_model_arn() -> None:
    assert model_arn(config(), "eu-west-3") == f"arn:aws:bedrock:eu-west-3::foundation-model/{MODEL}"
    assert model_arn(config(), "us-gov-west-1").startswith("arn:aws-us-gov:bedrock:us-gov-west-1::")
    arn = "arn:aws:bedrock:us-west-2::foundation-model/amazon.rerank-v1:0"
    assert model_arn(config(model=arn), "") == arn


def test_a_model_id_without_a_region_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="needs a region"):
        model_arn(config(), "")


@pytest.mark.parametrize("rows", [
    [{"index": 3, "relevanceScore": 0.5}],  # outside the three documents
    [{"index": -1, "relevanceScore": 0.5}],
    [{"index": 0, "relevanceScore": 0.5}, {"index": 0, "relevanceScore": 0.4}],  # twice
    [{"index": 0, "relevanceScore": "high"}],
    [{"index": 0, "relevanceScore": float("nan")}],
    [{"index": i, "relevanceScore": 0.1} for i in range(3)],  # three for top_n=2
])
def test_an_unbounded_answer_is_refused(rows: list[dict[str, Any]]) -> None:
    with pytest.raises((InvalidDataError, ConfigurationError)):
        rerank_results({"results": rows}, APPLES)


def test_an_answer_with_a_next_page_keeps_its_first(caplog: pytest.LogCaptureFixture) -> None:
    answer = {"results": [{"index": 2, "relevanceScore": 0.9}], "nextToken": "page-2"}
    assert [r.index for r in rerank_results(answer, APPLES)] == [2]
    assert "next page" in caplog.text


async def test_a_rerank_is_sent_signed_to_slash_rerank_with_its_arn(fake: FakeProvider, http: HttpClient) -> None:
    response = await BedrockAdapter().rerank(http, config(fake.url), APPLES)
    sent = fake.received[-1]
    assert (sent.route, sent.model, response.indexes) == ("bedrock_rerank", MODEL, (2, 0))
    assert f"Credential={ACCESS_KEY}/" in sent.headers["Authorization"]
    ranking = sent.body["rerankingConfiguration"]["bedrockRerankingConfiguration"]
    assert ranking == {"numberOfResults": 2,
                       "modelConfiguration": {"modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/{MODEL}"}}


async def test_a_server_verifying_sigv4_accepts_the_rerank(server: SigV4Server, http: HttpClient) -> None:
    response = await BedrockAdapter().rerank(http, config(server.url), APPLES)
    assert response.indexes == (2, 0) and server.seen_keys == [ACCESS_KEY]


async def test_each_100_documents_are_a_search_unit(fake: FakeProvider, http: HttpClient) -> None:
    request = RerankRequest(query="apple", documents=[f"doc {i}" for i in range(250)], top_n=5)
    response = await BedrockAdapter().rerank(http, config(fake.url), request)
    assert dict(response.usage.units) == {"search_unit": 3} and len(response.results) == 5


async def test_more_documents_than_bedrock_takes_are_refused_before_sending(
        fake: FakeProvider, http: HttpClient) -> None:
    request = RerankRequest(query="apple", documents=["doc"] * 1001)
    with pytest.raises(InvalidRequestError, match="at most 1000"):
        await BedrockAdapter().rerank(http, config(fake.url), request)
    assert fake.count() == 0


async def test_a_dependency_failure_is_provider_unavailable(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=424, code="DependencyFailedException"), route="bedrock_rerank")
    with pytest.raises(ProviderUnavailableError) as caught:
        await BedrockAdapter().rerank(http, config(fake.url), APPLES)
    assert caught.value.status == 424


async def test_a_rerank_through_the_manager_is_in_the_ledger_with_its_cost(
        fake: FakeProvider, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    document = {"middleware": {"usage": {"path": str(ledger)}}, "configurations": {"rank": {
        "provider": "bedrock", "model": MODEL, "base_url": fake.url,
        "price": {"input_usd_per_mtok": 0.0, "units": {"search_unit": 0.001}}}}}
    settings = parse_settings(document, "provmw.toml", {})
    async with ServiceManager(settings, host=PluginHost(PluginPolicy(), environ={})) as manager:
        response = await manager.rerank("red apple", ["a red apple", "pear"] * 60, configuration="rank", top_n=3)
    store = SqliteUsageStore(ledger)
    try:
        [row] = await store.records()
    finally:
        await store.aclose()
    assert (row.provider, row.model, response.indexes) == ("bedrock", MODEL, (0, 2, 4))
    assert row.cost_usd is not None and math.isclose(row.cost_usd, 0.002)
