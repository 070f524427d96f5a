"""The report (xprosql/report.py, `xprosql report`): one offline HTML page with a summary, a table of contents,
a section per profile, interactive Plotly charts and sortable tables, in human units. Headless Chromium
(driven over the DevTools protocol) opens it, checks every chart drew, hovers a bar and reads its tooltip,
follows a contents link, sorts a table and takes screenshots whose coloured pixels the test counts.

Real samples: the TPU v6e, V100 and MI300 XSpace files, the H100 (record_shapes) and AlexNet Kineto traces."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import GPU_SAMPLE, TEST_DATA, TPU_SAMPLE

import xprosql
from xprosql.cli import main
from xprosql.report import Report, _step_figure, build_report

SAMPLES = [TPU_SAMPLE, GPU_SAMPLE, TEST_DATA / "xspace" / "mi300_jax_conv.xplane.pb",
           TEST_DATA / "kineto" / "h100_qwen1.5_0.5b.json.gz", TEST_DATA / "kineto" / "alexnet.json.gz"]


def pixels(png: bytes) -> Any:  # -> numpy array (rows, cols, channels) in 0..1
    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(png), format="png")


def coloured_fraction(png: bytes) -> float:
    """Share of pixels with a clear hue: chart bars and points, not black text on white."""
    rgb = pixels(png)[..., :3]
    return float(((rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.25).mean())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> xprosql.Run:
    root = tmp_path_factory.mktemp("report") / "run"
    report = xprosql.ingest(SAMPLES, into=root)
    assert report.ok, str(report)
    return xprosql.load(root)


def ids(run: xprosql.Run) -> dict[str, str]:
    return dict(run.sql("SELECT regexp_extract(source_path, '[^/]+$'), profile_id FROM profiles").rows())


@pytest.fixture(scope="module")
def report(run: xprosql.Run) -> Report:
    return build_report(run, progress=False)


@pytest.fixture(scope="module")
def page(report: Report, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return report.write(tmp_path_factory.mktemp("page") / "report.html")


def test_html_is_offline_with_summary_toc_and_sections(report: Report, page: Path, run: xprosql.Run) -> None:
    text = page.read_text()
    tags = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", text, flags=re.S)  # the markup, scripts' bodies out
    assert not re.findall(r"<(?:script|link|img|iframe)[^>]*(?:src|href)=", tags)  # nothing loaded: works offline
    assert "Plotly.newPlot" in text and len(re.findall(r"<script>", tags)) == 2  # Plotly inline, the page's script
    assert text.index("id='summary'") < text.index("id='toc'") < text.index("id='profile-")
    names = {p.title.split(" on ")[0] for p in report.profiles}
    assert names == {s.name for s in SAMPLES}
    for p in report.profiles:  # each section is named by file and host, and the contents link to it
        assert f"<h2 id='{p.anchor}'>{p.title}" in text and f"href='#{p.anchor}'" in text
    tpu = next(p for p in report.profiles if p.profile_id == ids(run)[TPU_SAMPLE.name])
    assert tpu.summary is not None and tpu.summary["primary_bottleneck"] == "host_offload_bound"
    share = f"{100 * tpu.summary['primary_share']:.1f}%"
    assert re.search(r"Primary bottleneck: host_offload_bound</b> &mdash; exposed host-offload copies[^<]*: "
                     + re.escape(share) + " of device time", text)
    visible = re.sub(r"<script.*?</script>", "", text, flags=re.S)
    assert not re.search(r"\bNone\b|\bnan\b|e-0\d GB", visible)  # no None, no 8.112e-05 GB
    assert re.search(r"\d ms<", visible) and re.search(r"\d (k|M|G)?B/s<", visible)


def test_every_profile_has_its_charts_or_says_why(report: Report, run: xprosql.Run) -> None:
    by_name = {Path(p.info["source_path"]).name: p for p in report.profiles}
    tpu, v100, mi300, h100, alexnet = (by_name[s.name] for s in SAMPLES)
    assert set(tpu.charts) == {"steps", "timeline", "roofline", "async", "memory"}
    for p in report.profiles:
        assert {"steps", "timeline"} <= set(p.charts), p.title
        assert "roofline" in p.charts or any(n.startswith("No roofline chart:") for n in p.notes), p.title
        assert "memory" in p.charts or any(n.startswith("No memory timeline: it needs allocator events") for n in p.notes), p.title
    assert "roofline" in h100.charts and "roofline" in tpu.charts
    assert any("record_shapes" in n for n in alexnet.notes)
    # the memory part: the MI300 allocators' timelines, their peaks and what each peak holds
    assert "memory" in mi300.charts and not mi300.memory_peaks.is_empty()
    peaks = run.memory_peaks(profiles=[mi300.profile_id]).pl()
    contents = mi300.peak_contents
    for allocator, peak in peaks.select("allocator", "peak_in_use_bytes").iter_rows():
        held = contents.filter(contents["allocator"] == allocator)["bytes"].sum()
        assert 0 < held <= peak, allocator  # the top blocks alive at the peak, never more than the peak
    for p in report.profiles:  # memory in a unit that fits it: the highest value between 1 and 1000 of that unit
        if "memory" in p.charts:
            values = [v for trace in p.charts["memory"]["data"] for v in trace["y"] if v is not None]
            assert 1 <= max(values) < 1000 and p.charts["memory"]["layout"]["yaxis"]["title"]["text"] in ("GB", "MB", "kB", "B")
    # the step chart puts each step's time on a log axis, ticks in human times, when one step dwarfs the others (a
    # whole-profile step of 130 times the V100's first beside its steps), the categories as shares below it
    first = v100.steps.head(1)
    dwarfing = first.with_columns([pl.col(c) * 130 for c in first.columns if c.endswith("_ps") and first[c].dtype.is_numeric()]
                                  + [pl.lit(-1).cast(first["step_index"].dtype).alias("step_index")])
    layout = _step_figure(pl.concat([dwarfing, v100.steps]), 40)["layout"]
    assert layout["yaxis2"]["type"] == "log" and all(re.fullmatch(r"[\d.]+ (s|ms|us)", t) for t in layout["yaxis2"]["ticktext"])
    shares = [trace["y"] for trace in v100.charts["steps"]["data"][1:]]
    assert all(abs(sum(column) - 100) < 0.01 for column in zip(*shares))


@pytest.mark.slow
def test_fleet_summary_sections_the_worst(run: xprosql.Run, tmp_path: Path) -> None:
    report = build_report(run, progress=False, sections=2)
    assert len(report.profiles) == 2 and report.fleet.height == len(SAMPLES)
    worst_idle = report.fleet.sort("idle_share", descending=True, nulls_last=True)["profile_id"][0]
    assert worst_idle in {p.profile_id for p in report.profiles}
    text = report.write(tmp_path / "fleet.html").read_text()
    assert "sections for the 2 worst" in text and "Worst profiles by idle share" in text
    linked = set(re.findall(r"href='#profile-([0-9a-f]+)'", text))
    assert linked == {p.profile_id for p in report.profiles}  # links only where a section is


def test_a_failing_analysis_is_named(run: xprosql.Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Not a real failure (none of the samples makes one): the roofline replaced by one that raises."""
    def broken(**_: object) -> None:
        raise xprosql.QueryError("query: no peaks table")
    monkeypatch.setattr(run, "roofline", broken)
    report = build_report(run, profiles=[ids(run)[TPU_SAMPLE.name]], progress=False)
    assert report.notes == ["roofline failed, so its part is left out: query: no peaks table"]
    assert "roofline failed" in report.write(tmp_path / "r.html").read_text()


