"""Reports people can look at: one HTML page (charts embedded) or a terminal summary.

Per profile: the primary bottleneck with the numbers behind it, the step
breakdown as a stacked bar chart, the top ops by self time, the async summary
(with a chart of exposed against hidden time per kind) and the roofline chart.
The data come from the packaged analyses (``bottlenecks``, ``async_summary``,
``roofline``), each run once over all profiles; charts need matplotlib (the
``plot`` extra) and are left out, with a note, without it.

Example:
    >>> import xprosql
    >>> from xprosql.report import build_report, terminal_summary
    >>> run = xprosql.load("run/")                                       # doctest: +SKIP
    >>> print(terminal_summary(run))                                      # doctest: +SKIP
    >>> build_report(run).write("report.html")                            # doctest: +SKIP
"""

from __future__ import annotations

import base64
import html
import io
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import polars as pl

from xprosql.queries.bottlenecks import BOTTLENECK_CATEGORIES

if TYPE_CHECKING:
    from xprosql.run import Run

__all__ = [
    "CATEGORY_COLORS",
    "ProfileReport",
    "Report",
    "async_chart",
    "build_report",
    "step_breakdown_chart",
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


def _matplotlib() -> Any | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _seconds(ps: float | None) -> str:
    """Picoseconds as a short human time: 98.153 s, 19.87 ms, 2.5 us."""
    if ps is None:
        return "-"
    value = float(ps)
    for unit, scale in (("s", 1e12), ("ms", 1e9), ("us", 1e6)):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value / 1e3:.4g} ns"


def _rate(bytes_per_s: float | None) -> str:
    return "-" if bytes_per_s is None else f"{bytes_per_s / 1e9:.4g} GB/s"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def step_breakdown_chart(steps: pl.DataFrame, *, title: str = "Step time breakdown", max_bars: int = 40) -> bytes | None:
    """A stacked bar per (device, step) of ``bottlenecks`` step rows, one colour per category; PNG bytes.

    Bars show each category's time in milliseconds; at most ``max_bars`` bars
    (the first steps of each device). None without matplotlib or rows.

    Example:
        >>> png = step_breakdown_chart(run.bottlenecks(scope="step").pl())        # doctest: +SKIP
    """
    plt = _matplotlib()
    rows = steps.filter(pl.col("scope") == "step").sort("device_id", "step_index").head(max_bars)
    if plt is None or rows.is_empty():
        return None
    labels = [
        (f"{(d or '').replace('/device:', '')}" + (f"\nstep {s}" if s is not None else f"\n#{i}"))
        for d, s, i in zip(rows["device"].to_list(), rows["step"].to_list(), rows["step_index"].to_list())
    ]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * rows.height + 3), 4.6), dpi=110)
    bottom = [0.0] * rows.height
    for category in BOTTLENECK_CATEGORIES:
        values = [(v or 0) / 1e9 for v in rows[f"{category}_ps"].to_list()]
        if not any(values):
            continue
        ax.bar(range(rows.height), values, bottom=bottom, color=CATEGORY_COLORS[category], label=_LABELS[category],
               edgecolor="white", linewidth=0.3)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(range(rows.height), labels, fontsize=7)
    ax.set_ylabel("time (ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(True, axis="y", linewidth=0.3)
    fig.tight_layout()
    return _png(fig, plt)


def async_chart(summary: pl.DataFrame, *, title: str = "Async operations: exposed vs hidden time") -> bytes | None:
    """Horizontal bars per async kind (and direction): exposed and covered window time, summed over ops; PNG bytes.

    Example:
        >>> png = async_chart(run.async_summary().pl())                            # doctest: +SKIP
    """
    plt = _matplotlib()
    rows = summary.filter(pl.col("window_ps") > 0).sort("window_ps")
    if plt is None or rows.is_empty():
        return None
    names = [k if d is None or d == k.removeprefix("memcpy_") or d == k else f"{k} ({d})"
             for k, d in zip(rows["kind"].to_list(), rows["direction"].to_list())]
    exposed = [(v or 0) / 1e9 for v in rows["exposed_ps"].to_list()]
    covered = [(v or 0) / 1e9 for v in rows["covered_ps"].to_list()]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * rows.height), dpi=110)
    ax.barh(range(rows.height), exposed, color=CATEGORY_COLORS["exposed_host_offload"], label="exposed")
    ax.barh(range(rows.height), covered, left=exposed, color=CATEGORY_COLORS["compute_bound"], label="hidden by other ops")
    ax.set_yticks(range(rows.height), names, fontsize=8)
    ax.set_xlabel("window time summed over ops (ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", linewidth=0.3)
    fig.tight_layout()
    return _png(fig, plt)


