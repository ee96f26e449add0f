"""The ``[http]`` settings section: the read limits, their defaults, and their checks."""

from __future__ import annotations

import pytest

from provmw.errors import ConfigurationError
from provmw.http import ReadLimits
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings, parse_settings

MIB = 1024 * 1024


def parse(http: dict[str, object]) -> Settings:
    return parse_settings({"http": http}, "provmw.toml", environ={})


def test_the_defaults_are_64_mib_16_mib_256_mib_and_60_s() -> None:
    assert Settings().http == ReadLimits(max_body_bytes=64 * MIB, max_event_bytes=16 * MIB,
                                         max_stream_bytes=256 * MIB, stream_idle_s=60.0)


def test_the_http_section_sets_the_limits() -> None:
    settings = parse({"max_body_bytes": 1024, "max_event_bytes": 512, "max_stream_bytes": 4096, "stream_idle_s": 5})
    assert settings.http == ReadLimits(max_body_bytes=1024, max_event_bytes=512, max_stream_bytes=4096,
                                       stream_idle_s=5)


@pytest.mark.parametrize(("key", "value"), [("max_body_bytes", 0), ("max_body_bytes", 1.5), ("max_event_bytes", "16M"),
                                            ("max_stream_bytes", 0), ("max_stream_bytes", True),
                                            ("stream_idle_s", -1), ("stream_idle_s", float("nan"))])
def test_a_bad_limit_names_the_section_and_key(key: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=rf"provmw.toml: \[http\]: {key} must be"):
        parse({key: value})


def test_an_unknown_key_is_named_with_a_hint() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown key 'max_body_byte' \(did you mean 'max_body_bytes'\?\)"):
        parse({"max_body_byte": 1})


async def test_the_manager_reads_with_the_settings_limits(builtin_only: PluginHost) -> None:
    limits = ReadLimits(max_body_bytes=2048)
    async with ServiceManager(Settings(http=limits), host=builtin_only) as manager:
        assert manager.http.limits is limits
