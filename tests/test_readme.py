"""Every ```python block of README.md runs, exactly as written, against the loopback server.

Each block runs in a fresh namespace, in a temporary working directory that holds the README's
own `llamafast.toml` (its ```toml block) with `url` pointing at a `ReplayServer`; so a block
must define or import every name it uses. The server answers a chat whose last message is the
user's with the `tool_call` recording and any other with `content_only`, so an agent loop runs
one tool round and ends. A block may be left out only by a `<!-- not run: reason -->` line
right above it, and the test then says so (skipped, with the reason).

The pages in docs/ name their rules (`### NAME`); a citation such as "docs/sse.md, rule BOM" in
the code, the tests or the docs must name a rule that exists.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from _examples import NOT_RUN, URL_LINE, Block, blocks
from _server import ReplayServer, Reply

README = Path(__file__).resolve().parent.parent / "README.md"
if not README.is_file():
    pytest.skip("no README.md beside tests/ (not a source tree)", allow_module_level=True)
# A block whose calls the loopback test server does not answer (/props, input_tokens, /models,
# embeddings): tests/test_serve.py runs it against `llamafast serve`, which answers them.
SERVE_ONLY = re.compile(r"<!--\s*run against llamafast serve:\s*(?P<reason>\S.*?)\s*-->")


ALL = blocks(README.read_text(encoding="utf-8"))
PYTHON = [b for b in ALL if b.lang == "python"]


def test_the_python_blocks_are_found() -> None:
    # A fence spelt otherwise (```py, ```Python, ``` python) would be skipped silently.
    odd = [f"{b.line}: {b.lang!r}" for b in ALL if b.lang != "python" and "py" in b.lang.lower()]
    assert not odd, f"python blocks not marked ```python: {odd}"
    assert len(PYTHON) >= 4


def test_a_not_run_marker_gives_a_reason() -> None:
    for b in PYTHON:
        if "not run" in b.above:
            assert NOT_RUN.search(b.above), f"README.md:{b.line}: `not run` needs a reason"


def _config_file() -> str:
    (toml,) = [b.text for b in ALL if b.lang == "toml"]
    return toml


def _reply(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]["role"]
    return Reply("tool_call" if last == "user" else "content_only")


@pytest.fixture
def server(server: ReplayServer) -> ReplayServer:
    """The shared loopback server (conftest.py), answering as `_reply` says."""
    server.script = _reply
    return server


def test_the_config_file_is_valid_as_written(tmp_path: Path) -> None:
    from llamafast import Config

    path = tmp_path / "llamafast.toml"
    path.write_text(_config_file(), encoding="utf-8")
    cfg = Config.from_toml(path)
    assert cfg.infer.url == "http://127.0.0.1:8080"


@pytest.mark.parametrize("block", PYTHON, ids=[f"README.md:{b.line}" for b in PYTHON])
def test_the_block_runs(
    block: Block, server: ReplayServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = NOT_RUN.search(block.above)
    if marker:
        pytest.skip(f"README.md:{block.line} is marked not run: {marker['reason']}")
    marker = SERVE_ONLY.search(block.above)
    if marker:
        pytest.skip(f"README.md:{block.line} runs in tests/test_serve.py: {marker['reason']}")
    toml, n = URL_LINE.subn(f'url = "{server.url}"', _config_file())
    assert n == 1, "the README's llamafast.toml must set [infer] url"
    (tmp_path / "llamafast.toml").write_text(toml, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code = compile(block.text, f"README.md:{block.line}", "exec")
    exec(code, {"__name__": "__main__"})  # raises if the block does
    if "llamafast.toml" in block.text:  # it talked to the server, not to some other one
        assert server.chats, f"README.md:{block.line} sent no chat request to the server"


# --- docs/: the pages the README and the code point at ------------------------------------------

ROOT = README.parent
DOCS = ROOT / "docs"
RULE = re.compile(r"^### ([A-Z0-9][A-Z0-9-]*)$", re.M)
# "docs/sse.md, rule BOM" or "docs/sse.md, rules BOM and CR" in a comment or a docstring
CITATION = re.compile(
    r"docs/([\w-]+\.md),?\s+rules?\s+([A-Z0-9-]+(?:(?:,|\s+and|\s+or)\s+[A-Z0-9-]+)*)"
)
SOURCES = {".py", ".pyx", ".pxd", ".pyi", ".md"}


def rules(page: str) -> list[str]:
    return RULE.findall((DOCS / page).read_text(encoding="utf-8"))


# The map of the house, and the guides (porting.md: from the openai SDK), name no rule of their
# own: they say where the rules live, and cite them.
MAP = "architecture.md"
GUIDES = ("porting.md",)


def test_every_docs_page_names_its_rules_once() -> None:
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name not in (MAP, *GUIDES))
    assert {"assembler.md", "client.md", "request-body.md", "sse.md"} <= set(pages)
    for guide in (MAP, *GUIDES):
        assert not rules(guide), f"docs/{guide} is a guide: a rule belongs on its piece's page"
    for page in pages:
        names = rules(page)
        assert len(names) >= 10, page
        assert len(names) == len(set(names)), f"{page} names a rule twice"


def test_the_readme_links_to_pages_that_exist() -> None:
    links = re.findall(r"\]\((docs/[^)#]*)", README.read_text(encoding="utf-8"))
    assert links
    for link in links:
        assert (ROOT / link).exists(), link


def test_every_rule_the_code_cites_exists() -> None:
    cited = 0
    for path in [*ROOT.glob("src/llamafast/**/*"), *ROOT.glob("tests/*"), *DOCS.glob("*"), README]:
        if path.suffix not in SOURCES:
            continue
        text = path.read_text(encoding="utf-8")
        for page, names in CITATION.findall(text):
            assert (DOCS / page).exists(), f"{path.name} cites docs/{page}, which does not exist"
            for name in re.split(r",\s*|\s+and\s+|\s+or\s+", names):
                assert name in rules(page), f"{path.name} cites docs/{page}, rule {name}"
                cited += 1
    assert cited, "no citation found: the pattern no longer matches how the code cites"


# --- the quick start's figure: what `replay` prints is what the README explains -----------------

TIME_LINE = re.compile(
    r"^time +parsed (?P<events>\d+) events in (?P<ms>\d+\.\d\d) ms, (?P<us>\d+\.\d) µs/event, ",
    re.M,
)


def quick_start_replay() -> list[str]:
    """The quick start's `replay` command, as the README gives it, for this interpreter."""
    (first, *_) = [b for b in ALL if b.lang == "sh"]
    (line,) = [ln for ln in first.text.splitlines() if "llamafast replay" in ln]
    words = line.split("&&")[-1].split()
    assert words[:4] == ["python", "-m", "llamafast", "replay"], line
    return [sys.executable, *words[1:]]


