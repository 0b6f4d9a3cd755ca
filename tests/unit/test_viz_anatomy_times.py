"""The anatomy's "Measured time per sample" figure is never blank: a run that only counted
(notebook 01's quick run, time_layers false) gets a figure that says, in its title and its text,
that nothing was timed and how to time it; a timed profile gets its bars. Seconds, no timing."""
import pytest

pytest.importorskip("plotly", reason="figures need plotly")

from stanza_core import get_model, profile_model, viz


@pytest.fixture(scope="module")
def counted():
    return profile_model(get_model("tiny_cnn"), (3, 32, 32), batch_size=2, name="tiny_cnn")


def test_a_counted_run_says_why_its_time_figure_has_no_bars(counted):
    fig = viz.anatomy_figures([counted])["times"]
    assert not fig.data  # nothing measured: no bars at all
    assert fig.layout.title.text == "Measured time per sample: not measured in this run"
    (note,) = fig.layout.annotations
    assert note.text.startswith("Not timed in this run") and "time_layers = true" in note.text
    assert note.font.size >= 14 and fig.layout.height >= 200  # readable, not a blank strip


def test_every_anatomy_figure_of_a_counted_run_has_data_or_says_why(counted):
    for name, fig in viz.anatomy_figures([counted]).items():
        assert fig.data or any(a.text for a in fig.layout.annotations), name
