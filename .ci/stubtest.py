"""Check the extension modules' stubs against both twins: `python .ci/stubtest.py`.

Runs with a Python that has mypy and an installed llamafast with its Cython twin built (run it
from a directory that has no `llamafast/` in it, so that the installed package is the one
imported). Each stub `<stem>_c.pyi` declares what both twins of `<stem>` offer:

1. mypy's stubtest checks the stubs against the Cython modules (`llamafast._engine.<stem>_c`), with
   .ci/stubtest-cython.allow for what only Cython has (its pickling hooks, the C-level types
   the other Cython modules cimport);
2. the same stubs, copied as `<stem>_py.pyi` beside a copy of the package's Python files, are
   checked against the pure modules (`llamafast._engine.<stem>_py`): the same public names, with
   compatible signatures (.ci/stubtest-pure.allow for what only the pure twin has).

Exit status 0 when both pass; stubtest's report otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEMS = ("_sse", "_assemble", "_chat", "_http", "_vectors")


def stubtest(modules: list[str], allowlist: Path, mypypath: str | None = None) -> int:
    env = dict(os.environ)
    if mypypath is not None:
        env["MYPYPATH"] = mypypath
    command = [sys.executable, "-m", "mypy.stubtest", "--allowlist", str(allowlist), *modules]
    print("$", " ".join(command[2:]), flush=True)
    return subprocess.run(command, env=env).returncode


def main() -> int:
    import llamafast

    package = Path(llamafast.__file__).resolve().parent
    engine = package / "_engine"
    missing = [f"{stem}_c.pyi" for stem in STEMS if not (engine / f"{stem}_c.pyi").is_file()]
    if missing:
        print(f"error: {engine} has no {', '.join(missing)}", file=sys.stderr)
        return 1
    status = stubtest(
        [f"llamafast._engine.{stem}_c" for stem in STEMS], HERE / "stubtest-cython.allow"
    )
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "llamafast"
        shutil.copytree(
            package, copy, ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
        )
        # The package's __init__ is left out (an empty stub instead): what it imports (the
        # clients) is not under test here.
        (copy / "__init__.pyi").write_text("", encoding="utf-8")
        for stem in STEMS:  # each stub, naming the pure twins where it names a Cython one
            text = (engine / f"{stem}_c.pyi").read_text(encoding="utf-8")
            for other in STEMS:
                text = text.replace(
                    f"llamafast._engine.{other}_c ", f"llamafast._engine.{other}_py "
                )
            # How a class is made a disjoint base is each twin's own (an extension type, or
            # __slots__, or not at all for the pure Receiver): not part of what both offer.
            text = text.replace("@disjoint_base\n", "")
            (copy / "_engine" / f"{stem}_py.pyi").write_text(text, encoding="utf-8")
        status |= stubtest(
            [f"llamafast._engine.{stem}_py" for stem in STEMS], HERE / "stubtest-pure.allow", tmp
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
