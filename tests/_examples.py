# The pages' code blocks (README.md, docs/porting.md) are run as written, so what a page shows is
# what the library does. One definition, for every module that runs a page, of what a block is
# (a fenced block and the line above it, where a page marks it `<!-- not run: reason -->`), of
# `python -m llamafast serve` as a subprocess (`conftest.py` makes one per test module: `served`),
# and of how a block runs against it: in a fresh interpreter on the twin asked for, in a
# directory holding the README's own llamafast.toml, its `url` pointed at the server.
"""`Block` and `blocks`, the `not run` marker, `serve_process`, `run_block`, `client_module`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace

import llamafast
import llamafast.pure

NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->")
URL_LINE = re.compile(r'^url = ".*"$', re.M)


@dataclass
class Block:
    lang: str
    line: int  # of the opening fence, 1-based
    text: str
    above: str  # the last non-blank line before the fence


def blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block of `text`; an unclosed fence is an error, not a silent end."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            lang = lines[i][3:].strip()
            start = i
            i += 1
            while i < len(lines) and lines[i].rstrip() != "```":
                i += 1
            if i == len(lines):
                raise AssertionError(f"{page}:{start + 1}: the fence is never closed")
            above = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
            out.append(Block(lang, start + 1, "\n".join(lines[start + 1 : i]) + "\n", above))
        i += 1
    return out


def serve_process(*args: str) -> tuple[subprocess.Popen[str], str]:
    """`python -m llamafast serve` on a free port, with `args`: the process and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "llamafast", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "llamafast serve: http://127.0.0.1:PORT (...)"
    assert line.startswith("llamafast serve: http://127.0.0.1:"), line + proc.stderr.read()
    return proc, line.split()[2]


def run_block(
    block: Block, where: str, toml: str, url: str, tmp_path: Path, impl: SimpleNamespace
) -> str:
    """Run `block` (found at `where`, "PAGE:LINE") on the twin `impl` against the server at
    `url`, with `toml` (a llamafast.toml) pointed at it; what it printed, which must be
    something, and it must end with status 0."""
    toml, n = URL_LINE.subn(f'url = "{url}"', toml)
    assert n == 1, "the README's llamafast.toml must set [infer] url"
    (tmp_path / "llamafast.toml").write_text(toml, encoding="utf-8")
    env = dict(os.environ, LLAMAFAST_NO_EXTENSIONS="1" if impl.IMPLEMENTATION == "python" else "0")
    done = subprocess.run(
        [sys.executable, "-c", block.text],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{where}\n{done.stderr}"
    assert done.stdout.strip(), f"{where} printed nothing"
    return done.stdout


def client_module(impl: SimpleNamespace) -> ModuleType:
    """The package whose clients run on the twin `impl`: `llamafast.pure` for the pure one."""
    return llamafast.pure if impl.IMPLEMENTATION == "python" else llamafast
