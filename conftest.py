"""For every test under this folder (provmw's, the plugins', the benchmarks'): a folder of its own.

``provmw.ci`` is loaded as a plugin: under CI the session cannot go green by skipping (a
missing service, a service's tests none of which passed, or no test passed at all fails it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["provmw.ci"]


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test in its own folder, with its own user data folder: settings built in code
    keep ``provmw.sqlite3`` in the working folder, the embedded defaults in the data folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
