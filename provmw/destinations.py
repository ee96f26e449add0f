"""The destination policy: where a call's own ``base_url`` may take an API key (ADR 0018).

Named configurations, written by whoever runs the application, are trusted as written. A
call that brings its own ``base_url`` (an ``ad-hoc:`` configuration) is checked before
anything is sent, after DNS resolution, and every address the name resolves to must pass::

    [security]
    ad_hoc_destinations = ["public"]                           # the default
    ad_hoc_destinations = ["public", "private", "loopback"]    # a gateway on the LAN, a local server

Link-local and cloud metadata addresses (169.254.169.254, fd00:ec2::254, 100.100.100.200,
``metadata.google.internal``), with or without an IPv6 zone id, are never reachable ad hoc; a
named configuration can still name them. Ad-hoc calls go through an HTTP client of their own
whose resolver is the checking one, so a connection only ever opens to an address that passed
(no DNS rebinding between the check and the connect); IP literals never reach a resolver and
are checked by value.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import attrs

from provmw._transport.reads import ReadLimits
from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, DestinationRefusedError
from provmw.http import HttpClient
from provmw.options import did_you_mean

if TYPE_CHECKING:
    from aiohttp.abc import AbstractResolver as _Resolver
    from aiohttp.abc import ResolveResult
else:  # aiohttp's connector only calls resolve and close: no need to import it (90 ms) to subclass
    _Resolver = object

__all__ = [
    "ALLOWABLE_KINDS",
    "CheckingResolver",
    "DestinationGuard",
    "DestinationPolicy",
    "Kind",
    "address_kind",
]

Kind = Literal["public", "private", "loopback", "link_local", "metadata", "reserved"]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# What ``ad_hoc_destinations`` may list; link-local, metadata and reserved are never allowed ad hoc.
ALLOWABLE_KINDS: tuple[Kind, ...] = ("public", "private", "loopback")
_METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
_METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200"))
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # 0.0.0.0 reaches the local host on Linux
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NUMERIC = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


def _embedded_v4(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4), else ``address`` without its scope."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.scope_id is not None:
        # A zone id (``%eth0``, ``%251`` in a URL) names an interface, not another address;
        # ipaddress counts it in equality, so fd00:ec2::254%1 would not be the metadata address.
        address = ipaddress.IPv6Address(address.packed)
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return address.sixtofour or address


def address_kind(address: IPAddress) -> Kind:
    """The class of ``address`` the policy decides on."""
    address = _embedded_v4(address)
    if address in _METADATA_ADDRESSES:
        return "metadata"
    if address.is_link_local:
        return "link_local"
    if address.is_loopback or address.is_unspecified or address in _THIS_NETWORK:
        return "loopback"
    if address.is_multicast or address.is_reserved:
        return "reserved"
    return "public" if address.is_global else "private"


def _kinds(value: Collection[str]) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Collection):
        raise ConfigurationError(f"ad_hoc_destinations must be a list of {', '.join(ALLOWABLE_KINDS)}, "
                                 f"got {value!r}")
    for kind in value:
        if kind not in ALLOWABLE_KINDS:
            raise ConfigurationError(
                f"ad_hoc_destinations: {kind!r} is not one of {', '.join(ALLOWABLE_KINDS)}"
                f"{did_you_mean(str(kind), ALLOWABLE_KINDS)} (link-local and metadata addresses are "
                "never reachable ad hoc: name them in a configuration)")
    return frozenset(value)


@attrs.frozen
class DestinationPolicy:
    """Which classes of address an ad-hoc ``base_url`` may reach (the ``[security]`` section)."""

    ad_hoc_destinations: frozenset[str] = attrs.field(default=frozenset({"public"}), converter=_kinds)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], source: str) -> DestinationPolicy:
        """The policy of a ``[security]`` table."""
        for key in table:
            if key != "ad_hoc_destinations":
                raise ConfigurationError(f"{source}: [security]: unknown key {key!r}"
                                         f"{did_you_mean(key, ['ad_hoc_destinations'])}")
        try:
            return cls(table.get("ad_hoc_destinations", ("public",)))
        except ConfigurationError as exc:
            raise ConfigurationError(f"{source}: [security] {exc}") from None

    def check_name(self, host: str) -> None:
        """Refuse a metadata host name before it is even resolved."""
        if host.lower().rstrip(".") in _METADATA_HOSTS:
            raise DestinationRefusedError(host, host, "metadata", self._hint("metadata"))

    def check(self, host: str, address: str) -> None:
        """Raise ``DestinationRefusedError`` unless ``host``'s ``address`` is of an allowed class."""
        kind = address_kind(ipaddress.ip_address(address))
        if kind not in self.ad_hoc_destinations:
            raise DestinationRefusedError(host, address, kind, self._hint(kind))

    @staticmethod
    def _hint(kind: str) -> str:
        if kind in ALLOWABLE_KINDS:
            return f"allowed only when [security] ad_hoc_destinations lists {kind!r}"
        return "never reachable by an ad-hoc call; name it in a configuration of the settings file"


