"""SigV4: the plugin signs as botocore does, and a server that verifies with botocore accepts it."""

from __future__ import annotations

import datetime
import traceback

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from provmw_bedrock import BedrockAdapter
from provmw_bedrock.signing import sign

from bedrock_tests.conftest import ACCESS_KEY
from bedrock_tests.sigv4_server import SigV4Server
from provmw.config import ProviderConfig
from provmw.errors import AuthenticationError
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.requests import ChatRequest

HELLO = ChatRequest((Message.user("hello world"),))
FIXED_URL = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
FIXED_BODY = b'{"messages":[{"role":"user","content":[{"text":"hello"}]}]}'
FIXED_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
FIXED_TIME = datetime.datetime(2024, 5, 30, 12, 0, 0)
# botocore 1.44's signature of the fixed request: a change here means the signing inputs changed.
FIXED_SIGNATURE = "Signature=56a51929f20be4f1141c649bff95cebd2beb0b7b76e0052fac16efd0ee4adc3a"






def config(server: SigV4Server, model: str = "anthropic.claude-3-haiku-20240307-v1:0") -> ProviderConfig:
    return ProviderConfig(identifier="signed", provider="bedrock", model=model, base_url=server.url)


def test_the_signature_of_a_fixed_request_is_botocores_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *args, **kwargs: FIXED_TIME)
    credentials = ReadOnlyCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None)
    ours = sign(credentials, "us-east-1", FIXED_URL, FIXED_BODY, FIXED_HEADERS)
    theirs = AWSRequest(method="POST", url=FIXED_URL, data=FIXED_BODY, headers=dict(FIXED_HEADERS))
    botocore.auth.SigV4Auth(Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), "bedrock",
                            "us-east-1").add_auth(theirs)
    assert ours["Authorization"] == theirs.headers["Authorization"]
    assert ours["X-Amz-Date"] == "20240530T120000Z"
    assert ours["Authorization"].endswith(FIXED_SIGNATURE)


async def test_a_signed_request_is_accepted_by_a_verifying_server(server: SigV4Server, http: HttpClient) -> None:
    response = await BedrockAdapter().chat(http, config(server), HELLO)
    assert response.text == "echo: hello world"
    assert server.seen_keys == [ACCESS_KEY]


async def test_a_model_arn_is_signed_as_it_is_sent(server: SigV4Server, http: HttpClient) -> None:
    arn = "arn:aws:bedrock:eu-west-3:123456789012:inference-profile/eu.anthropic.claude-3-haiku-20240307-v1:0"
    response = await BedrockAdapter().chat(http, config(server, arn), HELLO)
    assert response.text == "echo: hello world"


async def test_a_wrong_secret_key_is_refused_403_without_showing_it(
        server: SigV4Server, http: HttpClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a-wrong-secret-of-the-test")
    with pytest.raises(AuthenticationError) as caught:
        await BedrockAdapter().chat(http, config(server), HELLO)
    assert (caught.value.status, caught.value.code) == (403, "InvalidSignatureException")
    assert "a-wrong-secret-of-the-test" not in "".join(traceback.format_exception(caught.value))


async def test_a_session_token_is_sent_and_signed(
        server: SigV4Server, http: HttpClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SESSION_TOKEN", "a-session-token")
    response = await BedrockAdapter().chat(http, config(server), HELLO)
    assert response.text == "echo: hello world"
