"""Reports people can look at: one interactive, self-contained HTML page, or a terminal summary.

The page works offline: Plotly's script is embedded once (from the ``plotly`` package, a dependency of
the plain install: Plotly because its one file brings hover tooltips, zoom and pan to every chart with
no other asset, which Vega-Lite needs three scripts and a compiler for), tables sort by a click on their
header, and every number carries its unit (ms, GB, GB/s, TFLOP/s), axes included: an axis is in the
unit its values fit (``_time_axis``), or its ticks are labelled in human units (``_log_axis``).

Layout: the summary first (for several profiles: the worst by idle share and by step time, and the
jobs of a ``job`` tag, with links), a table of contents, then one section per profile, named by file
and host: the primary bottleneck with the numbers behind it, the step breakdown (each step's time on
a log axis above its categories as shares, so a 2 s step does not flatten 20 ms ones), the busiest
step of each device as a small timeline, the top ops, the roofline, the async summary, the memory
timeline per allocator and what the peak holds. A chart without data is replaced by the reason
(what the analysis needs, from its ``-- Needs:`` line). With more than ``sections`` profiles, the
summary table lists every profile and only the worst ``sections`` get a section (said on the page):
what keeps 1,000 profiles' page small and quick.

Example:
    >>> import xprosql
    >>> from xprosql.report import build_report, terminal_summary
    >>> run = xprosql.load("run/")                                       # doctest: +SKIP
    >>> print(terminal_summary(run))                                      # doctest: +SKIP
    >>> build_report(run).write("report.html")                            # doctest: +SKIP
"""

from __future__ import annotations

import html
import itertools
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import polars as pl

from xprosql.engine.connection import query, snapshot_connection
from xprosql.queries.bottlenecks import BOTTLENECK_CATEGORIES

if TYPE_CHECKING:
    from xprosql.run import Run

__all__ = [
    "CATEGORY_COLORS",
    "ProfileReport",
    "Report",
    "build_report",
    "plotly_js",
    "roofline_page",
    "terminal_summary",
]

# One colour per bottleneck category (tab10-like, colour-blind friendly order).
CATEGORY_COLORS: dict[str, str] = {
    "compute_bound": "#1f77b4",
    "memory_bound": "#ff7f0e",
    "other_compute": "#17becf",
    "exposed_collective": "#9467bd",
    "exposed_host_offload": "#d62728",
    "exposed_dma": "#e377c2",
    "launch_overhead": "#bcbd22",
    "input_wait": "#8c564b",
    "host_wait": "#2ca02c",
    "idle": "#7f7f7f",
}
_LABELS = {
    "compute_bound": "compute-bound ops",
    "memory_bound": "memory-bound ops",
    "other_compute": "ops without cost data",
    "exposed_collective": "exposed collectives",
    "exposed_host_offload": "exposed host offload",
    "exposed_dma": "exposed DMA",
    "launch_overhead": "launch overhead",
    "input_wait": "input wait",
    "host_wait": "host wait",
    "idle": "idle",
}
# What each primary bottleneck label means, for people.
_MEANING = {
    "compute_bound": "compute-bound ops take the most time",
    "memory_bound": "memory-bound ops take the most time",
    "device_compute": "ops without cost data take the most time",
    "collective_bound": "exposed collectives: communication no compute hides",
    "host_offload_bound": "exposed host-offload copies: transfers to and from host memory (S(5)) no compute hides",
    "data_transfer_bound": "exposed DMA copies no compute hides",
    "input_bound": "the device waits for input",
    "launch_bound": "the device waits for kernels already launched (launch overhead)",
    "host_bound": "the device waits for the host to issue work",
    "idle": "the device is idle",
}
_DASH = "\u2013"  # what an unknown value shows as: never "None"
_TIMELINE_EVENTS = 400  # longest events kept per device in the busiest-step timeline
_TIMELINE_DEVICES = 4


# -- human units ------------------------------------------------------------------------------------------

def _seconds(ps: float | None) -> str:
    """Picoseconds as a short human time: 98.15 s, 19.87 ms, 2.5 us."""
    if ps is None:
        return _DASH
    value = float(ps)
    for unit, scale in (("s", 1e12), ("ms", 1e9), ("us", 1e6)):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value / 1e3:.4g} ns"


def _scaled(value: float | None, unit: str, steps: Sequence[tuple[str, float]]) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return _DASH
    for prefix, scale in steps:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


_SI = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def _bytes(value: float | None) -> str:
    """Bytes as 1.23 GB, 512 kB, 40 B (decimal units, as the rates)."""
    return _scaled(value, "B", _SI)


def _rate(bytes_per_s: float | None) -> str:
    return _scaled(bytes_per_s, "B/s", _SI)


def _flops(flop_per_s: float | None) -> str:
    return _scaled(flop_per_s, "FLOP/s", _SI)


def _plain(value: float) -> str:
    """A number as people write it on an axis: 0.01, 5, 1,000 (never Plotly's SI suffixes 10k or 100µ)."""
    return format(value, ",.6g")


_TIME_UNITS = (("s", 1e12), ("ms", 1e9), ("us", 1e6), ("ns", 1e3))
# Plotly's default tick labels are SI-suffixed (43.4595k, 100µ): axes say their unit in the title instead.
_NO_SI: dict[str, Any] = {"exponentformat": "none", "separatethousands": True}


def _time_unit(highest_ps: float) -> tuple[str, float]:
    """The unit in which the largest of some picosecond values reads between 1 and 1000: (name, ps per unit)."""
    return next(((u, f) for u, f in _TIME_UNITS if abs(highest_ps) >= f), ("ns", 1e3))


def _time_axis(highest_ps: float, title: str, **extra: Any) -> tuple[float, dict[str, Any]]:
    """A linear time axis from 0 in the unit its largest value fits (``title`` gets the unit): the scale (ps per
    unit) to divide values by and the axis. From 0 so that equal steps do not give a flat axis of 43.4595k."""
    unit, scale = _time_unit(highest_ps)
    top = (highest_ps / scale) or 1.0
    axis = {"title": {"text": f"{title} ({unit})"}, "range": [0, top], "rangemode": "tozero", **_NO_SI, **extra}
    return scale, axis



def _log_axis(values: Sequence[float], label: Callable[[float], str], **extra: Any) -> dict[str, Any]:
    """A log axis over ``values`` (> 0) whose ticks are decades (with 2 and 5 when it spans under two decades)
    labelled by ``label`` in human units: 10 ms, 1 s; 100 MFLOP/s, 1 TFLOP/s."""
    positive = [v for v in values if v and v > 0]
    if not positive:
        return {"type": "log", **_NO_SI, **extra}
    low, high = math.log10(min(positive)), math.log10(max(positive))
    pad = max(0.15, 0.05 * (high - low))
    first, last = math.floor(low - pad), math.ceil(high + pad)
    steps = (1, 2, 5) if last - first <= 2 else (1,)
    ticks = [m * 10.0**k for k in range(first, last + 1) for m in steps if low - pad <= math.log10(m * 10.0**k) <= high + pad]
    return {"type": "log", "range": [low - pad, high + pad], "tickvals": ticks, "ticktext": [label(t) for t in ticks],
            **_NO_SI, **extra}


def _pct(share: float | None) -> str:
    return _DASH if share is None else f"{100 * share:.1f}%"


def _count(value: int | float | None) -> str:
    return _DASH if value is None else f"{value:,}"


def _text(value: Any) -> str:
    return _DASH if value is None or value == "" else str(value)


# -- what the report holds ----------------------------------------------------------------------------------

