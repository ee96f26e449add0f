"""A loopback Bedrock that checks AWS SigV4 the way AWS does, with botocore.

It rebuilds the canonical request from what arrived (method, raw path, the headers the
``Authorization`` header says were signed, the body), signs it with the secret it knows
for the access key at the ``X-Amz-Date`` given, and compares. A mismatch, an unknown key
or a scope for another service or region is refused 403 with AWS's error type; a request
that passes gets a Converse (or Rerank) answer from the fake wire.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Mapping

import attrs
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from provmw_bedrock.fake import converse_answer, rerank_answer

from provmw.testing import words

_AUTHORIZATION = re.compile(r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
                            r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
                            r"Signature=(?P<signature>[0-9a-f]{64})")


@attrs.define
class SigV4Server:
    """Serves ``/model/{model}/converse`` and ``/rerank`` to requests signed with one of ``secrets``
    (access key -> secret)."""

    secrets: Mapping[str, str]
    region: str
    seen_keys: list[str] = attrs.Factory(list)
    url: str = ""
    _runner: web.AppRunner | None = None

    async def __aenter__(self) -> SigV4Server:
        app = web.Application()
        app.router.add_post("/model/{model}/converse", self._handle)
        app.router.add_post("/rerank", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        refusal = self._refusal(request, body)
        if refusal is not None:
            kind, message = refusal
            return web.json_response({"message": message}, status=403, headers={"x-amzn-errortype": kind})
        answer = rerank_answer if request.path == "/rerank" else converse_answer
        return web.json_response(answer(json.loads(body), words))

    def _refusal(self, request: web.Request, body: bytes) -> tuple[str, str] | None:
        match = _AUTHORIZATION.fullmatch(request.headers.get("Authorization", ""))
        if match is None:
            return "MissingAuthenticationTokenException", "Missing Authentication Token"
        secret = self.secrets.get(match["key"])
        if secret is None:
            return "UnrecognizedClientException", "The security token included in the request is invalid."
        self.seen_keys.append(match["key"])
        if (match["service"], match["region"]) != ("bedrock", self.region):
            return "InvalidSignatureException", f"Credential should be scoped to {self.region}/bedrock"
        expected = _signature(request, body, match["signed"].split(";"), secret, match["key"], self.region)
        if not hmac.compare_digest(expected, match["signature"]):
            return "InvalidSignatureException", "The request signature we calculated does not match the signature " \
                                                "you provided."
        return None


def _signature(request: web.Request, body: bytes, signed: list[str], secret: str, key: str, region: str) -> str:
    headers = {name: request.headers.get(name, "") for name in signed}
    aws = AWSRequest(method=request.method, url=f"http://{request.host}{request.raw_path}", data=body,
                     headers=headers)
    aws.context["timestamp"] = request.headers.get("X-Amz-Date", "")
    signer = SigV4Auth(Credentials(key, secret, request.headers.get("X-Amz-Security-Token")), "bedrock", region)
    return signer.signature(signer.string_to_sign(aws, signer.canonical_request(aws)), aws)