class CheckingResolver(_Resolver):
    """Resolves with the loop's ``getaddrinfo`` and hands out only addresses the policy allows.

    Answers are kept ``ttl_s`` seconds (at most ``max_entries`` names, the oldest dropped
    first): whatever it returns, fresh or kept, passed the policy when resolved.
    """

    def __init__(self, policy: DestinationPolicy, *, ttl_s: float = 10.0, max_entries: int = 256,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._kept: dict[tuple[str, int], tuple[float, tuple[ResolveResult, ...]]] = {}

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_UNSPEC) -> list[ResolveResult]:
        results = await self.checked(host, port)
        return [r for r in results if family in (socket.AF_UNSPEC, r["family"])]

    async def checked(self, host: str, port: int) -> tuple[ResolveResult, ...]:
        """Every address ``host`` resolves to, each checked; refuses if any one fails."""
        key, now = (host.lower().rstrip("."), port), self._clock()
        kept = self._kept.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        self.policy.check_name(host)
        literal = _literal(host)
        infos: Sequence[tuple[Any, ...]]
        if literal is not None:  # checked by value: no DNS, so nothing to rebind
            family = socket.AF_INET if literal.version == 4 else socket.AF_INET6
            infos = [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (str(literal), port))]
        else:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        results = tuple(self._result(host, info[0], info[2], info[4]) for info in infos)
        self._kept.pop(key, None)
        self._kept[key] = (now + self._ttl_s, results)
        while len(self._kept) > self._max_entries:
            del self._kept[next(iter(self._kept))]
        return results

    def _result(self, host: str, family: int, proto: int, address: tuple[Any, ...]) -> ResolveResult:
        self.policy.check(host, address[0])
        return {"hostname": host, "host": address[0], "port": address[1], "family": family,
                "proto": proto, "flags": _NUMERIC}

    def __len__(self) -> int:
        return len(self._kept)

    async def close(self) -> None:
        self._kept.clear()


def _host_port(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigurationError("base_url: the port is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise ConfigurationError("base_url: names no host")
    return parts.hostname, port


def _literal(host: str) -> IPAddress | None:
    if ":" not in host and not host.replace(".", "").isdigit():
        return None  # most hosts are names: spare them ipaddress's costly failure
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class DestinationGuard:
    """The manager's gate for ad-hoc destinations: checks a configuration before its call and
    owns the HTTP client (with the checking resolver) that ad-hoc calls go through."""

    def __init__(self, policy: DestinationPolicy, *, connector_limit: int = 100,
                 limits: ReadLimits | None = None) -> None:
        self.resolver = CheckingResolver(policy)
        self.http = HttpClient(connector_limit=connector_limit, resolver=self.resolver, limits=limits)

    @staticmethod
    def applies_to(config: ProviderConfig) -> bool:
        """Named configurations are trusted as written; only a call's own ``base_url`` is checked."""
        return config.base_url is not None and config.is_ad_hoc

    def client_for(self, config: ProviderConfig, default: HttpClient) -> HttpClient:
        """The client ``config``'s requests go through."""
        return self.http if self.applies_to(config) else default

    async def check(self, config: ProviderConfig) -> None:
        """Refuse ``config`` before anything is sent if its ``base_url`` reaches a refused address.

        A name that does not resolve now is left to the call, which fails to connect as usual
        (``ProviderConnectionError``), since the resolver checks again at connect time.
        """
        if not self.applies_to(config):
            return
        host, port = _host_port(config.base_url or "")
        try:
            await self.resolver.checked(host, port)
        except OSError:
            return

    async def aclose(self) -> None:
        """Close the ad-hoc client."""
        await self.http.aclose()
