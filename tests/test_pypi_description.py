"""The PyPI page's example (PYPI.md, the package's long description) runs as written, against
the replaying server (the one change: `Config()` there means a server on 127.0.0.1:8080, here
the replaying server's address). Skipped where the tests run without the source tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import llamafast
from _server import ReplayServer

PYPI_MD = Path(__file__).resolve().parent.parent / "PYPI.md"


def test_the_pypi_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    if not PYPI_MD.is_file():
        pytest.skip("no source tree here (PYPI.md is not beside tests/)")
    blocks = re.findall(r"```python\n(.*?)```", PYPI_MD.read_text("utf-8"), re.S)
    assert len(blocks) == 1
    assert blocks[0].count("Config()") == 1
    with ReplayServer() as server:
        config = f"Config(infer=InferConfig(url={server.url!r}))"
        exec(blocks[0].replace("Config()", config), {"InferConfig": llamafast.InferConfig})
    out = capsys.readouterr().out
    assert "Completion(" in out and "finish_reason=<FinishReason.STOP" in out
