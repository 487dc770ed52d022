"""Run a wheel's test step the way cibuildwheel runs it, from pyproject.toml's [tool.cibuildwheel]:
the `test-sources` copied from PROJECT (the unpacked sdist) into an empty folder, and the
`test-command` run there with `test-environment`, against the wheel installed in VENV (its bin/
first on PATH), never against a source tree. So a test step that would break in the release
workflow breaks here first.

    python .ci/cibw_test.py PROJECT VENV [--identifier cp312-manylinux_x86_64]
        [--command "python -m pytest ..."] [--env NAME=VALUE ...] [--keep DIR]

`--identifier` applies the overrides whose `select` matches it, as cibuildwheel does; `--command`
and `--env` replace the test command and add variables (the pure-twin run of the same folder).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path


def settings(project: Path, identifier: str) -> dict[str, object]:
    config = tomllib.loads((project / "pyproject.toml").read_text("utf-8"))["tool"]["cibuildwheel"]
    merged = {k: v for k, v in config.items() if k != "overrides"}
    for override in config.get("overrides", []):
        if any(fnmatch.fnmatch(identifier, p) for p in str(override["select"]).split()):
            merged.update({k: v for k, v in override.items() if k != "select"})
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("venv", type=Path)
    parser.add_argument("--identifier", default="cp311-manylinux_x86_64")
    parser.add_argument("--command")
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--keep", type=Path, help="copy into this (empty) folder and keep it")
    args = parser.parse_args()
    config = settings(args.project, args.identifier)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="cibw-test-"))
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()):
        sys.exit(f"error: {folder} is not empty")
    for source in config.get("test-sources", []):
        where = args.project / str(source)
        if where.is_dir():
            shutil.copytree(where, folder / str(source))
        elif where.is_file():
            (folder / str(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(where, folder / str(source))
        else:
            sys.exit(f"error: test-sources names {source}, which {args.project} does not have")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update({k: str(v) for k, v in dict(config.get("test-environment", {})).items()})
    env.update(item.split("=", 1) for item in args.env)
    venv = args.venv.resolve()
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    command = args.command or str(config["test-command"])
    command = command.replace("{project}", str(args.project)).replace("{package}", ".")
    print(
        f"-- cibuildwheel's test step in {folder} (holds: {', '.join(sorted(os.listdir(folder)))})"
    )
    print(f"-- {command}", flush=True)
    try:
        return subprocess.run(command, shell=True, cwd=folder, env=env, check=False).returncode
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
