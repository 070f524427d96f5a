"""The report (xprosql/report.py, `xprosql report`): charts are real images, the HTML
names the TPU sample's bottleneck, and headless Chromium shows the charts."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import TPU_SAMPLE

import xprosql
from xprosql.cli import main
from xprosql.report import Report, build_report

pytest.importorskip("matplotlib", reason="the report's charts need matplotlib (plot extra)")


def pixels(png: bytes):  # -> numpy array (rows, cols, channels) in 0..1
    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(png), format="png")


def coloured_fraction(png: bytes) -> float:
    """Share of pixels with a clear hue: chart bars and points, not black text on white."""
    rgb = pixels(png)[..., :3]
    return float(((rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.25).mean())


@pytest.fixture(scope="module")
def tpu_report(xspace_warehouse: Path) -> tuple[xprosql.Run, Report]:
    run = xprosql.load(xspace_warehouse)
    pid = run.sql("SELECT profile_id FROM profiles WHERE source_path LIKE $p", {"p": f"%{TPU_SAMPLE.name}"}).rows()[0][0]
    return run, build_report(run, profiles=[pid], progress=False)


def test_charts_are_not_blank(tpu_report: tuple[xprosql.Run, Report]) -> None:
    _, report = tpu_report
    charts = report.profiles[0].charts
    assert set(charts) == {"steps", "async", "roofline"}
    for name, png in charts.items():
        assert png[:8] == b"\x89PNG\r\n\x1a\n", name
        image = pixels(png)
        assert image.shape[0] > 200 and image.shape[1] > 400, name
        assert image[..., :3].std() > 0.05, name  # not one flat colour
        assert (image[..., :3].min(axis=-1) < 0.9).mean() > 0.02, name  # ink: lines, bars, text
    # bars in the colours of their categories, more than axes and text
    assert coloured_fraction(charts["steps"]) > 0.05 and coloured_fraction(charts["async"]) > 0.05


def test_html_names_the_bottleneck(tpu_report: tuple[xprosql.Run, Report], tmp_path: Path) -> None:
    _, report = tpu_report
    summary = report.profiles[0].summary
    assert summary is not None and summary["primary_bottleneck"] == "host_offload_bound"
    path = report.write(tmp_path / "report.html")
    text = path.read_text()
    share = f"{100 * summary['primary_share']:.1f}%"
    assert re.search(r"Primary bottleneck: host_offload_bound</b> &mdash; exposed host-offload copies[^<]*: "
                     + re.escape(share) + " of device time", text)
    assert text.count("<img class='chart'") == 3 and "data:image/png;base64," in text
    assert "exposed host offload" in text and "host_offload" in text and "from_host" in text


def test_cli_report(xspace_warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(xspace_warehouse)]) == 0
    out = capsys.readouterr().out
    assert "primary bottleneck: host_offload_bound: 77.5% of device time" in out and "async host_offload" in out
    assert "exposed host-offload copies" in out
    assert "primary bottleneck:" in out.split("profile ")[1] and out.count("\nprofile ") + out.startswith("profile ") == 2
    assert main(["report", str(xspace_warehouse), "--out", str(tmp_path / "r.html"), "--no-progress"]) == 0
    assert (tmp_path / "r.html").stat().st_size > 50_000


def _screenshot(chromium: str, page: Path, out: Path, profile_dir: Path) -> bytes:
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile_dir}",
         "--hide-scrollbars", "--window-size=1280,2600", f"--screenshot={out}", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    return out.read_bytes()


def test_chromium_shows_the_charts(tpu_report: tuple[xprosql.Run, Report], tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian package chromium; .ci/run installs it)")
    _, report = tpu_report
    page = report.write(tmp_path / "report.html")
    # The same page with every chart's image data taken out: what remains is text and tables.
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r"src='data:image/png;base64,[^']*'", "src=''", page.read_text()))
    with_charts = _screenshot(chromium, page, tmp_path / "shot.png", tmp_path / "chrome-a")
    without = _screenshot(chromium, bare, tmp_path / "bare.png", tmp_path / "chrome-b")
    shot = pixels(with_charts)
    assert shot.shape[0] >= 2000 and shot.shape[1] >= 1200
    # The charts are what colours the page: stacked bars, async bars, roofline points.
    assert coloured_fraction(with_charts) > 0.04
    assert coloured_fraction(with_charts) > 5 * coloured_fraction(without)
    # the step chart (first image) sits in the top half: its red host-offload bars are there
    top = pixels(with_charts)[: shot.shape[0] // 2, :, :3]
    red = (top[..., 0] > 0.7) & (top[..., 1] < 0.3) & (top[..., 2] < 0.3)
    assert red.mean() > 0.01


def test_gpu_rooflines_of_pytorch_traces_have_points_or_say_why(samples_warehouse: Path) -> None:
    run = xprosql.load(samples_warehouse)
    ids = dict(run.sql("SELECT regexp_extract(source_path, '[^/]+$'), profile_id FROM profiles WHERE format = 'kineto'").rows())
    with_shapes, without = ids["h100_qwen1.5_0.5b.json.gz"], ids["alexnet.json.gz"]
    report = build_report(run, profiles=[with_shapes, without], progress=False)
    drawn, explained = (next(p for p in report.profiles if p.profile_id == pid) for pid in (with_shapes, without))
    assert "roofline" in drawn.charts
    # Roofline points are coloured by bound_by: compute red, HBM blue (queries/roofline.py).
    rgb = pixels(drawn.charts["roofline"])[..., :3]
    red = (rgb[..., 0] > 0.6) & (rgb[..., 1] < 0.4) & (rgb[..., 2] < 0.4)
    blue = (rgb[..., 2] > 0.5) & (rgb[..., 0] < 0.4)
    assert red.mean() > 0.0005 and blue.mean() > 0.0005 and (red | blue).mean() > 0.002
    assert "roofline" not in explained.charts
    assert any("No roofline chart" in note and "record_shapes" in note for note in explained.notes), explained.notes
