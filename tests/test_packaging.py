"""The binary wheels' identifiers are listed once, in [tool.cibuildwheel] `build`: the
classifiers, the PyPI page and the README name the same CPythons. (Skipped where the tests run
without pyproject.toml and the pages beside them.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
if not PYPROJECT.is_file():
    pytest.skip("no pyproject.toml beside tests/", allow_module_level=True)
CONFIG = tomllib.loads(PYPROJECT.read_text("utf-8"))


def built_versions() -> list[str]:
    """'3.11', ... for each `cpXYY-*` pattern of the build list, in order."""
    patterns = CONFIG["tool"]["cibuildwheel"]["build"].split()
    versions = []
    for pattern in patterns:
        match = re.fullmatch(r"cp3(\d+)-\*", pattern)
        assert match, f"build lists {pattern!r}, not a whole CPython (cp3XY-*)"
        versions.append(f"3.{match[1]}")
    return versions


def test_the_build_list_is_every_cpython_from_the_lowest_supported() -> None:
    versions = built_versions()
    minors = [int(v.split(".")[1]) for v in versions]
    assert minors == list(range(minors[0], minors[-1] + 1))
    assert CONFIG["project"]["requires-python"] == f">={versions[0]}"


def test_the_classifiers_name_the_built_cpythons() -> None:
    named = [
        c.rsplit(" :: ", 1)[1]
        for c in CONFIG["project"]["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert named == built_versions()


@pytest.mark.parametrize("page", ["PYPI.md", "README.md"])
def test_the_pages_name_the_built_range(page: str) -> None:
    if not (ROOT / page).is_file():
        pytest.skip(f"no {page} beside tests/")
    versions = built_versions()
    said = re.findall(r"CPython (3\.\d+) to (3\.\d+)", (ROOT / page).read_text("utf-8"))
    assert said == [(versions[0], versions[-1])]