@dataclass
class ProfileReport:
    """What the report says about one profile: tables, Plotly figures (``charts``: name -> figure) and notes."""

    profile_id: str
    info: dict[str, Any]
    summary: dict[str, Any] | None
    steps: pl.DataFrame
    top_ops: pl.DataFrame
    async_summary: pl.DataFrame
    memory_peaks: pl.DataFrame = field(default_factory=pl.DataFrame)
    peak_contents: pl.DataFrame = field(default_factory=pl.DataFrame)
    findings: pl.DataFrame = field(default_factory=pl.DataFrame)  # diagnose's rows, the largest saving first
    charts: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        """The file's name and its host."""
        name = Path(str(self.info.get("source_path") or self.profile_id)).name
        host = self.info.get("host")
        return f"{name} on {host}" if host and host not in name else name

    @property
    def anchor(self) -> str:
        return f"profile-{self.profile_id}"


@dataclass
class Report:
    """A built report: :meth:`html` renders it, :meth:`write` saves it."""

    title: str
    profiles: list[ProfileReport]
    fleet: pl.DataFrame = field(default_factory=pl.DataFrame)  # every profile's headline numbers
    notes: list[str] = field(default_factory=list)
    findings: pl.DataFrame = field(default_factory=pl.DataFrame)  # diagnose over every profile reported

    def html(self) -> str:
        """The report as one self-contained HTML page (Plotly's script inline, no network)."""
        script = plotly_js()  # first: without plotly, nothing is built and no page of blank charts is written
        figures: list[tuple[str, dict[str, Any]]] = []
        body = [f"<h1>{html.escape(self.title)}</h1>", self._findings_html(), self._summary_html(figures), self._toc_html()]
        body += [_profile_html(p, figures) for p in self.profiles]
        data = "".join(f"<script type='application/json' id='{fid}-data'>{_json(fig)}</script>" for fid, fig in figures)
        return (_HEAD.format(title=html.escape(self.title)) + "\n".join(body) + data
                + f"<script>{script}</script><script>{_PAGE_JS}</script></body></html>")

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`html` to ``path``; returns the path."""
        out = Path(path)
        out.write_text(self.html(), encoding="utf-8")
        return out

    def _toc_html(self) -> str:
        items = "".join(f"<li><a href='#{p.anchor}'>{html.escape(p.title)}</a>"
                        + (f" <span class='meta'>{html.escape(p.summary['primary_bottleneck'])}</span>" if p.summary else "")
                        + "</li>" for p in self.profiles)
        return ("<nav id='toc'><h2>Contents</h2><ol><li><a href='#findings'>Findings</a></li>"
                f"<li><a href='#summary'>Summary</a></li>{items}</ol></nav>")

    def _findings_html(self, most: int = 25) -> str:
        """Every profile's findings, the largest saving first, each linked to its evidence in its profile's section."""
        out = ["<section id='findings'><h2>Findings</h2>"]
        if self.findings.is_empty():
            out.append("<p class='meta'>No rule of xprosql diagnose fired at its thresholds (xprosql analyses lists the "
                       "diagnose.* rules and their thresholds).</p>")
            return "\n".join([*out, "</section>"])
        sectioned = {p.profile_id: p for p in self.profiles}
        out.append(f"<p class='meta'>{self.findings.height} findings (xprosql diagnose), the largest expected saving first"
                   f"{f'; the first {most} here' if self.findings.height > most else ''}. Savings are of the profile's step "
                   "time, each for its own fix: they overlap and do not add up.</p>")
        rows = []
        for row in self.findings.head(most).iter_rows(named=True):
            profile = sectioned.get(row["profile_id"])
            name = html.escape(profile.title if profile else row["profile_id"])
            where = f"<a href='#{_finding_anchor(row)}'>{name}</a>" if profile else name
            rows.append(f"<tr><td class='sev-{row['severity']}'>{row['severity']}</td><td>{html.escape(row['rule'])}</td>"
                        f"<td>{where}</td><td>{html.escape(row['title'])}</td><td>{_seconds(row['expected_saving_ps'])}</td>"
                        f"<td>{_pct(row['expected_saving_share'])}</td></tr>")
        out.append("<table><tr><th>severity</th><th>rule</th><th>profile</th><th>finding</th><th>saving</th>"
                   "<th>of step time</th></tr>" + "".join(rows) + "</table>")
        return "\n".join([*out, "</section>"])

    def _summary_html(self, figures: list[tuple[str, dict[str, Any]]]) -> str:
        out = ["<section id='summary'><h2>Summary</h2>"]
        fleet = self.fleet
        out.append(f"<p class='meta'>{fleet.height if not fleet.is_empty() else len(self.profiles)} profiles"
                   f"{'' if len(self.profiles) >= fleet.height else f'; sections for the {len(self.profiles)} worst (by idle share and step time), every profile in the table below'}. "
                   "Times are device time; shares are of a device's step time; the categories of a step sum to it.</p>")
        out += [f"<p class='note'>{html.escape(n)}</p>" for n in self.notes]
        if fleet.is_empty():
            return "\n".join([*out, "</section>"])
        sectioned = {p.profile_id for p in self.profiles}

        def link(pid: str, name: str) -> str:
            label = html.escape(name)
            return f"<a href='#profile-{pid}'>{label}</a>" if pid in sectioned else label

        columns: list[tuple[str, str, Callable[[Any], str] | None]] = [
            ("profile", "name", None), ("host", "host", _text), ("job", "job", _text), ("device", "device_kind", _text),
            ("steps", "steps", _count), ("median step", "step_time_ps", _seconds), ("longest step", "max_step_time_ps", _seconds),
            ("busy / step", "busy_fraction", _pct), ("idle / step", "idle_share", _pct),
            ("memory-bound / step", "memory_bound_share", _pct),
            ("FLOP util. / step", "step_flop_utilization", _pct), ("HBM util. / step", "step_hbm_utilization", _pct),
            ("primary bottleneck", "primary_bottleneck", _text),
        ]
        worst_idle = fleet.filter(pl.col("idle_share").is_not_null()).sort("idle_share", descending=True).head(10)
        worst_step = fleet.filter(pl.col("max_step_time_ps").is_not_null()).sort("max_step_time_ps", descending=True).head(10)
        if fleet.height > 1:
            out.append("<h3>Worst profiles by idle share</h3>" + _table(worst_idle, columns, link))
            out.append("<h3>Longest steps</h3>" + _table(worst_step, columns, link))
            jobs = fleet.filter(pl.col("job").is_not_null())
            if not jobs.is_empty():
                per_job = (jobs.sort("idle_share", descending=True, nulls_last=True).group_by("job", maintain_order=True)
                           .agg(pl.len().alias("profiles"), pl.col("step_time_ps").median().alias("step_time_ps"),
                                pl.col("max_step_time_ps").max(), pl.col("idle_share").median(),
                                pl.col("profile_id").first(), pl.col("name").first())
                           .sort("idle_share", descending=True, nulls_last=True))
                out.append("<h3>Jobs (tag job), worst first</h3>" + _table(per_job, [
                    ("job", "job", _text), ("profiles", "profiles", _count), ("median step", "step_time_ps", _seconds),
                    ("longest step", "max_step_time_ps", _seconds), ("median idle", "idle_share", _pct),
                    ("worst profile (idle)", "name", None)], link))
            points = fleet.filter(pl.col("step_time_ps").is_not_null() & pl.col("idle_share").is_not_null())
            if not points.is_empty():
                figures.append(("fig-fleet", _fleet_figure(points)))
                out.append("<h3>Every profile: median step time against idle share</h3>"
                           + _chart_div("fig-fleet", figures[-1][1], "fleet"))
        out.append("<h3>Every profile</h3>" + _table(fleet, columns, link))
        return "\n".join([*out, "</section>"])


def _json(figure: dict[str, Any]) -> str:
    return json.dumps(figure, separators=(",", ":"), default=str).replace("</", "<\\/")


def plotly_js() -> str:
    """Plotly's script, to embed: from the ``plotly`` package, a dependency of xprosql. Raises ImportError with
    one line saying what to install where it is missing, so that no page is written with blank charts."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:
        raise ImportError("the HTML report draws its charts with plotly, which is not installed: pip install 'plotly>=5.20' "
                          "(a dependency of xprosql: pip install xprosql brings it)") from exc
    return str(get_plotlyjs())


