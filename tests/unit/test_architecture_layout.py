"""docs/architecture.md's "Layout as built" names every module and subpackage of stanza_core, and
nothing that is not there. The strategies' folders (stanza_core/strategies/<name>/) are described
by "Adding a strategy" and are left out. Reads files only: well under a second."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stanza_core"
DOC = ROOT / "docs" / "architecture.md"
STRATEGY_FOLDERS = ("strategies/",)  # "Adding a strategy" describes these


def layout_block(text: str) -> str:
    """The code block under "## Layout as built"."""
    section = text.split("## Layout as built", 1)[1]
    return re.search(r"```\n(stanza_core/\n.*?)```", section, re.S).group(1)


def named_paths(block: str) -> set[str]:
    """Paths (relative to stanza_core/) named in the block's name column: a line indented 2 names
    top-level modules and packages ("x.py", "pkg/"), one indented 4 names those of the last
    package above it; deeper lines continue a description."""
    out, package = set(), ""
    for line in block.splitlines()[1:]:
        indent = len(line) - len(line.lstrip(" "))
        if indent not in (2, 4):
            continue
        names = [t for t in re.split(r" {2,}", line.strip())[0].split() if t.endswith((".py", "/"))]
        if indent == 2:
            package = next((t for t in names if t.endswith("/")), package)
            out.update(names)
        else:
            out.update(package + t for t in names)
    return out


def package_paths() -> set[str]:
    """Every module (not __init__.py) and subpackage of stanza_core, as paths relative to it."""
    out = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py":
            if path.parent != PACKAGE:
                out.add(rel[: -len("__init__.py")])
        else:
            out.add(rel)
    return out


def missing_and_stale(block: str) -> tuple[list[str], list[str]]:
    named = named_paths(block)
    actual = {p for p in package_paths() if not p.startswith(STRATEGY_FOLDERS)}
    missing = sorted(actual - named)
    stale = sorted(p for p in named - actual if not p.startswith(STRATEGY_FOLDERS) and not (PACKAGE / p).exists())
    return missing, stale


def test_the_layout_names_every_module_and_nothing_else():
    missing, stale = missing_and_stale(layout_block(DOC.read_text()))
    assert missing == [], f"docs/architecture.md, 'Layout as built' does not name: {missing}"
    assert stale == [], f"docs/architecture.md, 'Layout as built' names what is not there: {stale}"


def test_a_module_left_out_or_a_stale_name_is_caught():
    """Planted failures: the block without its netem/tcpstats.py line, and with a module that
    does not exist."""
    block = layout_block(DOC.read_text())
    assert "linkstats.py tcpstats.py" in block
    without = block.replace("linkstats.py tcpstats.py", "linkstats.py")
    assert missing_and_stale(without)[0] == ["netem/tcpstats.py"]
    planted = block.replace("  extras.py ", "  extras.py nosuch.py ")
    assert missing_and_stale(planted)[1] == ["nosuch.py"]
