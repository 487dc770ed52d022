"""Check what a built wheel holds: `check_wheel.py binary|pure WHEEL...`, exit 1 naming each fault.

Both kinds: the package's modules, py.typed, the extension modules' stubs, the recordings, and
LICENSE/NOTICE in the dist-info; no Cython source (.pyx/.pxd), no generated C/C++. A binary
wheel: a CPython tag, the extension modules, none of them carrying debug information or a
symbol table (ELF). A pure wheel: tagged py3-none-any, no compiled file at all. Runs with the
tools venv's pyelftools (an auditwheel dependency).
"""

from __future__ import annotations

import ast
import io
import sys
import zipfile
from pathlib import Path

# The compiled modules, as src/llamafast/_engine/_extensions.py lists them (read, not imported).
_LISTED = Path(__file__).resolve().parent.parent / "src/llamafast/_engine/_extensions.py"
EXTENSIONS = next(
    ast.literal_eval(node.value)
    for node in ast.parse(_LISTED.read_text(encoding="utf-8")).body
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "EXTENSIONS"
)
REQUIRED = (
    "llamafast/__init__.py",
    "llamafast/py.typed",
    "llamafast/_recordings/tool_call.http",
    "llamafast/_recordings/serve/props.http",  # what `llamafast serve` answers with
    # the extension modules' stubs (both kinds: a type checker reads them for either twin)
    *(f"llamafast/_engine/{ext}.pyi" for ext in EXTENSIONS),
)
SOURCES = (".pyx", ".pxd", ".c", ".cpp", ".h", ".hpp")
COMPILED = (".so", ".pyd", ".dylib", ".dll")


def faults(kind: str, wheel: Path) -> list[str]:
    found: list[str] = []
    tag = wheel.name.removesuffix(".whl").split("-", 2)[2]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        found += [f"{n} is missing" for n in REQUIRED if n not in names]
        for license_file in ("LICENSE", "NOTICE"):
            if not any(n.endswith(f".dist-info/licenses/{license_file}") for n in names):
                found.append(f"dist-info/licenses/{license_file} is missing")
        found += [f"{n}: a source file in the wheel" for n in names if n.endswith(SOURCES)]
        compiled = [n for n in names if n.endswith(COMPILED)]
        if kind == "pure":
            if tag != "py3-none-any":
                found.append(f"tagged {tag}, not py3-none-any")
            found += [f"{n}: a compiled file in the pure wheel" for n in compiled]
            return found
        if not tag.startswith("cp3"):
            found.append(f"tagged {tag}, not a CPython one")
        for ext in EXTENSIONS:
            if not any(Path(n).name.startswith(ext + ".") for n in compiled):
                found.append(f"the extension {ext} is missing")
        for name in compiled:
            found += [f"{name}: {f}" for f in elf_faults(zf.read(name))]
    return found


def elf_faults(data: bytes) -> list[str]:
    if not data.startswith(b"\x7fELF"):
        return []  # not ELF (macOS, Windows): their debug information is not in the module
    from elftools.elf.elffile import ELFFile

    sections = [s.name for s in ELFFile(io.BytesIO(data)).iter_sections()]
    return [f"has section {s} (not stripped)" for s in sections if s.startswith(".debug")] + (
        ["has a symbol table (.symtab: not stripped)"] if ".symtab" in sections else []
    )


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("binary", "pure"):
        print("usage: check_wheel.py binary|pure WHEEL...", file=sys.stderr)
        return 2
    status = 0
    for wheel in map(Path, argv[1:]):
        found = faults(argv[0], wheel)
        for fault in found:
            print(f"{wheel.name}: {fault}", file=sys.stderr)
        size = wheel.stat().st_size
        print(f"{wheel.name}: {'ok' if not found else 'FAILED'} ({size:,} bytes)")
        status |= bool(found)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