_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px auto; color: #222; background: #fff; max-width: 1240px; padding: 0 16px; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 18px; border-top: 1px solid #ccc; padding-top: 12px; }}
h3 {{ font-size: 14px; margin: 14px 0 4px; }}
.sev-high {{ color: #b00020; font-weight: bold; }} .sev-medium {{ color: #a15c00; }} .sev-low {{ color: #555; }}
.finding {{ border-left: 3px solid #ccc; padding: 0 10px; margin: 8px 0; }} .finding p {{ margin: 4px 0; }}
.meta {{ color: #555; font-size: 13px; }} .note {{ color: #7a4b00; font-size: 13px; background: #fff8e6; padding: 4px 8px; }}
.verdict {{ font-size: 15px; padding: 8px 12px; background: #f4f4f4; border-left: 4px solid #d62728; }}
table {{ border-collapse: collapse; font-size: 12px; margin: 6px 0 12px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 6px; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
table.sortable th {{ cursor: pointer; background: #f6f6f6; user-select: none; }}
table.sortable th[data-dir=asc]::after {{ content: " \\25B2"; }} table.sortable th[data-dir=desc]::after {{ content: " \\25BC"; }}
.chart {{ width: 100%; margin: 6px 0 14px; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
nav#toc ol {{ columns: 2; font-size: 13px; }}
</style></head><body>
"""

# Tables sort on a header click (numbers by their data-v value); charts draw when they come into view.
_PAGE_JS = r"""
document.querySelectorAll('table.sortable th').forEach(th => th.addEventListener('click', () => {
  const table = th.closest('table'), body = table.tBodies[0], index = th.cellIndex;
  const dir = th.dataset.dir === 'desc' ? 'asc' : 'desc';
  table.querySelectorAll('th').forEach(h => delete h.dataset.dir); th.dataset.dir = dir;
  const key = row => { const c = row.cells[index]; const v = c.dataset.v; return v !== undefined ? parseFloat(v) : c.textContent; };
  const rows = Array.from(body.rows).sort((a, b) => { const x = key(a), y = key(b);
    const order = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
    return dir === 'asc' ? order : -order; });
  rows.forEach(r => body.appendChild(r));
}));
function drawChart(div) {
  if (div.dataset.rendered || !window.Plotly) return;
  div.dataset.rendered = 'pending';
  const fig = JSON.parse(document.getElementById(div.id + '-data').textContent);
  Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false}).then(() => { div.dataset.rendered = '1'; });
}
const observer = new IntersectionObserver(entries => entries.forEach(e => { if (e.isIntersecting) drawChart(e.target); }),
                                          {rootMargin: '400px'});
document.querySelectorAll('div.chart').forEach(div => observer.observe(div));
"""


def _table(frame: pl.DataFrame, columns: Sequence[tuple[str, str, Callable[[Any], str] | None]],
           link: Callable[[str, str], str] | None = None) -> str:
    """A sortable HTML table: (header, column, formatter); numbers keep their raw value for sorting; ``link``
    makes the ``name`` column a link to the row's profile section."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in columns)
    body = []
    for row in frame.iter_rows(named=True):
        cells = []
        for _, column, fmt in columns:
            value = row.get(column)
            if fmt is None and link is not None and column == "name":
                shown = link(str(row.get("profile_id")), str(value))
            else:
                shown = html.escape(fmt(value) if fmt else _text(value))
            sort = f" data-v='{float(value)!r}'" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
            cells.append(f"<td{sort}>{shown}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table class='sortable'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# -- figures (Plotly's JSON: data traces and a layout) -------------------------------------------------------

def _layout(title: str, **extra: Any) -> dict[str, Any]:
    layout = {"title": {"text": title, "font": {"size": 13}}, "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
              "height": 340, "hovermode": "closest", "legend": {"font": {"size": 10}}, "font": {"size": 11},
              "xaxis": dict(_NO_SI), "yaxis": dict(_NO_SI)}
    for key, value in extra.items():  # an axis given keeps the no-SI tick format unless it says otherwise
        layout[key] = {**_NO_SI, **value} if key.startswith(("xaxis", "yaxis")) and isinstance(value, dict) else value
    return layout


def _short(name: Any, width: int = 28) -> str:
    """A point's label on a chart: the name cut to ``width`` characters (the tooltip has it whole)."""
    text = str(name or "")
    return text if len(text) <= width else text[: width - 1] + "…"


def _fleet_figure(points: pl.DataFrame) -> dict[str, Any]:
    """One labelled point per profile and device kind: median step time (log axis in human times) against idle share."""
    labelled = points.height <= _LABELLED_POINTS  # beyond that the names would cover the points: tooltips only
    data = []
    for kind in points["device_kind"].unique(maintain_order=True).to_list():
        rows = points.filter(pl.col("device_kind") == kind).sort("step_time_ps")
        # neighbours along the axis take turns above and below their point: two close points' names do not collide
        positions = ["top center" if i % 2 == 0 else "bottom center" for i in range(rows.height)]
        data.append({"type": "scattergl" if rows.height > 2000 else "scatter", "mode": "markers+text" if labelled else "markers",
                     "name": str(kind), "x": rows["step_time_ps"].to_list(), "y": [100 * v for v in rows["idle_share"].to_list()],
                     "text": [_short(n) for n in rows["name"].to_list()] if labelled else rows["name"].to_list(),
                     "hovertext": rows["name"].to_list(), "textposition": positions, "textfont": {"size": 9},
                     "cliponaxis": False, "marker": {"size": 10},
                     "customdata": [_seconds(v) for v in rows["step_time_ps"].to_list()],
                     "hovertemplate": "%{hovertext}<br>median step %{customdata}<br>idle %{y:.1f}%<extra>" + str(kind) + "</extra>"})
    return {"data": data, "layout": _layout("median step time against idle share, one point per profile and device kind",
                                            xaxis=_log_axis(points["step_time_ps"].to_list(), _seconds,
                                                            title={"text": "median step time"}),
                                            yaxis={"title": {"text": "idle share (%)"}, "range": [-8, 108]})}


def _step_figure(steps: pl.DataFrame, max_steps: int) -> dict[str, Any]:
    """Each step's time on a log axis (top) over its categories as shares (bottom): a 2 s step beside 20 ms
    ones stays readable; the tooltips give each category's time. Steps of about one length (or one step) get
    a linear axis from 0 in the unit they fit, never a flat axis zoomed into their differences."""
    rows = steps.sort("device_id", "step_index").head(max_steps)
    labels = [f"{(d or '').replace('/device:', '')} step {s if s is not None else i}"
              for d, s, i in zip(rows["device"].to_list(), rows["step"].to_list(), rows["step_index"].to_list())]
    step_ps = [float(v or 0) for v in rows["step_ps"].to_list()]
    times = [_seconds(v) for v in rows["step_ps"].to_list()]
    spread = max(step_ps) / max(min(v for v in step_ps if v > 0), 1e-9) if any(step_ps) else 1
    if spread > 20:
        scale, axis = 1.0, _log_axis(step_ps, _seconds, title={"text": "step time"})
    else:
        scale, axis = _time_axis(max(step_ps), "step")
        axis["range"] = [0, 1.35 * axis["range"][1]]  # room above the points for their labels
    axis["domain"] = [0.72, 1]
    step_values = [v / scale for v in step_ps]
    # step times as points with their value written by them: on a log axis bars would start at an arbitrary floor
    data: list[dict[str, Any]] = [{"type": "scatter", "mode": "markers+text", "x": labels, "y": step_values, "name": "step time",
                                   "marker": {"color": "#444", "size": 10}, "text": times, "textposition": "top center",
                                   "yaxis": "y2", "customdata": times, "cliponaxis": False,
                                   "hovertemplate": "%{x}<br>step time %{customdata}<extra></extra>", "showlegend": False}]
    for category in BOTTLENECK_CATEGORIES:
        ps = [(v or 0) for v in rows[f"{category}_ps"].to_list()]
        if not any(ps):
            continue
        shares = [100 * p / s if s else 0 for p, s in zip(ps, rows["step_ps"].to_list())]
        data.append({"type": "bar", "x": labels, "y": shares, "name": _LABELS[category],
                     "marker": {"color": CATEGORY_COLORS[category]}, "customdata": [_seconds(p) for p in ps],
                     "hovertemplate": "%{x}<br>" + _LABELS[category] + ": %{customdata} (%{y:.1f}%)<extra></extra>"})
    layout = _layout("Step breakdown: step time (top) and where it goes (bottom)", barmode="stack",
                     height=300 + (60 if len(labels) > 1 else 0),
                     margin={"l": 70, "r": 20, "t": 40, "b": 10},
                     yaxis={"domain": [0, 0.62], "title": {"text": "share of step (%)"}, "range": [0, 100]},
                     yaxis2=axis, xaxis={"tickangle": -45 if len(labels) > 4 else 0, "automargin": True})
    return {"data": data, "layout": layout}


_TIMELINE_ROW_PX, _TIMELINE_AXIS_PX = 26, 44  # a line of events; a panel's time axis with its ticks and title


def _timeline_figure(events: pl.DataFrame, windows: dict[int, tuple[str, int, int, Any]]) -> dict[str, Any]:
    """The busiest step of each device: its longest events as bars on their lines, from the step's start in the
    unit the step fits, one panel per device with its own time axis (a 2 s step and a 20 ms one each fill their
    panel). Heights are in pixels: a line of events, then the panel's axis, and nothing blank below."""
    panels = [(d, w, events.filter(pl.col("device_id") == d)) for d, w in windows.items()]
    panels = [(d, w, rows) for d, w, rows in panels if not rows.is_empty()]
    lines = [rows["track"].n_unique() for _, _, rows in panels]
    plot_px = sum(_TIMELINE_ROW_PX * n for n in lines) + _TIMELINE_AXIS_PX * (len(panels) - 1)
    data: list[dict[str, Any]] = []
    layout = _layout("Busiest step per device: its longest events (drag to zoom, double-click to reset)", barmode="overlay",
                     height=plot_px + 40 + _TIMELINE_AXIS_PX, margin={"l": 60, "r": 20, "t": 40, "b": _TIMELINE_AXIS_PX})
    top = float(plot_px)
    for k, ((_, (device, start, end, step), rows), count) in enumerate(zip(panels, lines)):
        span = _TIMELINE_ROW_PX * count
        axis = "" if k == 0 else str(k + 1)
        short = (device or "").replace("/device:", "")
        scale, xaxis = _time_axis(end - start, f"from the start of {short}'s step {step}", anchor=f"y{axis}")
        xaxis["title"] = {**xaxis["title"], "font": {"size": 10}, "standoff": 2}
        data.append({"type": "bar", "orientation": "h", "name": f"{short} step {step} ({_seconds(end - start)})",
                     "xaxis": f"x{axis}", "yaxis": f"y{axis}", "y": rows["track"].to_list(),
                     "base": [(v - start) / scale for v in rows["start_ps"].to_list()],
                     "x": [max(d, 1) / scale for d in rows["dur_ps"].to_list()], "text": rows["name"].to_list(),
                     "textposition": "none",
                     "customdata": [[_seconds(v - start), _seconds(d)] for v, d in zip(rows["start_ps"].to_list(), rows["dur_ps"].to_list())],
                     "hovertemplate": f"%{{text}}<br>{short} %{{y}}<br>at %{{customdata[0]}} for %{{customdata[1]}}<extra></extra>"})
        layout[f"yaxis{axis}"] = {**_NO_SI, "domain": [max(0.0, (top - span) / plot_px), top / plot_px], "anchor": f"x{axis}",
                                  "automargin": True, "autorange": "reversed", "title": {"text": short, "font": {"size": 10}}}
        layout[f"xaxis{axis}"] = xaxis
        top -= span + _TIMELINE_AXIS_PX
    return {"data": data, "layout": layout}


_LABELLED_POINTS = 25  # a scatter with more points than this is labelled by its tooltips alone
_ROOFLINE_LABELS = 6  # the ops with the most self time are named on the roofline


def _spread_out(points: Sequence[tuple[Any, float, float]], most: int) -> set[Any]:
    """Up to ``most`` keys of (key, x, y) points, in the order given, skipping a point within a fifth of a decade of
    one already chosen (both axes log): labels that do not print over each other."""
    chosen: list[tuple[float, float]] = []
    keys: set[Any] = set()
    for key, x, y in points:
        if len(keys) == most:
            break
        here = (math.log10(x), math.log10(y))
        if all(abs(here[0] - a) > 0.2 or abs(here[1] - b) > 0.2 for a, b in chosen):
            chosen.append(here)
            keys.add(key)
    return keys


def _roofline_figure(ops: pl.DataFrame) -> dict[str, Any]:
    """Each op with FLOPs at (operational intensity, FLOP rate), sized by self time, the ones with the most self time
    named beside their point, under the roofs of the device kinds; FLOP rates on the axis in human units."""
    ops = ops.with_row_index("_row")
    named = _spread_out(ops.sort("self_time_ps", descending=True, nulls_last=True)
                        .select("_row", "operational_intensity", "flop_rate").rows(), _ROOFLINE_LABELS)
    data: list[dict[str, Any]] = []
    for bound, colour in (("compute", "#d62728"), ("HBM", "#1f77b4")):
        rows = ops.filter(pl.col("bound_by") == bound) if bound == "compute" else ops.filter(pl.col("bound_by") != "compute")
        if rows.is_empty():
            continue
        names = rows["op"].to_list()
        data.append({"type": "scatter", "mode": "markers+text", "name": f"{bound}-bound ops" if bound == "compute" else "memory-bound ops",
                     "x": rows["operational_intensity"].to_list(), "y": rows["flop_rate"].to_list(),
                     "text": [_short(o) if i in named else "" for i, o in zip(rows["_row"].to_list(), names)],
                     "textposition": "middle right",
                     "textfont": {"size": 9}, "cliponaxis": False, "hovertext": [str(o)[:120] for o in names],
                     "customdata": [[_seconds(t), _flops(r)] for t, r in zip(rows["self_time_ps"].to_list(), rows["flop_rate"].to_list())],
                     "marker": {"color": colour, "size": [max(10.0, min(24.0, 8 + 30 * (s or 0))) for s in rows["self_time_share"].to_list()]},
                     "hovertemplate": "%{hovertext}<br>%{x:.3g} FLOP/byte, %{customdata[1]}<br>self time %{customdata[0]}<extra></extra>"})
    roofs = ops.select("device_kind", "peak_flops_per_s", "peak_hbm_bytes_per_s").drop_nulls().unique()
    xs = [v for v in ops["operational_intensity"].to_list() if v and v > 0]
    low, high = (min(xs) / 10, max(xs) * 10) if xs else (0.01, 1000)
    ys = [v for v in ops["flop_rate"].to_list() if v and v > 0]
    for kind, peak, bandwidth in roofs.sort("peak_flops_per_s", descending=True).iter_rows():
        ridge = peak / bandwidth
        x = [min(low, ridge / 10), ridge, max(high, ridge * 10)]
        low, high = x[0], x[-1]
        y = [min(peak, bandwidth * v) for v in x]
        ys += y
        data.append({"type": "scatter", "mode": "lines", "name": f"{kind} roof: {_flops(peak)}, {_rate(bandwidth)}",
                     "x": x, "y": y, "line": {"color": "#333", "dash": "dot"}, "hoverinfo": "name"})
    return {"data": data, "layout": _layout(f"Roofline: the FLOP rate of each of the {ops.height} ops with FLOPs against its operational intensity",
                                            height=400,
                                            xaxis=_log_axis([low, high], _plain, title={"text": "operational intensity (FLOP/byte)"}),
                                            yaxis=_log_axis(ys, _flops, title={"text": "FLOP rate"}, automargin=True))}


def _async_figure(rows: pl.DataFrame) -> dict[str, Any]:
    names = [k if d is None or d == k.removeprefix("memcpy_") or d == k else f"{k} ({d})"
             for k, d in zip(rows["kind"].to_list(), rows["direction"].to_list())]
    widest = max((e or 0) + (c or 0) for e, c in zip(rows["exposed_ps"].to_list(), rows["covered_ps"].to_list()))
    scale, xaxis = _time_axis(widest, "window time, summed over ops")
    del xaxis["range"]  # stacked bars: Plotly fits them
    data = [{"type": "bar", "orientation": "h", "y": names, "x": [(v or 0) / scale for v in rows[column].to_list()],
             "name": label, "marker": {"color": colour}, "customdata": [_seconds(v) for v in rows[column].to_list()],
             "hovertemplate": "%{y}: %{customdata} " + label + "<extra></extra>"}
            for column, label, colour in (("exposed_ps", "exposed", CATEGORY_COLORS["exposed_host_offload"]),
                                          ("covered_ps", "hidden by other ops", CATEGORY_COLORS["compute_bound"]))]
    return {"data": data, "layout": _layout("Async operations: exposed against hidden window time (summed over ops)",
                                            barmode="stack", height=max(200, 110 + 30 * rows.height),
                                            xaxis=xaxis, yaxis={"automargin": True})}


def _peak_labels(peaks: pl.DataFrame, highest: float) -> list[str]:
    """Each peak's label, ``allocator: 2.1 GB``; peaks of about one height (allocators of one program) share one
    label on the first of them, ``3 allocators: 10.74 GB``, rather than printing over each other."""
    rows = list(zip(peaks["allocator"].to_list(), peaks["peak_ps"].to_list(), peaks["peak_in_use_bytes"].to_list()))
    groups: list[list[int]] = []
    for i, (_, _, held) in enumerate(rows):
        # about one height: their labels would share a line, where a name is wider than the gap between peaks
        near = next((g for g in groups if abs((rows[g[0]][2] or 0) - (held or 0)) < (highest or 1) / 20), None)
        if near is None:
            groups.append([i])
        else:
            near.append(i)
    labels = [""] * len(rows)
    for members in groups:
        name, _, held = rows[members[0]]
        labels[members[0]] = f"{_short(name, 20) if len(members) == 1 else f'{len(members)} allocators'}: {_bytes(held)}"
    return labels


def _memory_figure(timeline: pl.DataFrame, peaks: pl.DataFrame) -> dict[str, Any]:
    highest = max((v or 0) for column in ("in_use_bytes", "reserved_bytes") for v in timeline[column].to_list())
    unit, scale = next(((u, f) for u, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)) if highest >= f), ("B", 1.0))
    last = max([(s or 0) for s in timeline["start_ps"].to_list()] + ([p or 0 for p in peaks["peak_ps"].to_list()] if not peaks.is_empty() else []))
    t_scale, xaxis = _time_axis(last, "from the profile's start")
    del xaxis["range"], xaxis["rangemode"]  # the timeline starts where the first allocation is
    data: list[dict[str, Any]] = []
    for (allocator,), rows in timeline.sort("start_ps").group_by(["allocator"], maintain_order=True):
        for column, dash in (("in_use_bytes", "solid"), ("reserved_bytes", "dot")):
            values = rows[column].to_list()
            if not any(values):  # an allocator that records no reserved bytes: no flat line at 0
                continue
            data.append({"type": "scatter", "mode": "lines", "name": f"{allocator} {column.removesuffix('_bytes').replace('_', ' ')}",
                         "x": [s / t_scale for s in rows["start_ps"].to_list()], "y": [None if v is None else v / scale for v in values],
                         "line": {"dash": dash, "shape": "hv"}, "customdata": [_seconds(s) for s in rows["start_ps"].to_list()],
                         "hovertemplate": f"{allocator}<br>%{{customdata}}: %{{y:.4g}} {unit} {column.split('_')[0]}<extra></extra>"})
    if not peaks.is_empty():
        data.append({"type": "scatter", "mode": "markers+text", "name": "peak", "marker": {"symbol": "star", "size": 12, "color": "#d62728"},
                     "x": [p / t_scale for p in peaks["peak_ps"].to_list()], "y": [b / scale for b in peaks["peak_in_use_bytes"].to_list()],
                     "text": _peak_labels(peaks, highest),
                     # a peak in the right half is named on its left: the name stays clear of the legend
                     "textposition": ["top left" if 2 * (p or 0) > last else "top right" for p in peaks["peak_ps"].to_list()],
                     "textfont": {"size": 9}, "cliponaxis": False, "hovertext": peaks["allocator"].to_list(), "customdata": [_seconds(p) for p in peaks["peak_ps"].to_list()],
                     "hovertemplate": "%{hovertext} peak: %{y:.4g} " + unit + " at %{customdata}<extra></extra>"})
    return {"data": data, "layout": _layout("Memory in use (solid) and reserved (dotted) per allocator", height=340,
                                            xaxis=xaxis, yaxis={"title": {"text": unit}, "rangemode": "tozero"})}


# -- one profile's section ----------------------------------------------------------------------------------

def _chart(p: ProfileReport, name: str, figures: list[tuple[str, dict[str, Any]]]) -> str:
    fid = f"fig-{name}-{p.profile_id}"
    figures.append((fid, p.charts[name]))
    return _chart_div(fid, p.charts[name], name)


def _chart_div(fid: str, figure: dict[str, Any], name: str) -> str:
    """The chart's place, as tall as its figure: room kept before it draws, no blank band under it after."""
    return f"<div class='chart' id='{fid}' data-chart='{name}' style='height:{int(figure['layout']['height'])}px'></div>"


def _profile_html(p: ProfileReport, figures: list[tuple[str, dict[str, Any]]]) -> str:
    info = p.info
    out = [f"<section><h2 id='{p.anchor}'>{html.escape(p.title)}</h2>",
           f"<p class='meta'>{html.escape(_text(info.get('source_path')))} &middot; {html.escape(_text(info.get('format')))} &middot; "
           f"host {html.escape(_text(info.get('host')))} &middot; {_seconds(info.get('duration_ps'))} profiled &middot; "
           f"{_count(info.get('n_events'))} events &middot; profile {p.profile_id}</p>"]
    if not p.findings.is_empty():
        out.append("<h3>Findings</h3>")
        for row in p.findings.iter_rows(named=True):
            out.append(f"<div class='finding' id='{_finding_anchor(row)}'><p><b class='sev-{row['severity']}'>"
                       f"[{row['severity']}] {html.escape(row['rule'])}</b>: {html.escape(row['title'])}. Saving "
                       f"{_seconds(row['expected_saving_ps'])} ({_pct(row['expected_saving_share'])} of step time): "
                       f"{html.escape(row['saving_method'])}.</p><p>{html.escape(row['evidence'])}</p>"
                       f"<p><b>Fix:</b> {html.escape(row['fix'])}</p>"
                       f"<p class='meta'>Reference: {html.escape(row['reference'])}</p></div>")
    s = p.summary
    if s is not None:
        meaning = _MEANING.get(s["primary_bottleneck"], "")
        out.append(f"<p class='verdict'><b>Primary bottleneck: {html.escape(s['primary_bottleneck'])}</b> &mdash; "
                   f"{html.escape(meaning)}: "
                   f"{_pct(s['primary_share'])} of device time ({_seconds(s['primary_ps'])} of {_seconds(s['step_ps'])}, "
                   f"{s['devices']} devices, {s['steps']} device-steps); runner-up {html.escape(_text(s['runner_up']))} "
                   f"{_pct(s['runner_up_share'])}. Input {s['input_level']}, launch overhead {s['launch_level']}, "
                   f"collectives {s['collective_level']}.</p>")
        rows = [(c, s[f"{c}_ps"], s[f"{c}_share"]) for c in BOTTLENECK_CATEGORIES]
        out.append("<h3>Where the time goes</h3><table><tr><th>category</th><th>time</th><th>share</th></tr>" + "".join(
            f"<tr><td><span class='swatch' style='background:{CATEGORY_COLORS[c]}'></span>{_LABELS[c]}</td>"
            f"<td>{_seconds(ps)}</td><td>{_pct(sh)}</td></tr>" for c, ps, sh in rows if ps) + "</table>")
        if s.get("step_flop_utilization") is not None or s.get("step_hbm_utilization") is not None:
            out.append(f"<p class='meta'>FLOP utilization {_pct(s.get('step_flop_utilization'))}, HBM utilization "
                       f"{_pct(s.get('step_hbm_utilization'))} over step time.</p>")
    for name, heading in (("steps", "Step breakdown"), ("timeline", "Busiest step per device")):
        if name in p.charts:
            out.append(f"<h3>{heading}</h3>" + _chart(p, name, figures))
    if not p.steps.is_empty():
        out.append("<h3>Steps</h3>" + _table(p.steps.head(200), [
            ("device", "device", _text), ("step", "step", _text), ("source", "source", _text),
            ("step time", "step_ps", _seconds), ("busy", "busy_ps", _seconds),
            ("primary", "primary_bottleneck", _text), ("share", "primary_share", _pct),
        ]))
    if not p.top_ops.is_empty():
        out.append("<h3>Top ops by self time</h3>" + _table(p.top_ops.with_columns(pl.col("op").str.slice(0, 80)), [
            ("op", "op", _text), ("device", "device_kind", _text), ("category", "category", _text),
            ("occurrences", "occurrences", _count), ("self time", "self_time_ps", _seconds),
            ("share", "self_time_share", _pct), ("FLOP rate", "flop_rate", _flops), ("HBM bandwidth", "hbm_bandwidth", _rate),
            ("bound by", "bound_by", _text),
        ]))
    if "roofline" in p.charts:
        out.append("<h3>Roofline</h3>" + _chart(p, "roofline", figures))
    if not p.async_summary.is_empty():
        out.append("<h3>Async operations</h3>")
        if "async" in p.charts:
            out.append(_chart(p, "async", figures))
        out.append(_table(p.async_summary, [
            ("kind", "kind", _text), ("direction", "direction", _text), ("ops", "ops", _count),
            ("unpaired", "unpaired", _count), ("exposed", "exposed", _count), ("partial", "partial", _count),
            ("hidden", "hidden", _count), ("bytes", "bytes", _bytes),
            ("exposed time", "exposed_ps", _seconds), ("mean bandwidth", "mean_bandwidth_bytes_per_s", _rate),
            ("aggregate", "aggregate_bandwidth_bytes_per_s", _rate), ("peak HBM", "peak_hbm_bytes_per_s", _rate),
            ("aggregate / peak", "aggregate_vs_peak", _pct),
        ]))
    if "memory" in p.charts:
        out.append("<h3>Memory</h3>" + _chart(p, "memory", figures))
    if not p.memory_peaks.is_empty():
        out.append(_table(p.memory_peaks, [
            ("allocator", "allocator", _text), ("peak in use", "peak_in_use_bytes", _bytes), ("at", "peak_ps", _seconds),
            ("reserved then", "reserved_at_peak_bytes", _bytes), ("fragmentation then", "fragmentation_at_peak", _pct),
            ("of capacity", "peak_capacity_share", _pct), ("allocations", "allocations", _count),
            ("unfreed", "unfreed", _count), ("unfreed bytes", "unfreed_bytes", _bytes),
        ]))
    if not p.peak_contents.is_empty():
        out.append("<h3>What each peak holds: the largest blocks live then, by op and shape</h3>" + _table(p.peak_contents, [
            ("allocator", "allocator", _text), ("op", "op", _text), ("shape", "shape", _text), ("blocks", "blocks", _count),
            ("bytes", "bytes", _bytes), ("share of the peak", "share", _pct),
        ]))
    out += [f"<p class='note'>{html.escape(note)}</p>" for note in p.notes]
    return "\n".join([*out, "</section>"])


def _finding_anchor(row: Mapping[str, Any]) -> str:
    """One anchor per finding: its profile, rule and where (rank, step), as the id of its evidence."""
    parts = [row["profile_id"], row["rule"], row.get("rank"), row.get("step"), row.get("device")]
    return "finding-" + re.sub(r"[^A-Za-z0-9_-]", "_", "-".join("" if v is None else str(v) for v in parts))


# -- building it -----------------------------------------------------------------------------------------------

class _Progress:
    """A one-line progress bar on a stream: done/total and the item being worked on."""

    def __init__(self, total: int, *, stream: TextIO | None, label: str) -> None:
        self.total, self.stream, self.label, self.start = total, stream, label, time.monotonic()

    def step(self, done: int, item: str) -> None:
        if self.stream is None or self.total == 0:
            return
        width = 24
        filled = int(width * done / self.total)
        elapsed = time.monotonic() - self.start
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} {elapsed:5.1f}s {item[:24]:<24}")
        if done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def _quiet(call: Callable[[], Any], name: str, failures: list[str]) -> pl.DataFrame:
    """An analysis' rows; its "no rows for these profiles" warnings are said per profile by the report instead."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return call().pl()
        except Exception as exc:  # an analysis that fails leaves its part out, said in the summary
            failures.append(f"{name} failed, so its part is left out: {str(exc).splitlines()[0]}")
            return pl.DataFrame()


def _rows_of(frame: pl.DataFrame, pid: str) -> pl.DataFrame:
    if frame.is_empty() or "profile_id" not in frame.columns:
        return pl.DataFrame()
    return frame.filter(pl.col("profile_id") == pid)


def _needs(run: Run, module: str) -> str:
    needs = run.engine.library.module(module).needs
    return f"it needs {needs}" if needs else "the profile has no rows for it"


def _fleet_rows(run: Run, wanted: list[str], info: pl.DataFrame, bottlenecks: pl.DataFrame, failures: list[str]) -> pl.DataFrame:
    """Every profile's headline numbers: its accelerator's profile_summary row (else the host's), its bottleneck."""
    summary = _quiet(lambda: run.analysis("fleet.profile_summary", profiles=wanted), "fleet.profile_summary", failures)
    names = info.select("profile_id", pl.col("source_path").str.extract(r"([^/]+)$").alias("name"),
                        pl.col("host").alias("info_host"), "job")
    if summary.is_empty() or "profile_id" not in summary.columns:
        rows = names.with_columns(pl.lit(None, pl.String).alias("device_kind"))
    else:
        rank = pl.col("device_kind").replace_strict({"tpu": 0, "gpu": 1}, default=2, return_dtype=pl.Int32)
        best = summary.sort(rank).group_by("profile_id", maintain_order=True).first().drop("tags", strict=False)
        rows = names.join(best, on="profile_id", how="left")
    rows = rows.with_columns(pl.coalesce("host", "info_host").alias("host") if "host" in rows.columns else pl.col("info_host").alias("host"))
    if "primary_bottleneck" not in rows.columns and not bottlenecks.is_empty() and "scope" in bottlenecks.columns:
        primary = bottlenecks.filter(pl.col("scope") == "profile").select("profile_id", "primary_bottleneck")
        rows = rows.join(primary, on="profile_id", how="left")
    for column in ("steps", "step_time_ps", "max_step_time_ps", "busy_fraction", "idle_share", "memory_bound_share",
                   "step_flop_utilization", "step_hbm_utilization", "primary_bottleneck"):
        if column not in rows.columns:
            rows = rows.with_columns(pl.lit(None).alias(column))
    return rows.sort("name")


def _worst(fleet: pl.DataFrame, findings: pl.DataFrame, sections: int) -> list[str]:
    """The profiles that get a section when there are too many: the worst by the largest finding's saving, by idle
    share and by longest step, in turn."""
    by_finding = findings["profile_id"].unique(maintain_order=True).to_list() if not findings.is_empty() else []
    by_idle = fleet.sort("idle_share", descending=True, nulls_last=True)["profile_id"].to_list()
    by_step = fleet.sort("max_step_time_ps", descending=True, nulls_last=True)["profile_id"].to_list()
    chosen: list[str] = []
    for a, b, c in itertools.zip_longest(by_finding, by_idle, by_step):
        for pid in (a, b, c):
            if pid is not None and pid not in chosen and len(chosen) < sections:
                chosen.append(pid)
    return chosen


def _peak_contents(peaks: pl.DataFrame) -> pl.DataFrame:
    """What each allocator's peak holds (memory_peaks' live_at_peak: blocks by op and shape), with the bytes no
    allocation of the profile accounts for as a row of their own."""
    if peaks.is_empty() or "live_at_peak" not in peaks.columns:
        return pl.DataFrame()
    live = (peaks.select("allocator", "peak_in_use_bytes", "live_at_peak").explode("live_at_peak")
            .filter(pl.col("live_at_peak").is_not_null()).unnest("live_at_peak"))
    before = (peaks.filter(pl.col("unattributed_at_peak_bytes").fill_null(0) > 0)
              .select("allocator", "peak_in_use_bytes", pl.lit("(allocated before the profile began)").alias("op"),
                      pl.lit(None, pl.String).alias("shape"), pl.lit(None, pl.Int64).alias("blocks"),
                      pl.col("unattributed_at_peak_bytes").alias("bytes")))
    rows = pl.concat([live.select(before.columns), before], how="vertical_relaxed") if not before.is_empty() else live
    return rows.with_columns((pl.col("bytes") / pl.col("peak_in_use_bytes")).alias("share")).sort(
        "allocator", "bytes", descending=[False, True])


Window = tuple[str, int, int, Any]  # device name, start ps, end ps, step


def _busiest_steps(run: Run, steps: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, dict[int, Window]]]:
    """Per profile and device (up to four a profile), its step with the most busy time and that step's longest
    events: one query over the profiles' files only."""
    if steps.is_empty():
        return pl.DataFrame(), {}
    best = (steps.filter(pl.col("busy_ps").is_not_null()).sort("busy_ps", descending=True)
            .group_by("profile_id", "device_id", maintain_order=True).first().sort("profile_id", "device_id")
            .group_by("profile_id", maintain_order=True).head(_TIMELINE_DEVICES))
    windows: dict[str, dict[int, Window]] = {}
    for pid, d, name, start, end, step, index in best.select(
            "profile_id", "device_id", "device", "start_ps", "end_ps", "step", "step_index").iter_rows():
        windows.setdefault(pid, {})[d] = (name, start, end, step if step is not None else index)
    if not windows:
        return pl.DataFrame(), {}
    wanted = best.select("profile_id", "device_id", "start_ps", "end_ps").to_arrow()
    con = snapshot_connection(run.engine.restricted(list(windows)), arrow={"_windows": wanted})
    try:
        events = pl.from_arrow(query(con, f"""
            SELECT e.profile_id, e.device_id, t.name AS track, e.name, e.start_ps, e.dur_ps
            FROM events e JOIN _windows w ON e.profile_id = w.profile_id AND e.device_id = w.device_id
                 AND e.start_ps < w.end_ps AND e.start_ps + e.dur_ps > w.start_ps
            JOIN tracks t ON t.profile_id = e.profile_id AND t.device_id = e.device_id AND t.track_id = e.track_id
            WHERE e.dur_ps > 0
            QUALIFY row_number() OVER (PARTITION BY e.profile_id, e.device_id ORDER BY e.dur_ps DESC) <= {_TIMELINE_EVENTS}
            ORDER BY e.profile_id, e.device_id, t.name, e.start_ps""").to_arrow_table())
    finally:
        con.close()
    assert isinstance(events, pl.DataFrame)
    return events, windows


def build_report(
    run: Run,
    *,
    profiles: Sequence[str] | None = None,
    top_ops: int = 10,
    max_steps: int = 40,
    charts: bool = True,
    progress: bool | None = None,
    title: str | None = None,
    sections: int = 12,
) -> Report:
    """Build the report for ``profiles`` (default: all) of ``run``.

    ``top_ops``: op rows per profile; ``max_steps``: bars of the step chart; ``charts``: make the
    figures (False: the numbers only, as :func:`terminal_summary` uses); ``progress``: a progress bar
    on stderr (default: when stderr is a terminal); ``sections``: at most this many profile sections
    (the worst by idle share and longest step), every profile staying in the summary table.

    Example:
        >>> report = build_report(run, top_ops=5)                              # doctest: +SKIP
        >>> report.profiles[0].summary["primary_bottleneck"], report.write("report.html")  # doctest: +SKIP
    """
    wanted = list(run.profile_ids if profiles is None else profiles)
    show = sys.stderr.isatty() if progress is None else progress
    info = run.sql("SELECT profile_id, source_path, format, host, tags['job'] AS job, duration_ps, n_events FROM profiles "
                   "WHERE list_contains($ids, profile_id)", {"ids": wanted}).pl()
    notes: list[str] = []
    bottleneck_rows = _quiet(lambda: run.bottlenecks(profiles=wanted), "bottlenecks", notes) if wanted else pl.DataFrame()
    fleet = _fleet_rows(run, wanted, info, bottleneck_rows, notes) if wanted else pl.DataFrame()
    findings = _quiet(lambda: run.diagnose(profiles=wanted), "diagnose", notes) if wanted else pl.DataFrame()
    chosen = wanted if len(wanted) <= sections else _worst(fleet, findings, sections)
    order = {pid: i for i, pid in enumerate(fleet["profile_id"].to_list())} if not fleet.is_empty() else {}
    chosen = sorted(chosen, key=lambda pid: order.get(pid, 0)) if len(wanted) <= sections else chosen
    bar = _Progress(len(chosen) + 1, stream=sys.stderr if show else None, label="report")
    bar.step(0, "analyses")
    summaries = _quiet(lambda: run.async_summary(profiles=chosen), "async_summary", notes) if chosen else pl.DataFrame()
    roofline = _quiet(lambda: run.roofline(profiles=chosen), "roofline", notes) if chosen else pl.DataFrame()
    timeline = _quiet(lambda: run.memory_timeline(profiles=chosen, buckets=400), "memory_timeline", notes) if chosen and charts else pl.DataFrame()
    peaks = _quiet(lambda: run.memory_peaks(profiles=chosen, top=8), "memory_peaks", notes) if chosen else pl.DataFrame()
    sectioned = bottleneck_rows.filter((pl.col("scope") == "step") & pl.col("profile_id").is_in(chosen)) if (
        charts and not bottleneck_rows.is_empty() and "scope" in bottleneck_rows.columns) else pl.DataFrame()
    events, busiest = _busiest_steps(run, sectioned)
    bar.step(1, "charts")
    built: list[ProfileReport] = []
    for i, pid in enumerate(chosen, start=2):
        rows = _rows_of(bottleneck_rows, pid)
        summary_rows = rows.filter(pl.col("scope") == "profile") if not rows.is_empty() else rows
        step_rows = rows.filter(pl.col("scope") == "step") if not rows.is_empty() else rows
        ops = _rows_of(roofline, pid)
        ops = ops.filter(pl.col("row_kind") == "op") if not ops.is_empty() else ops
        meta = info.filter(pl.col("profile_id") == pid)
        profile = ProfileReport(
            profile_id=pid,
            info=meta.row(0, named=True) if not meta.is_empty() else {"profile_id": pid},
            summary=summary_rows.row(0, named=True) if not summary_rows.is_empty() else None,
            steps=step_rows,
            top_ops=ops.sort("self_time_ps", descending=True, nulls_last=True).head(top_ops) if not ops.is_empty() else ops,
            async_summary=_rows_of(summaries, pid),
            memory_peaks=_rows_of(peaks, pid),
            findings=_rows_of(findings, pid),
        )
        if profile.summary is None:
            profile.notes.append(f"No bottleneck breakdown or step chart: {_needs(run, 'steps.bottlenecks')}.")
        if charts:
            _figures(run, profile, step_rows, ops, _rows_of(timeline, pid), events, busiest, max_steps=max_steps)
        built.append(profile)
        bar.step(i, pid)
    return Report(title=title or f"xprosql report: {run.path}", profiles=built, fleet=fleet, notes=notes,
                  findings=findings)


def _figures(run: Run, p: ProfileReport, steps: pl.DataFrame, ops: pl.DataFrame, timeline: pl.DataFrame,
             events: pl.DataFrame, busiest: dict[str, dict[int, Window]], *, max_steps: int) -> None:
    pid = p.profile_id
    if not steps.is_empty():
        p.charts["steps"] = _step_figure(steps, max_steps)
        if steps.height > max_steps:
            p.notes.append(f"The step chart shows the first {max_steps} of {steps.height} device-steps; the table has more.")
        if busiest.get(pid):
            p.charts["timeline"] = _timeline_figure(events.filter(pl.col("profile_id") == pid), busiest[pid])
        else:
            p.notes.append("No busiest-step timeline: no step of this profile has events with a duration.")
    drawable = ops.filter(pl.col("flops").fill_null(0) > 0) if not ops.is_empty() else ops
    drawable = drawable.filter(pl.col("operational_intensity").is_not_null() & pl.col("flop_rate").is_not_null()
                               & (pl.col("flop_rate") > 0)) if not drawable.is_empty() else drawable
    if not drawable.is_empty():
        p.charts["roofline"] = _roofline_figure(drawable)
    else:
        why = ("no op has FLOPs: a PyTorch trace needs record_shapes=True (or a flops arg), an XLA profile op costs in its op stats or HLO"
               if not ops.is_empty() else _needs(run, "ops.roofline"))
        p.notes.append(f"No roofline chart: {why}.")
    kinds = p.async_summary.filter(pl.col("window_ps") > 0).sort("window_ps") if not p.async_summary.is_empty() else p.async_summary
    if not kinds.is_empty():
        p.charts["async"] = _async_figure(kinds)
    if not timeline.is_empty():
        p.charts["memory"] = _memory_figure(timeline, p.memory_peaks)
        p.peak_contents = _peak_contents(p.memory_peaks)
    else:
        p.notes.append(f"No memory timeline: {_needs(run, 'memory.memory_timeline')}.")


def roofline_page(frame: pl.DataFrame, out: str | os.PathLike[str], *, profile_id: str | None = None) -> Path:
    """Write the report's interactive roofline of one profile of a roofline frame (``run.roofline().pl()``) as a page
    of its own (Plotly inline, works offline): ``xprosql roofline --out chart.html``, with no matplotlib. Without
    ``profile_id``, the profile with the most device time and known peaks; ValueError when none has ops with FLOPs.

    Example:
        >>> roofline_page(run.roofline().pl(), "roofline.html")              # doctest: +SKIP
    """
    script = plotly_js()
    totals = frame.filter((pl.col("row_kind") == "profile") & pl.col("peak_flops_per_s").is_not_null()
                          & pl.col("peak_hbm_bytes_per_s").is_not_null())
    if profile_id is not None:
        totals = totals.filter(pl.col("profile_id") == profile_id)
    ops = pl.DataFrame()
    for pid in totals.sort("device_time_ps", descending=True, nulls_last=True)["profile_id"].unique(maintain_order=True).to_list():
        ops = frame.filter((pl.col("profile_id") == pid) & (pl.col("row_kind") == "op") & (pl.col("flops").fill_null(0) > 0)
                           & pl.col("operational_intensity").is_not_null() & (pl.col("flop_rate").fill_null(0) > 0))
        if not ops.is_empty():
            break
    if ops.is_empty():
        raise ValueError("no profile has ops with FLOPs and a device with known peaks to draw a roofline of")
    figure = _roofline_figure(ops)
    title = f"Roofline of profile {ops['profile_id'][0]}"
    page = (_HEAD.format(title=html.escape(title)) + f"<h1>{html.escape(title)}</h1>" + _chart_div("fig-roofline", figure, "roofline")
            + f"<script type='application/json' id='fig-roofline-data'>{_json(figure)}</script>"
            + f"<script>{script}</script><script>{_PAGE_JS}</script></body></html>")
    path = Path(out)
    path.write_text(page, encoding="utf-8")
    return path


def terminal_summary(run: Run, *, profiles: Sequence[str] | None = None, top_ops: int = 5) -> str:
    """A few lines per profile for a terminal: the bottleneck, the breakdown, the async summary, top ops.

    Example:
        >>> print(terminal_summary(run))                                      # doctest: +SKIP
    """
    wanted = list(run.profile_ids if profiles is None else profiles)
    report = build_report(run, profiles=wanted, top_ops=top_ops, charts=False, progress=False, sections=max(len(wanted), 1))
    lines: list[str] = []
    for p in report.profiles:
        info, s = p.info, p.summary
        lines.append(f"profile {p.profile_id}  {Path(str(info.get('source_path') or '')).name}  "
                     f"({info.get('format')}, {_seconds(info.get('duration_ps'))})")
        if s is None:
            lines.append("  no device activity found")
            lines.append("")
            continue
        lines.append(f"  primary bottleneck: {s['evidence']}")
        lines.append(f"    ({_MEANING.get(s['primary_bottleneck'], '')})")
        parts = [f"{_LABELS[c]} {_pct(s[f'{c}_share'])}" for c in BOTTLENECK_CATEGORIES if s[f"{c}_ps"]]
        lines.append(f"  breakdown ({s['devices']} devices, {s['steps']} device-steps, {_seconds(s['step_ps'])}): " + ", ".join(parts))
        for row in p.async_summary.iter_rows(named=True):
            kind = row["kind"] + (f" {row['direction']}" if row["direction"] and row["direction"] not in row["kind"] else "")
            lines.append(f"  async {kind}: {row['ops']} ops ({row['unpaired']} unpaired), {row['exposed']} exposed, "
                         f"exposed {_seconds(row['exposed_ps'])}, mean {_rate(row['mean_bandwidth_bytes_per_s'])}"
                         + (f" vs peak {_rate(row['peak_hbm_bytes_per_s'])}" if row["peak_hbm_bytes_per_s"] else ""))
        for row in p.top_ops.iter_rows(named=True):
            op = row["op"] if len(row["op"] or "") <= 60 else row["op"][:57] + "..."
            lines.append(f"  top op {op}: {_seconds(row['self_time_ps'])} self ({_pct(row['self_time_share'])}), "
                         f"bound by {row['bound_by']}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
