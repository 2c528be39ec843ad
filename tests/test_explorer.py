"""The chapter 6 explorer: driven from code as a reader drives it, and its static twin."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from conftest import Elements
from posenc import explorer
from posenc.encoding import sinusoidal
from posenc.properties import offset_dot_product

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _heatmap(e: explorer.Explorer) -> np.ndarray:
    return np.asarray(e.figure.axes[0].images[0].get_array())


def _curve(e: explorer.Explorer) -> tuple[np.ndarray, np.ndarray]:
    line = e.figure.axes[1].lines[0]  # axes: heatmap, similarity plot, colorbar
    return np.asarray(line.get_xdata()), np.asarray(line.get_ydata())


def test_the_first_picture_is_the_default_table():
    e = explorer.Explorer()
    assert e.values() == {"d_model": 64, "length": 128, "base": 10000.0, "dtype": "float64"}
    assert np.array_equal(_heatmap(e), sinusoidal(128, 64))
    assert bytes(e.image.value).startswith(PNG_SIGNATURE)
    assert "d_model = 64" in e.readout.value
    assert repr(e) == "Explorer(d_model=64, length=128, base=10000.0, dtype='float64')"


def test_moving_d_model_redraws_the_heatmap():
    e = explorer.Explorer()
    before_png, before_heatmap = e.image.value, _heatmap(e).copy()
    e.controls["d_model"].value = 32
    assert bytes(e.image.value) != bytes(before_png)
    assert _heatmap(e).shape == (128, 32) != before_heatmap.shape
    assert np.array_equal(_heatmap(e), sinusoidal(128, 32))
    assert "d_model = 32" in e.readout.value
    assert e.description == explorer.describe(e.data)


def test_moving_base_redraws_the_similarity_curve():
    e = explorer.Explorer(d_model=16, length=64)
    _, before = _curve(e)
    e.controls["base"].value = 100.0
    offsets, after = _curve(e)
    assert not np.allclose(before, after)
    assert np.array_equal(offsets, np.arange(64) - 32)
    expected = offset_dot_product(offsets, 16, base=100.0) / 8
    np.testing.assert_allclose(after, expected, rtol=0, atol=1e-12)
    assert after[32] == pytest.approx(1.0)
    assert "base = 100," in e.readout.value


def test_moving_length_and_dtype():
    e = explorer.Explorer()
    e.controls["length"].value = 512
    assert _heatmap(e).shape == (512, 64)
    assert _curve(e)[0].shape == (512,)
    e.controls["dtype"].value = "float16"
    assert e.data.table.dtype == np.float16
    assert np.array_equal(_heatmap(e), sinusoidal(512, 64, dtype=np.float16))
    assert 0 < e.data.rounding_error <= 2**-12  # half a float16 step below 1
    assert "rounding to float16 moved entries by at most" in e.readout.value


def test_redrawing_gives_the_same_bytes():
    first, second = explorer.Explorer(d_model=8), explorer.Explorer(d_model=8)
    assert bytes(first.image.value) == bytes(second.image.value)
    second.controls["d_model"].value = 10
    assert bytes(first.image.value) != bytes(second.image.value)
    second.controls["d_model"].value = 8
    assert bytes(first.image.value) == bytes(second.image.value)


def test_the_displayed_bundle_is_the_widget_with_a_short_text():
    bundle = explorer.Explorer()._repr_mimebundle_()
    assert bundle["text/plain"].startswith("Explorer(")
    assert "model_id" in bundle["application/vnd.jupyter.widget-view+json"]


def test_frame_numbers():
    data = explorer.frame(d_model=4, length=64, base=10000.0)
    assert data.reference == 32 and data.length == 64
    assert data.rounding_error == 0.0
    assert data.longest_wavelength == pytest.approx(2 * np.pi * 100)
    rows = data.table
    gaps = [np.linalg.norm(rows[p] - rows[q]) for p in range(64) for q in range(p)]
    assert data.nearest_rows == pytest.approx(min(gaps), rel=1e-9)
    assert np.all(np.abs(data.similarity) <= 1 + 1e-12)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 63}, ValueError, "d_model must be even"),
        ({"d_model": 258}, ValueError, "d_model must be even and at most 256"),
        ({"d_model": 64.0}, TypeError, "d_model must be an integer"),
        ({"length": 8}, ValueError, "length must be at least 16"),
        ({"length": 4096}, ValueError, "length must be at most 1024"),
        ({"base": 2.0}, ValueError, "base must lie in"),
        ({"base": "1e4"}, TypeError, "base must be a real number"),
        ({"dtype": "longdouble"}, TypeError, "dtype must be one of"),
        ({"dtype": int}, TypeError, "dtype must be a floating-point dtype"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        explorer.Explorer(**kwargs)
    with pytest.raises(error, match=match):
        explorer.frame(**kwargs)


@pytest.fixture(scope="module")
def static():
    return explorer.static_explorer(d_models=(8, 16, 64), bases=(100, 10000), length=32)


def test_static_explorer_has_a_picture_for_every_slider_position(static):
    page = Elements(static._repr_html_())
    sliders = [attrs for tag, attrs in page.tags if tag == "input"]
    assert [s["type"] for s in sliders] == ["range", "range"]
    sizes = [int(s["max"]) + 1 for s in sliders]
    assert sizes == [3, 2]
    assert [json.loads(s["data-labels"]) for s in sliders] == [["8", "16", "64"], ["100", "10,000"]]
    (frames,) = [json.loads(text) for attrs, text in page.scripts if attrs.get("type")]
    assert sorted(frames) == [f"{i},{j}" for i in range(3) for j in range(2)]
    alts = {frame["alt"] for frame in frames.values()}
    assert len(alts) == 6, "every picture needs its own description"
    for frame in frames.values():
        header, data = frame["src"].split(",", 1)
        assert header == "data:image/png;base64"
        assert base64.b64decode(data).startswith(PNG_SIGNATURE)


def test_static_explorer_hides_its_controls_until_the_script_runs(static):
    page = Elements(static._repr_html_())
    (controls,) = page.with_class("posenc-controls")
    assert "hidden" in controls, "without JavaScript the sliders would do nothing"
    (code,) = [text for attrs, text in page.scripts if not attrs]
    assert ".hidden = false" in code
    assert static.element_id in code
    # Every slider is labelled, and the page asks nothing of the network.
    labels = {a["for"] for tag, a in page.tags if tag == "label"}
    assert labels == {a["id"] for tag, a in page.tags if tag == "input"}
    for tag, attrs in page.tags:
        for name in ("src", "href"):
            assert attrs.get(name, "data:").startswith("data:"), (tag, attrs[name][:80])
    assert not re.search(r"https?:|//[a-z]", code)


def test_static_explorer_repr_is_short(static):
    assert repr(static) == (
        "StaticExplorer(d_models=(8, 16, 64), bases=(100.0, 10000.0), length=32, 6 pictures)"
    )


def test_static_explorer_is_deterministic(static):
    again = explorer.static_explorer(d_models=(8, 16, 64), bases=(100, 10000), length=32)
    assert again._repr_html_() == static._repr_html_()
    assert again.element_id == static.element_id
    other = explorer.static_explorer(d_models=(8, 16), bases=(100, 10000), length=32)
    assert other.element_id != static.element_id


def test_the_page_element_and_its_description_do_not_depend_on_the_last_bit():
    """The id ignores the pictures' bytes; a minimum reached at +k and -k is named ±k."""
    gallery = explorer.static_explorer(d_models=(16,), bases=(10_000,), length=128)
    frames = {
        key: dict(value, src="data:image/png;base64,AAAA") for key, value in gallery.frames.items()
    }
    assert gallery._replace(frames=frames).element_id == gallery.element_id
    frames = {key: dict(value, alt="other") for key, value in gallery.frames.items()}
    assert gallery._replace(frames=frames).element_id != gallery.element_id
    (frame,) = gallery.frames.values()
    assert "lowest (0.23) at offset ±28." in frame["alt"]
