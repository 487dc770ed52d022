"""The version is written once (`__version__`, which setuptools reads for the metadata), and
everything that shows it agrees: `llamafast --version`, `llamafast.__version__` and the installed
distribution's metadata. The metadata (the PyPI page's) names the project's addresses and offers
no extra that installs nothing. These read the installed package, so they run against a wheel."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import llamafast

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_version_metadata_and_cli_agree() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.dev\d+)?", llamafast.__version__)
    assert importlib.metadata.version("llamafast") == llamafast.__version__, (
        "the installed metadata is not this source's version: reinstall (pip install -e .)"
    )
    out = subprocess.run(
        [sys.executable, "-m", "llamafast", "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split()[:2] == ["llamafast", llamafast.__version__]


def test_the_version_is_written_once() -> None:
    if not PYPROJECT.is_file():
        pytest.skip("no source tree here (pyproject.toml is not beside tests/)")
    project = tomllib.loads(PYPROJECT.read_text("utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "llamafast.__version__"}


def test_the_metadata_names_the_project_addresses() -> None:
    urls = dict(
        u.split(", ", 1) for u in importlib.metadata.metadata("llamafast").get_all("Project-URL")
    )
    assert {"Homepage", "Source", "Issues", "Changelog"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())


def test_every_extra_installs_something() -> None:
    meta = importlib.metadata.metadata("llamafast")
    requires = importlib.metadata.requires("llamafast") or []
    for extra in meta.get_all("Provides-Extra") or []:
        marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
        assert any(marker.search(r) for r in requires), f"the extra {extra!r} installs nothing"