def test_the_quick_starts_replay_prints_the_figure_the_readme_explains(tmp_path: Path) -> None:
    done = subprocess.run(
        quick_start_replay(), cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    printed = TIME_LINE.search(done.stderr)  # stderr: docs/cli.md, rule STREAMS
    assert printed, f"no time line in the summary:\n{done.stderr}"
    # The figure is the parse time over the events: per event, in µs (its own arithmetic).
    events = int(printed["events"])
    per_event = float(printed["ms"]) * 1000 / events
    # each figure rounded as printed: µs to 0.05, the ms to 0.005 (5 µs over the events)
    assert abs(float(printed["us"]) - per_event) <= 0.05 + 5.0 / events + 1e-9
    # The README quotes the line as printed, its figures elided, and explains that figure in the
    # sentences that follow it: paced, unpaced, against the engine's cost per chunk.
    text = " ".join(README.read_text(encoding="utf-8").split())
    quoted = f"`time parsed {printed['events']} events in … ms, … µs/event`"
    assert quoted in text, f"the README must quote the line replay prints: {quoted}"
    explained = text[text.index(quoted) :].split(" The second runs")[0]
    for words in ("inside the parser", "tens of µs an event", "`--no-pace` it is a few µs"):
        assert words in explained, f"the README's explanation no longer says {words!r}"
    assert f"over only {events} events" in explained
    # ... and its cost per chunk is the Performance table's whole path, Cython.
    whole_path = r"\| whole path: `ChatStream`, bytes to `Completion` \| [\d.]+ \| ([\d.]+) \|"
    row = re.search(whole_path, text)
    assert row and f"about {float(row[1]):.1f} µs a chunk" in explained