@pytest.mark.slow
def test_cli_report(run: xprosql.Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tpu = ids(run)[TPU_SAMPLE.name]
    assert main(["report", str(run.path), "--profile", tpu]) == 0
    out = capsys.readouterr().out
    assert "primary bottleneck: host_offload_bound: 77.5% of device time" in out and "async host_offload" in out
    assert "exposed host-offload copies" in out and out.count("profile ") == 1
    assert main(["report", str(run.path), "--out", str(tmp_path / "r.html"), "--no-progress", "--sections", "3"]) == 0
    assert "3 profile sections" in capsys.readouterr().out
    assert (tmp_path / "r.html").stat().st_size > 1_000_000  # Plotly's script is inside


# -- a plain install: plotly is a dependency, the report needs no extra, a missing chart library is said first ----

OPTIONAL_EXTRAS = ("matplotlib", "pandas", "dask", "jax", "torch", "kaleido", "dask_deltatable")


def xprosql_without(blocked: Sequence[str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a process where importing any of ``blocked`` fails, as where they are not installed."""
    code = ("import sys\n"
            "class Block:\n"
            "    @staticmethod\n"
            "    def find_spec(name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {tuple(blocked)!r}:\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Block)\n"
            "from xprosql.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`xprosql demo` then `xprosql report <its warehouse> --out r.html`, with every optional extra unimportable."""
    folder = tmp_path_factory.mktemp("plain")
    demo = xprosql_without(OPTIONAL_EXTRAS, "demo", cwd=folder)
    assert demo.returncode == 0, demo.stderr
    done = xprosql_without(OPTIONAL_EXTRAS, "report", "xprosql-demo", "--out", "r.html", "--no-progress", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert re.match(r"wrote r\.html: 1 profiles, 1 profile sections, [1-9]\d* charts", done.stdout), done.stdout
    return folder / "r.html"


@pytest.mark.slow
def test_plotly_is_a_plain_dependency_and_the_report_needs_no_extra(demo_page: Path) -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert any(re.match(r"plotly\b", d) for d in project["dependencies"])
    assert not any(re.match(r"plotly\b", d) for d in project["optional-dependencies"]["plot"])
    text = demo_page.read_text()
    assert "Plotly.newPlot" in text and "window.Plotly = undefined" not in text
    assert len(re.findall(r"<div class='chart'", text)) >= 4  # the demo's steps, timeline, roofline, async, memory


def test_report_without_plotly_says_what_to_install_and_writes_nothing(run: xprosql.Run, tmp_path: Path) -> None:
    done = xprosql_without(("plotly",), "report", str(run.path), "--out", str(tmp_path / "r.html"), "--no-progress")
    assert done.returncode == 2 and done.stdout == ""
    assert re.fullmatch(r"error: [^\n]*plotly[^\n]*pip install[^\n]*\n", done.stderr), done.stderr
    assert not (tmp_path / "r.html").exists()


def test_roofline_checks_its_chart_library_before_any_work(run: xprosql.Run, tmp_path: Path) -> None:
    tpu = ids(run)[TPU_SAMPLE.name]
    png = xprosql_without(("matplotlib",), "roofline", str(run.path), "--profile", tpu, "--out", str(tmp_path / "c.png"))
    assert png.returncode == 2 and png.stdout == ""  # no table printed before the failure
    assert re.fullmatch(r"error: [^\n]*matplotlib: pip install 'xprosql\[plot\]'[^\n]*\n", png.stderr), png.stderr
    assert not (tmp_path / "c.png").exists()
    # an .html chart is drawn with plotly, which the plain install has
    page = xprosql_without(("matplotlib",), "roofline", str(run.path), "--profile", tpu, "--out", str(tmp_path / "c.html"))
    assert page.returncode == 0, page.stderr
    text = (tmp_path / "c.html").read_text()
    assert "Plotly.newPlot" in text and "id='fig-roofline'" in text and "broadcast_add_fusion" in text


def test_axes_are_in_human_units_and_points_are_labelled(report: Report) -> None:
    """What the figures ask of Plotly: no SI-suffixed ticks anywhere, log axes labelled in units, a single step on an
    axis from 0 (not a flat one), labelled roofline and memory-peak points."""
    for p in report.profiles:
        for name, figure in p.charts.items():
            for key, axis in figure["layout"].items():
                if key.startswith(("xaxis", "yaxis")):
                    assert axis.get("exponentformat") == "none", (p.title, name, key)
                    if axis.get("type") == "log":
                        assert axis["ticktext"] and all(re.search(r"\d", t) for t in axis["ticktext"]), (p.title, name, key)
        if p.steps.height == 1:
            assert p.charts["steps"]["layout"]["yaxis2"]["range"][0] == 0, p.title
        if "roofline" in p.charts:
            ticks = p.charts["roofline"]["layout"]["yaxis"]["ticktext"]
            assert all(re.fullmatch(r"[\d.,]+ [kMGTP]?FLOP/s", t) for t in ticks), ticks
            assert any(t for trace in p.charts["roofline"]["data"] if trace["mode"] == "markers+text" for t in trace["text"])
        if "memory" in p.charts:
            peak = next(t for t in p.charts["memory"]["data"] if t["name"] == "peak")
            assert any(re.search(r": [\d.]+ [kMG]?B$", t) for t in peak["text"]), peak["text"]


# -- the browser test -----------------------------------------------------------------------------------------

class Chromium:
    """Headless Chromium over the DevTools protocol (websocket-client): navigate, evaluate, mouse, screenshots."""

    def __init__(self, binary: str, profile: Path, width: int = 1280, height: int = 900) -> None:
        import websocket

        self.process = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
             "--remote-allow-origins=*", "--remote-debugging-port=0", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = None
        deadline = time.monotonic() + 60
        assert self.process.stderr is not None
        while port is None and time.monotonic() < deadline:
            line = self.process.stderr.readline()
            found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            port = found and int(found.group(1))
            assert line or self.process.poll() is None, "chromium exited"
        assert port, "chromium did not open its DevTools port"
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        self.socket = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self.next_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]  # type: ignore[no-any-return]

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait(self, expression: str, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {expression}")

    def mouse(self, kind: str, x: float, y: float) -> None:
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left" if kind != "mouseMoved" else "none",
                  clickCount=1 if kind != "mouseMoved" else 0)

    def screenshot(self, clip: dict[str, float] | None = None) -> bytes:
        params: dict[str, Any] = {"format": "png"}
        if clip:
            params["clip"] = {**clip, "scale": 1}
            params["captureBeyondViewport"] = True
        return base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()
        self.process.wait(timeout=20)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    pytest.importorskip("websocket", reason="the browser test drives Chromium with websocket-client (test extra)")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("chromium is not installed (Debian package chromium; .ci/run installs it)")
    chromium = Chromium(binary, tmp_path_factory.mktemp("chromium"))
    yield chromium
    chromium.close()


RAW_SI = re.compile(r"^[-−]?[\d.,]+[kMGTPEµμmunpf]$")  # Plotly's own tick labels: 43.4595k, 100µ, 5k


def check_drawn_layout(browser: Chromium, chart: str) -> None:
    """What a reader sees of a drawn chart: tick labels in human units (never 43.4595k or 100µ), no flat axis (ticks
    that differ in their 4th digit), no blank band under it, a timeline's lines filling most of it, named points."""
    seen = browser.js(f"""(() => {{ const div = document.getElementById('{chart}'); const box = div.getBoundingClientRect();
        const ticks = {{}};
        div.querySelectorAll('.xaxislayer-above > g, .yaxislayer-above > g').forEach(g => {{
          (ticks[g.getAttribute('class')] = ticks[g.getAttribute('class')] || []).push(g.textContent); }});
        const drawn = Array.from(div.querySelectorAll('.cartesianlayer, .xaxislayer-above, .infolayer [class*=xtitle]'))
          .map(e => e.getBoundingClientRect().bottom);
        const plots = Array.from(div.querySelectorAll('.draglayer .nsewdrag')).map(e => e.getBoundingClientRect().height);
        const labels = Array.from(div.querySelectorAll('.scatterlayer .textpoint text')).map(t => t.textContent).filter(t => t);
        return {{ticks, blank: box.bottom - Math.max(...drawn), plot: plots.reduce((a, b) => a + b, 0) / box.height, labels}}; }})()""")
    for axis, labels in seen["ticks"].items():
        assert not [t for t in labels if RAW_SI.match(t)], (chart, axis, labels)
        numbers = [float(t.replace(",", "")) for t in labels if re.fullmatch(r"-?[\d.,]+", t)]
        if len(numbers) > 1:
            assert max(numbers) - min(numbers) > 0.1 * max(abs(v) for v in numbers), (chart, axis, labels)
    assert seen["blank"] < 40, (chart, seen["blank"])  # the div is as tall as the figure
    if "-timeline-" in chart:
        assert seen["plot"] > 0.35, (chart, seen["plot"])  # the event lines, not margins and gaps
    if chart == "fig-fleet" or "-roofline-" in chart:
        assert seen["labels"], chart  # points are named on the chart, not only in tooltips


def test_chromium_draws_every_chart_shows_tooltips_and_follows_links(browser: Chromium, page: Path, report: Report,
                                                                      tmp_path: Path) -> None:
    browser.call("Page.enable")
    browser.call("Page.navigate", url=page.as_uri())
    browser.wait("document.readyState === 'complete' && !!window.Plotly")
    top = browser.screenshot()
    (tmp_path / "top.png").write_bytes(top)
    assert pixels(top).shape[1] >= 1200 and coloured_fraction(top) > 0.0  # the summary's chart or links are coloured

    charts = browser.js("Array.from(document.querySelectorAll('div.chart')).map(d => d.id)")
    assert len(charts) == 1 + sum(len(p.charts) for p in report.profiles)  # the fleet chart and every profile's
    for chart in charts:  # each draws when scrolled to: an SVG with marks, and colour in its screenshot
        browser.js(f"document.getElementById('{chart}').scrollIntoView({{block: 'center'}})")
        browser.wait(f"document.getElementById('{chart}').dataset.rendered === '1'")
        marks = browser.js(f"document.getElementById('{chart}').querySelectorAll('.barlayer path, .scatterlayer path').length")
        assert marks > 0, chart
        box = browser.js(f"(() => {{ const r = document.getElementById('{chart}').getBoundingClientRect(); "
                         "return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; })()")
        shot = browser.screenshot(box)
        (tmp_path / f"{chart}.png").write_bytes(shot)
        assert coloured_fraction(shot) * pixels(shot)[..., 0].size > 100, chart  # a few markers at least, in colour
        check_drawn_layout(browser, chart)

    # hover the tallest bar of the first step chart: Plotly's tooltip names the step and a time with its unit
    steps = next(c for c in charts if c.startswith("fig-steps-"))
    browser.js(f"document.getElementById('{steps}').scrollIntoView({{block: 'center'}})")
    time.sleep(0.3)
    x, y = browser.js(f"(() => {{ const bars = document.getElementById('{steps}').querySelectorAll('.barlayer .point path'); "
                      "const r = Array.from(bars).map(b => b.getBoundingClientRect()).sort((a, b) => b.height - a.height)[0]; "
                      "return [r.left + r.width / 2, r.top + r.height / 2]; })()")  # the tallest bar
    browser.mouse("mouseMoved", x - 1, y - 1)
    browser.mouse("mouseMoved", x, y)
    tip = browser.wait(f"document.getElementById('{steps}').querySelector('.hoverlayer .hovertext')?.textContent")
    assert re.search(r"step \d+.*[\d.]+ (s|ms|us)", tip), tip
    (tmp_path / "tooltip.png").write_bytes(browser.screenshot())

    # follow the contents' link to the last profile: the page scrolls its heading to the top
    browser.js("window.scrollTo(0, 0)")
    time.sleep(0.2)
    href, x, y = browser.js("(() => { const links = document.querySelectorAll('#toc a[href^=\"#profile-\"]'); "
                            "const a = links[links.length - 1]; a.scrollIntoView({block: 'center'}); const r = a.getBoundingClientRect(); "
                            "return [a.getAttribute('href'), r.left + 5, r.top + r.height / 2]; })()")
    browser.mouse("mousePressed", x, y)
    browser.mouse("mouseReleased", x, y)
    browser.wait(f"location.hash === '{href}'")
    heading_top = browser.wait(f"(() => {{ const t = document.getElementById('{href[1:]}').getBoundingClientRect().top; "
                               "return Math.abs(t) < 60 ? t + 1000 : 0; })()")
    assert heading_top
    landed = browser.screenshot()
    (tmp_path / "landed.png").write_bytes(landed)
    assert coloured_fraction(landed) > 0.0

    # a header click sorts its table by the column's values (numbers by number)
    order = browser.js("""(() => { const table = document.querySelectorAll('#summary table.sortable');
        const t = table[table.length - 1]; const th = t.querySelectorAll('th')[5]; th.click(); th.click();
        return Array.from(t.tBodies[0].rows).map(r => parseFloat(r.cells[5].dataset.v)).filter(v => !isNaN(v)); })()""")
    assert len(order) >= 3 and order == sorted(order)


def test_chromium_draws_the_demo_report_of_a_plain_install(browser: Chromium, demo_page: Path, tmp_path: Path) -> None:
    """`pip install .` (no extras), `xprosql demo`, `xprosql report xprosql-demo --out r.html`: every chart draws."""
    browser.call("Page.navigate", url=demo_page.as_uri())
    browser.wait("document.readyState === 'complete' && !!window.Plotly")
    charts = browser.js("Array.from(document.querySelectorAll('div.chart')).map(d => d.id)")
    assert len(charts) >= 4
    for chart in charts:
        browser.js(f"document.getElementById('{chart}').scrollIntoView({{block: 'center'}})")
        browser.wait(f"document.getElementById('{chart}').dataset.rendered === '1'")
        assert browser.js(f"document.getElementById('{chart}').querySelectorAll('.barlayer path, .scatterlayer path').length") > 0
        check_drawn_layout(browser, chart)
    (tmp_path / "demo.png").write_bytes(browser.screenshot())
