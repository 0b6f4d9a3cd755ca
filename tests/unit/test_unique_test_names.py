"""pytest imports test files by basename (rootdir-relative packages are not used here), so two
test files with the same name in different folders stop the whole collection."""
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_name_is_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