def _png(fig: Any, plt: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


@dataclass
class ProfileReport:
    """What the report says about one profile: tables and PNG charts."""

    profile_id: str
    info: dict[str, Any]
    summary: dict[str, Any] | None
    steps: pl.DataFrame
    top_ops: pl.DataFrame
    async_summary: pl.DataFrame
    charts: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    """A built report: :meth:`html` renders it, :meth:`write` saves it."""

    title: str
    profiles: list[ProfileReport]

    def html(self) -> str:
        """The report as one self-contained HTML page (charts as embedded PNGs)."""
        parts = [_HTML_HEAD.format(title=html.escape(self.title))]
        parts.append(f"<h1>{html.escape(self.title)}</h1>")
        parts.append(f"<p class='meta'>{len(self.profiles)} profiles. Times are device time summed over devices and steps; "
                     "shares are of that time. Categories sum to the step time.</p>")
        for profile in self.profiles:
            parts.append(_profile_html(profile))
        parts.append("</body></html>")
        return "\n".join(parts)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`html` to ``path``; returns the path."""
        out = Path(path)
        out.write_text(self.html(), encoding="utf-8")
        return out


_HTML_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; background: #fff; max-width: 1200px; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 18px; border-top: 1px solid #ccc; padding-top: 12px; }}
h3 {{ font-size: 14px; margin-bottom: 4px; }}
.meta {{ color: #555; font-size: 13px; }}
.verdict {{ font-size: 16px; padding: 8px 12px; background: #f4f4f4; border-left: 4px solid #d62728; }}
table {{ border-collapse: collapse; font-size: 12px; margin: 6px 0 12px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 6px; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
img.chart {{ display: block; max-width: 100%; margin: 6px 0 14px; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
</style></head><body>"""


def _table(frame: pl.DataFrame, columns: Sequence[tuple[str, str, Any]]) -> str:
    """An HTML table of ``frame`` with (header, column, formatter) columns."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in columns)
    body = []
    for row in frame.iter_rows(named=True):
        cells = "".join(f"<td>{html.escape(str(fmt(row.get(col))) if fmt else str(row.get(col)))}</td>"
                        for _, col, fmt in columns)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _img(name: str, png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode()
    return f"<img class='chart' id='{name}' alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def _profile_html(p: ProfileReport) -> str:
    info = p.info
    out = [f"<h2 id='profile-{p.profile_id}'>Profile {p.profile_id}</h2>",
           f"<p class='meta'>{html.escape(str(info.get('source_path') or ''))} &middot; {info.get('format')} &middot; "
           f"host {html.escape(str(info.get('host') or '-'))} &middot; {_seconds(info.get('duration_ps'))} profiled</p>"]
    s = p.summary
    if s is not None:
        meaning = _MEANING.get(s["primary_bottleneck"], "")
        out.append(f"<p class='verdict'><b>Primary bottleneck: {html.escape(s['primary_bottleneck'])}</b> &mdash; "
                   f"{html.escape(meaning)}: "
                   f"{_pct(s['primary_share'])} of device time ({_seconds(s['primary_ps'])} of {_seconds(s['step_ps'])}, "
                   f"{s['devices']} devices, {s['steps']} device-steps); runner-up {html.escape(str(s['runner_up']))} "
                   f"{_pct(s['runner_up_share'])}. Input {s['input_level']}, launch overhead {s['launch_level']}, "
                   f"collectives {s['collective_level']}.</p>")
        rows = [(c, s[f"{c}_ps"], s[f"{c}_share"]) for c in BOTTLENECK_CATEGORIES]
        out.append("<h3>Where the time goes</h3><table><tr><th>category</th><th>time</th><th>share</th></tr>" + "".join(
            f"<tr><td><span class='swatch' style='background:{CATEGORY_COLORS[c]}'></span>{_LABELS[c]}</td>"
            f"<td>{_seconds(ps)}</td><td>{_pct(sh)}</td></tr>" for c, ps, sh in rows if ps) + "</table>")
        if s.get("flop_utilization") is not None or s.get("hbm_utilization") is not None:
            out.append(f"<p class='meta'>FLOP utilization {_pct(s.get('flop_utilization'))}, HBM utilization "
                       f"{_pct(s.get('hbm_utilization'))} over device time.</p>")
    if "steps" in p.charts:
        out.append("<h3>Step breakdown</h3>" + _img(f"steps-{p.profile_id}", p.charts["steps"], "step breakdown chart"))
    if not p.steps.is_empty():
        out.append(_table(p.steps.head(40), [
            ("device", "device", None), ("step", "step", None), ("source", "source", None),
            ("step time", "step_ps", _seconds), ("busy", "busy_ps", _seconds),
            ("primary", "primary_bottleneck", None), ("share", "primary_share", _pct),
        ]))
    if not p.top_ops.is_empty():
        out.append("<h3>Top ops by self time</h3>" + _table(p.top_ops.with_columns(pl.col("op").str.slice(0, 80)), [
            ("op", "op", None), ("device", "device_kind", None), ("category", "category", None),
            ("occurrences", "occurrences", None), ("self time", "self_time_ps", _seconds),
            ("share", "self_time_share", _pct), ("bound by", "bound_by", None),
        ]))
    if not p.async_summary.is_empty():
        out.append("<h3>Async operations</h3>")
        if "async" in p.charts:
            out.append(_img(f"async-{p.profile_id}", p.charts["async"], "async chart"))
        out.append(_table(p.async_summary, [
            ("kind", "kind", None), ("direction", "direction", None), ("ops", "ops", None),
            ("unpaired", "unpaired", None), ("exposed", "exposed", None), ("partial", "partial", None),
            ("hidden", "hidden", None), ("bytes", "bytes", lambda v: "-" if v is None else f"{v / 1e9:.4g} GB"),
            ("exposed time", "exposed_ps", _seconds), ("mean bandwidth", "mean_bandwidth_bytes_per_s", _rate),
            ("aggregate", "aggregate_bandwidth_bytes_per_s", _rate), ("peak HBM", "peak_hbm_bytes_per_s", _rate),
            ("aggregate / peak", "aggregate_vs_peak", _pct),
        ]))
    if "roofline" in p.charts:
        out.append("<h3>Roofline</h3>" + _img(f"roofline-{p.profile_id}", p.charts["roofline"], "roofline chart"))
    for note in p.notes:
        out.append(f"<p class='meta'>{html.escape(note)}</p>")
    return "\n".join(out)


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


def build_report(
    run: Run,
    *,
    profiles: Sequence[str] | None = None,
    top_ops: int = 10,
    max_steps: int = 40,
    charts: bool = True,
    progress: bool | None = None,
    title: str | None = None,
) -> Report:
    """Build the report for ``profiles`` (default: all) of ``run``.

    ``charts``: draw the PNG charts (needs matplotlib); ``progress``: a
    progress bar on stderr (default: when stderr is a terminal).

    Example:
        >>> report = build_report(run, top_ops=5)                              # doctest: +SKIP
        >>> report.profiles[0].summary["primary_bottleneck"], report.write("report.html")  # doctest: +SKIP
    """
    wanted = list(run.profile_ids if profiles is None else profiles)
    show = sys.stderr.isatty() if progress is None else progress
    bar = _Progress(len(wanted) + 1, stream=sys.stderr if show else None, label="report")
    bar.step(0, "analyses")  # the analyses run once, for every profile
    info = run.sql("SELECT profile_id, source_path, format, host, duration_ps FROM profiles").pl()
    bottleneck_rows = run.bottlenecks(profiles=wanted).pl() if wanted else pl.DataFrame()
    summaries = run.async_summary(profiles=wanted).pl() if wanted else pl.DataFrame()
    roofline = _roofline(run, wanted)
    bar.step(1, "charts")
    plot_ok = charts and _matplotlib() is not None
    built: list[ProfileReport] = []
    for i, pid in enumerate(wanted, start=2):  # step 1 was the analyses
        rows = bottleneck_rows.filter(pl.col("profile_id") == pid) if not bottleneck_rows.is_empty() else bottleneck_rows
        summary_rows = rows.filter(pl.col("scope") == "profile") if not rows.is_empty() else rows
        step_rows = rows.filter(pl.col("scope") == "step") if not rows.is_empty() else rows
        async_rows = summaries.filter(pl.col("profile_id") == pid) if not summaries.is_empty() else summaries
        ops = pl.DataFrame()
        if roofline is not None and not roofline.is_empty():
            ops = (roofline.filter((pl.col("profile_id") == pid) & (pl.col("row_kind") == "op"))
                   .sort("self_time_ps", descending=True, nulls_last=True).head(top_ops))
        meta = info.filter(pl.col("profile_id") == pid)
        profile = ProfileReport(
            profile_id=pid,
            info=meta.row(0, named=True) if not meta.is_empty() else {"profile_id": pid},
            summary=summary_rows.row(0, named=True) if not summary_rows.is_empty() else None,
            steps=step_rows,
            top_ops=ops,
            async_summary=async_rows,
        )
        if charts and not plot_ok:
            profile.notes.append("Charts need matplotlib: pip install 'xprosql[plot]'.")
        if plot_ok:
            _draw(profile, step_rows, async_rows, roofline, pid, max_steps=max_steps)
        built.append(profile)
        bar.step(i, pid)
    return Report(title=title or f"xprosql report: {run.path}", profiles=built)


def _roofline(run: Run, wanted: list[str]) -> pl.DataFrame | None:
    if not wanted or not hasattr(run, "roofline"):
        return None
    try:
        return run.roofline(profiles=wanted).pl()
    except Exception:  # the roofline is optional here: a report without it is still a report
        return None


def _draw(profile: ProfileReport, step_rows: pl.DataFrame, async_rows: pl.DataFrame,
          roofline: pl.DataFrame | None, pid: str, *, max_steps: int) -> None:
    png = step_breakdown_chart(step_rows, title=f"Step time breakdown, profile {pid}", max_bars=max_steps)
    if png:
        profile.charts["steps"] = png
    png = async_chart(async_rows)
    if png:
        profile.charts["async"] = png
    if roofline is None:
        return
    try:
        from xprosql.queries.roofline import plot_roofline
    except ImportError:
        return
    with tempfile.TemporaryDirectory(prefix="xprosql-report-") as tmp:
        path = Path(tmp) / "roofline.png"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # matplotlib: an empty legend when no op has FLOPs
                plot_roofline(roofline, path, profile_id=pid)
        except ValueError as exc:  # no peaks, no ops with FLOPs: say so instead
            profile.notes.append(f"No roofline chart: {exc}")
            return
        profile.charts["roofline"] = path.read_bytes()


def terminal_summary(run: Run, *, profiles: Sequence[str] | None = None, top_ops: int = 5) -> str:
    """A few lines per profile for a terminal: the bottleneck, the breakdown, the async summary, top ops.

    Example:
        >>> print(terminal_summary(run))                                      # doctest: +SKIP
    """
    report = build_report(run, profiles=profiles, top_ops=top_ops, charts=False, progress=False)
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
