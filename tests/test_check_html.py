"""The browser check's rule for figure text (tools/check_html.py), on figures made here."""

import io

import pytest

from tools import check_html


def _png(tmp_path, dpi, inches=4.0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(inches, 2))
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)  # no bbox cropping: width = inches * dpi
    plt.close(fig)
    path = tmp_path / f"fig{dpi}.png"
    path.write_bytes(buf.getvalue())
    return path


def test_png_resolution_and_width_are_read_from_the_file(tmp_path):
    width, dpi, text = check_html.png_info(_png(tmp_path, 100).read_bytes())
    assert width == 400 and dpi == pytest.approx(100, abs=0.1)
    assert "Matplotlib" in text["Software"]


@pytest.mark.parametrize("dpi", [72, 100, 200])
def test_matplotlib_text_scales_with_the_rendered_width(tmp_path, dpi):
    path = _png(tmp_path, dpi)
    natural = 4.0 * dpi  # pixels in the PNG
    # At its natural width, 8 pt at `dpi` is 8 * dpi / 72 px; shown at half width, half that.
    assert check_html.figure_text_px(path, natural) == pytest.approx(8 * dpi / 72, rel=1e-3)
    assert check_html.figure_text_px(path, natural / 2) == pytest.approx(4 * dpi / 72, rel=1e-3)
    # A 100-dpi figure of 400 px shown 390 px wide keeps 8 pt legible; at 200 px it does not.
    if dpi == 100:
        assert check_html.figure_text_px(path, 390) >= check_html.MIN_TEXT_PX
        assert check_html.figure_text_px(path, 200) < check_html.MIN_TEXT_PX


def test_svg_text_is_its_smallest_font_size_times_the_scale(tmp_path):
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="600pt" height="100pt" '
        'viewBox="0.00 0.00 600.00 100.00"><g><text font-size="14.00">big</text>'
        '<text style="font-size: 7px">small</text><text font-size="3"> </text></g></svg>'
    )
    path = tmp_path / "d.svg"
    path.write_text(svg)
    assert check_html.svg_min_font(path.read_bytes()) == (7.0, 600.0)  # blank text ignored
    assert check_html.figure_text_px(path, 600) == pytest.approx(7.0)
    assert check_html.figure_text_px(path, 300) == pytest.approx(3.5)
    path.write_text(svg.replace("<text", "<path").replace("</text>", "</path>"))
    assert check_html.figure_text_px(path, 600) is None  # no text to measure: not checked
