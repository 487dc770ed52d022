"""The release workflow's binary wheels, as cibuildwheel expands them from the sdist: for each
row of the `wheels` job's matrix in .github/workflows/wheels.yml, `cibuildwheel
--print-build-identifiers` on the sdist (the workflow's own step, with its CIBW_ARCHS), checked
against [tool.cibuildwheel] `build` of the sdist's pyproject.toml: every CPython it names, and
only those, for each architecture of the row (manylinux and musllinux on Linux).

    python .ci/cibw_identifiers.py SDIST.tar.gz   (cibuildwheel installed in this Python)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = {"ubuntu": "linux", "macos": "macos", "windows": "windows"}
# cibuildwheel's platform tag of each architecture, and the Linux C libraries it builds for
TAGS = {
    ("linux", "x86_64"): ["manylinux_x86_64", "musllinux_x86_64"],
    ("linux", "aarch64"): ["manylinux_aarch64", "musllinux_aarch64"],
    ("macos", "x86_64"): ["macosx_x86_64"],
    ("macos", "arm64"): ["macosx_arm64"],
    ("windows", "AMD64"): ["win_amd64"],
    ("windows", "ARM64"): ["win_arm64"],
}


def main(sdist: str) -> int:
    with tarfile.open(sdist) as tar:
        member = next(
            m
            for m in tar.getmembers()
            if m.name.count("/") == 1 and m.name.endswith("/pyproject.toml")
        )
        config = tomllib.loads(tar.extractfile(member).read().decode())  # type: ignore[union-attr]
    pythons = [p.removesuffix("-*") for p in config["tool"]["cibuildwheel"]["build"].split()]
    workflow = (ROOT / ".github" / "workflows" / "wheels.yml").read_text()
    rows = re.findall(r"- \{ os: ([\w.-]+), archs: \"?([\w ]+?)\"? \}", workflow)
    if not rows:
        print("cibw: no matrix rows in the wheels job", file=sys.stderr)
        return 1
    failed = total = 0
    for os_name, archs in rows:
        platform = PLATFORMS[os_name.split("-")[0]]
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "cibuildwheel",
                "--platform",
                platform,
                "--print-build-identifiers",
                sdist,
            ],
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("CIBW_")},
                "CIBW_ARCHS": archs,
            },
            capture_output=True,
            text=True,
            check=True,
        )
        got = sorted(out.stdout.split())
        want = sorted(
            f"{py}-{tag}" for py in pythons for a in archs.split() for tag in TAGS[platform, a]
        )
        total += len(got)
        state = "ok" if got == want else "WRONG"
        print(f"cibw: {os_name} ({archs}): {len(got)} wheels {state}")
        if got != want:
            failed += 1
            print(f"  expected {want}\n  got      {got}", file=sys.stderr)
    print(f"cibw: {total} binary wheels in {len(rows)} jobs, for {', '.join(pythons)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
