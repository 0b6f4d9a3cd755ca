"""Figure builders (stanza_core.viz) and the notebooks' output helpers (stanza_core.nbtools).

Figures are checked through their data (the numbers drawn), not their pictures."""
import json
import math

import pytest

pytest.importorskip("plotly", reason="figures and notebook helpers need plotly (some GPU VM images lack it)")

import plotly.graph_objects as go

from stanza_core import Profile, checks, get_model, nbtools, profile_model, viz
from stanza_core.experiments import anatomy as anatomy_experiment
from stanza_core.reproduce import report
from stanza_core.viz._style import PART_COLORS


@pytest.fixture(scope="module")
def profiles():
    tiny = profile_model(get_model("tiny_cnn"), (3, 32, 32), batch_size=2, name="tiny_cnn")
    timed = profile_model(get_model("cifar_alexnet"), (3, 32, 32), batch_size=2, name="cifar_alexnet",
                          time=True, reps=1)
    return [tiny, timed]


def _bars(fig, **match):
    return [t for t in fig.data if isinstance(t, go.Bar) and all(getattr(t, k) == v for k, v in match.items())]


def test_layer_profile_draws_every_parametric_layer_by_part(profiles):
    p = profiles[0]
    fig = viz.layer_profile(p)
    layers = [r for r in p.layers if r.params or r.flops]
    for part in ("conv", "fc"):
        params_bar, flops_bar = _bars(fig, legendgroup=part)  # one per column of the single row
        rows = [r for r in layers if r.part == part]
        assert list(params_bar.x) == [r.name for r in rows]
        assert list(params_bar.y) == [r.params for r in rows]
        assert list(flops_bar.y) == [r.flops for r in rows]
        assert params_bar.marker.color == PART_COLORS[part]
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type == "log"
    n_conv = sum(r.part == "conv" for r in layers)
    assert [s.x0 for s in fig.layout.shapes] == [n_conv - 0.5] * 2  # the boundary, in both panels
    assert any(f"boundary: {p.boundary} ({p.boundary_values:,} values/sample)" == a.text
               for a in fig.layout.annotations)


def test_one_row_per_model_and_dicts_accepted(profiles):
    fig = viz.layer_profile(profiles)
    assert len(_bars(fig)) == 2 * 2 * len(profiles)  # (params, FLOPs) x (CONV, FC) per model
    from_dicts = viz.layer_profile([p.to_dict() for p in profiles])
    assert from_dicts.to_dict() == fig.to_dict()  # results.json's profiles draw the same figure


def test_part_shares_numbers(profiles):
    fig = viz.part_shares(profiles)
    conv_params, conv_flops, conv_grad = _bars(fig, legendgroup="conv")
    fc_params, fc_flops, fc_grad = _bars(fig, legendgroup="fc")
    for i, p in enumerate(profiles):
        assert fc_params.y[i] == pytest.approx(100 * p.fc_param_share())
        assert conv_params.y[i] + fc_params.y[i] == pytest.approx(100)
        assert fc_flops.y[i] == pytest.approx(100 * p.fc_flop_share())
        assert (conv_grad.y[i], fc_grad.y[i]) == (4 * p.conv.params, 4 * p.fc.params)
    (boundary,) = _bars(fig, name="boundary activation per sample")
    assert list(boundary.y) == [p.boundary_bytes for p in profiles]
    assert fig.layout.yaxis3.type == "log"


def test_part_times(profiles):
    untimed = viz.part_times(profiles[0])
    assert not untimed.data and "time_layers" in untimed.layout.annotations[0].text
    fig = viz.part_times(profiles)  # only the timed profile is drawn
    p = profiles[1]
    fwd, bwd = _bars(fig, name="CONV forward")[0], _bars(fig, name="CONV backward")[0]
    assert list(fwd.x) == ["cifar_alexnet"]
    assert fwd.y[0] == pytest.approx(1e3 * p.conv.fwd_s) and bwd.y[0] == pytest.approx(1e3 * p.conv.bwd_s)
    assert bwd.base[0] == fwd.y[0]  # backward stacked on forward


def test_table_and_figure_set(profiles):
    table = viz.anatomy_table(profiles).data[0]
    cols = dict(zip(table.header.values, table.cells.values))
    assert list(cols["model"]) == ["tiny_cnn", "cifar_alexnet"]
    assert cols["FC params"][1] == f"{profiles[1].fc.params:,}"
    assert set(viz.anatomy_figures(profiles)) == {"table", "layers", "shares", "times"}
    with pytest.raises(ValueError, match="no profiles"):
        viz.part_shares([])


