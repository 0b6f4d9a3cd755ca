"""Imports stand at a module's top; one inside a function carries, on its own line, a comment
saying the cost it defers or the cycle it breaks (`import torch  # torch: the launcher needs
none`). Parses the package with ast and tokenize, runs nothing: well under a second."""
import ast
import io
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "stanza_core"


def comment_lines(source: str) -> set[int]:
    """Line numbers that hold a `#` comment (a `#` inside a string is no comment)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {tok.start[0] for tok in tokens if tok.type == tokenize.COMMENT}


def uncommented_function_imports(source: str) -> list[tuple[int, str]]:
    """(line, statement) of each import inside a function with no comment on any of its lines."""
    commented = comment_lines(source)
    found = []

    def walk(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, True)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                lines = range(child.lineno, child.end_lineno + 1)
                if in_function and not commented.intersection(lines):
                    found.append((child.lineno, ast.unparse(child)))
            else:
                walk(child, in_function)

    walk(ast.parse(source), False)
    return found


def test_every_function_import_says_why():
    bad = [f"{path.relative_to(PACKAGE.parent)}:{line}: {stmt}"
           for path in sorted(PACKAGE.rglob("*.py"))
           for line, stmt in uncommented_function_imports(path.read_text())]
    assert not bad, ("imports inside functions without a comment giving the cost they defer or "
                     "the cycle they break (move them to the top otherwise):\n" + "\n".join(bad))


PLANTED = '''
import os


def f():
    import json
    return json.dumps(os.sep)


class C:
    async def g(self):
        from collections import (
            OrderedDict,  # a comment on any line of the statement counts
        )
        return OrderedDict
'''


@pytest.mark.parametrize("source, expected", [
    (PLANTED, [(6, "import json")]),
    (PLANTED.replace("import json", "import json  # json: only f needs it"), []),
    (PLANTED.replace("import json", "import json; x = '#'"), [(6, "import json")]),
])
def test_the_check_sees_a_planted_import(source, expected):
    assert uncommented_function_imports(source) == expected
