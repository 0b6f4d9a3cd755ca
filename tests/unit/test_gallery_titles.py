"""Every card of the gallery carries its notebook's title (its first markdown heading), not its
file name: notebooks, tutorials and lecture decks (a deck may open with an empty code cell)."""
import json
from pathlib import Path

import pytest

from stanza_core.reproduce.gallery import _title

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("tutorials/t*.ipynb")) + \
    sorted(ROOT.glob("tutorials/lectures/*.ipynb"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_a_card_title_is_the_first_heading(nb):
    title = _title(nb)
    assert title and title != nb.stem, title


def test_an_empty_first_cell_is_skipped_and_no_heading_falls_back_to_the_stem(tmp_path):
    nb = tmp_path / "deck.ipynb"
    cells = [{"cell_type": "code", "source": [""]}, {"cell_type": "markdown", "source": ["# Lecture 9 · X\n", "text"]}]
    nb.write_text(json.dumps({"cells": cells}))
    assert _title(nb) == "Lecture 9 · X"
    nb.write_text(json.dumps({"cells": cells[:1]}))
    assert _title(nb) == "deck"