# ---------------------------------------------------------------------------------------------
# nbtools


def test_model_names_checks():
    assert checks.model_names("alexnet, vgg16") == ["alexnet", "vgg16"]  # as papermill -p gives it
    for bad, match in ((["alexnet", "nope"], "unknown model 'nope'"), ([], "non-empty"),
                       (["tiny_cnn", "tiny_cnn"], "twice")):
        with pytest.raises(ValueError, match=match) as e:
            checks.model_names(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="alexnet needs image_size >= 63"):
        checks.model_names(["alexnet"], image_size=32)


def test_profile_models_turns_a_too_small_input_into_one_line():
    with pytest.raises(ValueError, match="tiny_cnn cannot run at image_size=2") as e:
        anatomy_experiment.profile_models(["tiny_cnn"], image_size=2)
    assert "\n" not in str(e.value)


def test_anatomy_results(profiles, tmp_path):
    results = anatomy_experiment.anatomy_results(profiles)
    m = results["models"]["cifar_alexnet"]
    p = profiles[1]
    assert (m["conv_params"], m["fc_params"], m["boundary_values"]) == (p.conv.params, p.fc.params, p.boundary_values)
    assert m["fc_grad_bytes"] == 4 * p.fc.params
    assert m["timing"]["conv_fwd_s"] == p.conv.fwd_s and 0 < m["timing"]["fc_time_share"] < 1
    assert results["models"]["tiny_cnn"]["timing"] is None
    path = nbtools.write_results(results, tmp_path)
    back = json.loads(path.read_text())
    assert Profile.from_dict(back["profiles"]["cifar_alexnet"]) == p
    with pytest.raises(ValueError, match=r"results\.x\.1 is nan"):
        nbtools.write_results({"x": [1.0, math.nan]}, tmp_path)


def test_save_figures_without_a_browser(profiles, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chromium"))
    assert "not an executable" in nbtools.png_unavailable_reason()
    figs = {"b": viz.part_shares(profiles), "a": viz.anatomy_table(profiles)}
    nbtools.save_figures(figs, tmp_path, png=True)
    assert "PNG export skipped" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.png"))
    for key, fig in figs.items():
        assert (tmp_path / f"{key}.html").stat().st_size > 1000
        assert go.Figure(json.loads((tmp_path / f"{key}.plotly.json").read_text())).to_dict() == fig.to_dict()
    assert (tmp_path / "plotly.min.js").is_file()  # beside the HTML: offline, loaded once
    nbtools.save_figures({"c": figs["a"]}, tmp_path, png=False)
    assert json.loads((tmp_path / "figures.json").read_text())["figures"] == ["b", "a", "c"]  # saved order
    # The report reads what nbtools writes.
    assert (report.FIGURE_SUFFIX, report.FIGURES_FILE) == (nbtools.FIGURE_JSON_SUFFIX, nbtools.FIGURES_FILE)


@pytest.mark.browser
def test_save_figures_png(profiles, tmp_path):
    if (reason := nbtools.png_unavailable_reason()) is not None:
        pytest.skip(reason)
    nbtools.save_figures({"shares": viz.part_shares(profiles)}, tmp_path)
    png = (tmp_path / "shares.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(png[16:20], "big")
    assert width == nbtools.PNG_WIDTH


def test_paper_scale_speedups_colour_each_model_alike_in_both_panels():
    by_g = {"10": {"stanza_vs_ps": 3.0, "stanza_vs_ddp": 2.5, "fc_workers": 1},
            "100": {"stanza_vs_ps": 1.5, "stanza_vs_ddp": 1.2, "fc_workers": 2}}
    results = {"paper_scale": {"nodes": 8, "device": "v100", "batch_per_worker": 32,
                               "results": {"alexnet": by_g, "vgg16": by_g}},
               "paper": {"speedup_vs_ps_10gbps": [1.34, 13.9], "alexnet_speedup_vs_ps_100gbps": 1.55,
                         "vgg16_speedup_vs_ps_100gbps": 1.72}}
    fig = viz.paper_scale_speedups(results)
    colours = {}
    for t in fig.data:
        if t.legendgroup in ("alexnet", "vgg16"):
            colours.setdefault(t.legendgroup, set()).add((t.line.color, t.marker.color))
    assert set(colours) == {"alexnet", "vgg16"}
    assert all(len(c) == 1 for c in colours.values())  # the same colour in the left and right panel
    assert colours["alexnet"] != colours["vgg16"]
