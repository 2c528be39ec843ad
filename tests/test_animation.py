"""Chapter 6's clocks: the angles come from the table, and the player needs no kernel."""

from __future__ import annotations

import base64
import math
import re

import ipywidgets as widgets
import numpy as np
import pytest

from posenc import animation
from posenc.encoding import frequencies, sinusoidal

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def frames():
    return animation.clock_frames(8, range(6))


@pytest.mark.parametrize("d_model", [2, 16, 64, 65])
def test_hands_read_back_omega_times_position(d_model):
    positions = np.arange(1000)
    table = sinusoidal(len(positions), d_model)
    expected = np.mod(np.outer(positions, frequencies(d_model)[: d_model // 2]), 2 * math.pi)
    got = animation.hands(table)
    assert got.shape == (len(positions), d_model // 2)
    # Compare on the circle: 2*pi - tiny and tiny are the same hand.
    gap = np.abs(np.angle(np.exp(1j * (got - expected))))
    assert gap.max() < 1e-9
    assert got.min() >= 0 and got.max() < 2 * math.pi


def test_hands_refuse_what_is_not_a_table():
    with pytest.raises(ValueError, match="table"):
        animation.hands(np.zeros(8))
    with pytest.raises(ValueError, match="table"):
        animation.hands(np.zeros((3, 1)))


def test_frames_show_each_position_with_its_angles(frames):
    assert [f.position for f in frames] == list(range(6))
    omegas = frequencies(8)
    for f in frames:
        assert f.image.startswith(PNG_SIGNATURE)
        expected = np.mod(f.position * omegas, 2 * math.pi)
        assert np.allclose(np.exp(1j * f.angles), np.exp(1j * expected), atol=1e-12)
        assert f"row {f.position} " in f.alt
        pair_0 = float(re.search(r"pair 0 at (\d+) degrees", f.alt).group(1))
        assert pair_0 == round(math.degrees(f.angles[0]))
    assert len({f.image for f in frames}) == len(frames), "each position is a new picture"


def test_frames_are_the_same_bytes_every_time(frames):
    again = animation.clock_frames(8, range(6))
    assert [f.image for f in again] == [f.image for f in frames]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 7}, ValueError, "even"),
        ({"d_model": 0}, ValueError, "d_model"),
        ({"d_model": 8.0}, TypeError, "d_model"),
        ({"positions": []}, ValueError, "positions"),
        ({"positions": [-1]}, ValueError, "position"),
        ({"base": 0.0}, ValueError, "base"),
    ],
)
def test_clock_frames_refuse_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        animation.clock_frames(**({"d_model": 8, "positions": [0]} | kwargs))


def _links() -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """Every jslink in the state a notebook stores: ((source id, trait), (target id, trait))."""
    state = widgets.Widget.get_manager_state(drop_defaults=True)["state"]

    def end(pair):
        return (pair[0].removeprefix("IPY_MODEL_"), pair[1])

    return [
        (end(m["state"]["source"]), end(m["state"]["target"]))
        for m in state.values()
        if m["model_name"] == "LinkModel"
    ]


def test_the_player_links_play_slider_and_pictures_in_the_browser(frames):
    box = animation.player(frames, interval_ms=250)
    (controls, stack) = box.children
    play, caption, slider = controls.children
    assert caption.value == "position" and slider.tooltip == "position"
    assert not play.description and not slider.description
    assert isinstance(play, widgets.Play) and isinstance(slider, widgets.IntSlider)
    assert isinstance(stack, widgets.Stack) and len(stack.children) == len(frames)
    assert play.max == slider.max == len(frames) - 1 and play.interval == 250
    links = _links()
    assert ((play.model_id, "value"), (slider.model_id, "value")) in links
    assert ((slider.model_id, "value"), (stack.model_id, "selected_index")) in links
    # No Python callback: moving a control in the browser needs no kernel.
    assert not slider._trait_notifiers.get("value", {}).get("change")


def test_each_picture_is_an_image_with_its_alt_text(frames):
    stack = animation.player(frames).children[1]
    for frame, picture in zip(frames, stack.children, strict=True):
        src = re.search(r'src="data:image/png;base64,([^"]+)"', picture.value).group(1)
        assert base64.b64decode(src) == frame.image
        assert f'alt="{frame.alt}"' in picture.value.replace("&#x27;", "'")


def test_the_player_refuses_no_frames_and_bad_intervals(frames):
    with pytest.raises(ValueError, match="frames"):
        animation.player([])
    with pytest.raises(ValueError, match="interval_ms"):
        animation.player(frames, interval_ms=0)


def test_hands_turn_anticlockwise_from_three_oclock_in_the_cos_sin_plane():
    """A hand is e^{j angle} drawn as (cos, sin): chapter 6's convention."""
    clocks = animation._Clocks(np.array([1.0, 0.5]))
    clocks.draw(0, np.array([0.0, math.pi / 2]))
    (x0, y0), (x1, y1) = [(h.get_xdata()[1], h.get_ydata()[1]) for h in clocks.hands]
    assert (x0, y0) == pytest.approx((1.0, 0.0))  # angle 0: three o'clock
    assert (x1, y1) == pytest.approx((0.0, 1.0), abs=1e-12)  # a quarter turn: twelve
