"""Continuous profiling: watch a log directory and ingest each profile once it is complete, flagging anomalies.

A training job writes a profile every N steps (``jax.profiler`` traces, ``torch.profiler`` with a schedule and
``tensorboard_trace_handler``, XProf snapshots); :func:`watch` turns that stream into warehouse rows as it lands:

* **Discovery** is :func:`xprosql.ingest.find_profiles`' (the same layouts and exclusions as ``xprosql ingest``:
  ``plugins/profile/<run>/<host>.xplane.pb``, ``<host>_<pid>.<ns>.pt.trace.json[.gz]``, not the
  ``<host>.trace.json.gz`` beside an ``.xplane.pb``), plus: hidden names (``.name``: a writer's temp file) are
  left alone. Linux: inotify (through ``ctypes``, no dependency) wakes the watcher when a directory changes; a
  rescan every ``max_interval`` seconds catches what inotify cannot see (a network file system written by
  another host). Elsewhere, or when inotify is refused: polling every ``interval`` seconds, backing off (doubling)
  to ``max_interval`` while nothing changes. Never a busy loop: between events the process sleeps in ``select``.
* **Complete** means: size, modification time and inode unchanged for ``stable`` seconds (a writer closing the
  file or renaming it into place, seen by inotify, shortens that to ``_CLOSED_GRACE``); then it is ingested. A
  file that fails (it does not parse yet: a writer that pauses, an XSpace cut mid-message) is tried again, backing
  off, and each change starts it afresh; one that still fails after ``settle`` seconds unchanged is reported once
  (``report.failed``), and tried again only if it changes.
* **Resume**: a file is ingested by content (``profile_id``: the SHA-256 of its bytes), so after a restart, or
  a kill -9, nothing is ingested twice and nothing is lost. Files the warehouse already holds at their path, size
  and time (``profiles.source_path``, ``file_bytes``, ``ingested_at`` after the file's modification) are not even
  read again.
* **Commits** are :func:`xprosql.ingest.ingest`'s: each profile whole, under the warehouse's commit lock, beside
  other ingests and compactions (``xprosql/warehouse.py``); ingest compacts by itself once
  ``AUTO_COMPACT_MIN_PROFILES`` profiles have landed since the last compaction (without waiting for a compaction
  another process runs).
* **Anomalies**: after each commit, ``sql/fleet/anomalies.sql`` compares each new profile with the recent ones of
  its job and host (median and MAD), on a thread of its own (a file landing meanwhile is committed without waiting;
  profiles committed during a check are checked together next); every row is an :class:`Anomaly` of the report
  after the check (``report.checked`` names the profiles checked). Profiles get the job tag (``job``) from
  ``tags``, else from ``xprosql.json`` files, else the log directory's name.
* **Stopping**: SIGINT or SIGTERM (or ``stop.set()``) lets the files being committed finish, and the anomaly
  checks of what was committed, then the generator yields a last report with ``signal`` set and ends; a second signal interrupts at once (what is committed stays
  whole: :class:`xprosql.ingest.IngestInterrupted`).
* **Bounded memory**: the state kept is one small record per profile file present in the directory (dropped when
  the file goes) and the totals; each report is handed out and forgotten.

Example:
    >>> for report in watch("logs/", into="run/", tags={"job": "bert"}):        # doctest: +SKIP
    ...     for anomaly in report.anomalies:
    ...         print(anomaly)
"""

from __future__ import annotations

import ctypes
import datetime as dt
import errno
import os
import select
import signal
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from xprosql.errors import IngestError, ParameterError, WarehouseError
from xprosql.ingest.batch import COMMIT_BATCH, IngestInterrupted, IngestReport, find_profiles, ingest, tags_for

__all__ = ["Anomaly", "CompactMode", "WatchReport", "WatchTotals", "watch"]

CompactMode = Literal["auto", "never"]

# A file its writer closed (or renamed into place) is read once it has been unchanged this long, seconds.
_CLOSED_GRACE = 0.2
# Seconds before files are tried again after the warehouse's disk was full.
_FULL_DISK_WAIT = 30.0
# The tag whose value names a profile's job (the anomalies' series) when the caller does not say.
_JOB_TAG = "job"
_ANOMALIES = "fleet.anomalies"


@dataclass(frozen=True)
class Anomaly:
    """One measure of one profile that deviates from its job's recent profiles (a row of ``fleet.anomalies``)."""

    series: str
    host: str | None
    profile_id: str
    time_ns: int | None  # the profile's start on the wall clock, ns since epoch
    metric: str  # step_time_ps, idle_share, exposed_collective_share, memory_peak_bytes, op_time_per_step_ps:<kind>:<op>
    kind: str  # step_time, idle, exposed_communication, memory_peak, op_time
    value: float
    window_median: float
    change: float | None  # value / window_median - 1
    robust_z: float | None  # (value - median) / (1.4826 MAD)
    direction: str  # higher or lower
    what: str  # the sentence naming what changed
    tag: str = _JOB_TAG

    def __str__(self) -> str:
        when = "" if self.time_ns is None else " at " + _iso(self.time_ns)
        return f"anomaly: {self.tag}={self.series} host {self.host or '-'} profile {self.profile_id}{when}: {self.what}"


@dataclass
class WatchTotals:
    """What a watch did since it started."""

    ingested: int = 0
    skipped: int = 0  # already present (by content)
    failed: int = 0  # reported failures: files broken past the settle time, and the anomaly checks that failed
    anomalies: int = 0
    compactions: int = 0
    vanished: int = 0  # files removed before they were complete
    retried: int = 0  # attempts that failed on a file not settled yet (still being written): tried again
    started: float = field(default_factory=time.time)  # wall clock, s since epoch

    def __str__(self) -> str:
        took = _duration(time.time() - self.started)
        extra = f", {self.compactions} compactions" if self.compactions else ""
        extra += f", {self.vanished} files removed before they were complete" if self.vanished else ""
        extra += f", {self.retried} attempts on files not complete yet retried" if self.retried else ""
        return (f"{self.ingested} ingested, {self.skipped} already present, {self.failed} failed, "
                f"{self.anomalies} anomalies in {took}{extra}")


@dataclass
class WatchReport(IngestReport):
    """One pass of a watch: the ingest report of the files that landed (``ingested``, ``skipped``, ``failed``,
    ``compaction``), the anomalies among the new profiles, and the totals so far. The last report of a watch
    that was stopped names the ``signal`` (``SIGINT``, ``SIGTERM``, or ``stop`` for the event)."""

    anomalies: list[Anomaly] = field(default_factory=list)
    totals: WatchTotals = field(default_factory=WatchTotals)
    signal: str | None = None
    #: True on the first report, empty: the watch is set up (its signal handlers are in place) and scans next
    started: bool = False
    #: profiles whose anomaly check ended in this pass (their anomalies are in ``anomalies``)
    checked: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [super().__str__(), *(str(a) for a in self.anomalies)]
        if self.signal is not None:
            lines.append(f"stopped by {self.signal}: {self.totals}")
        return "\n".join(lines)


@dataclass
class _File:
    """What the watcher knows of one profile file."""

    signature: tuple[int, int, int]  # size, modification time (ns), inode
    since: float  # monotonic time this signature was first seen
    state: Literal["pending", "done", "failed"] = "pending"
    tries: int = 0  # failed attempts on this signature
    next_try: float = 0.0  # monotonic time of the next attempt
    closed: bool = False  # inotify saw its writer close it (or a rename put it in place) since it last changed


def watch(
    logdir: str | os.PathLike[str],
    *,
    into: str | os.PathLike[str],
    tags: Mapping[str, str] | None = None,
    interval: float = 2.0,
    max_interval: float = 60.0,
    stable: float = 1.0,
    settle: float = 30.0,
    anomalies: bool = True,
    anomaly_params: Mapping[str, Any] | None = None,
    compact: CompactMode = "auto",
    keep_secrets: bool = False,
    inotify: bool = True,
    handle_signals: bool = True,
    stop: threading.Event | None = None,
) -> Iterator[WatchReport]:
    """Watch ``logdir`` and ingest every profile file that lands there into the warehouse at ``into``, for ever.

    A generator: it yields a first, empty :class:`WatchReport` (``started``) once it is set up, then one after each
    pass that ingested, skipped, failed or flagged something, and blocks (sleeping) in between. It ends after SIGINT / SIGTERM (when ``handle_signals``, in the
    main thread) or ``stop.set()``, with a last report whose ``signal`` says which and whose ``totals`` are
    the summary. Files present when it starts are ingested first (those already in the warehouse are skipped).

    Options:
        tags: tags of every profile, over those of ``xprosql.json`` files; a profile still without the anomalies'
            series tag (``job``) gets the log directory's name.
        interval: seconds between scans when polling (no inotify), doubling up to ``max_interval`` while nothing
            changes; with inotify, ``max_interval`` is the period of a safety rescan.
        stable: seconds a file's size and time must stay unchanged before it is read.
        settle: seconds a file that does not ingest must stay unchanged before it is reported as failed (once).
        anomalies: run ``fleet.anomalies`` on each new profile against its job's recent ones.
        anomaly_params: its parameters (``xprosql analyses fleet.anomalies``), e.g. ``{"mads": 5.0}``.
        compact: "auto" compacts once enough profiles landed since the last compaction; "never" leaves it to
            ``xprosql compact``.
        keep_secrets: store credentials as the files hold them (:func:`xprosql.ingest`).
        inotify: use inotify where the system has it; False polls.
        handle_signals: stop cleanly on SIGINT and SIGTERM (only in the main thread; restored on exit).
        stop: an event that stops the watch when set (from another thread).

    Raises:
        WarehouseError: ``logdir`` is not a directory, or ``into`` is a warehouse of an older xprosql.

    Example:
        >>> for report in watch("logs/", into="run/", interval=5.0):        # doctest: +SKIP
        ...     print(report)
    """
    root = Path(logdir).absolute()
    if not root.is_dir():
        raise WarehouseError(f"{logdir}: not a directory to watch")
    for name, value in (("interval", interval), ("max_interval", max_interval), ("stable", stable), ("settle", settle)):
        if not value >= 0:
            raise ParameterError(f"watch: {name} must be a number of seconds >= 0, not {value!r}")
    for key in tags or {}:
        if not key or "=" in key:
            raise ParameterError(f"watch: bad tag name {key!r}")
    params = dict(anomaly_params or {})
    if anomalies:
        _check_anomaly_params(params)
    series_tag = str(params.get("tag", _JOB_TAG))
    return _watch(root, into=Path(into), tags=dict(tags or {}), interval=interval, max_interval=max(max_interval, interval),
                  stable=stable, settle=settle, anomalies=anomalies, params=params, series_tag=series_tag,
                  compact=compact, keep_secrets=keep_secrets, use_inotify=inotify, handle_signals=handle_signals,
                  stop=stop)


def _watch(root: Path, *, into: Path, tags: dict[str, str], interval: float, max_interval: float, stable: float,
           settle: float, anomalies: bool, params: dict[str, Any], series_tag: str, compact: CompactMode,
           keep_secrets: bool, use_inotify: bool, handle_signals: bool, stop: threading.Event | None) -> Iterator[WatchReport]:
    totals = WatchTotals()
    state = _State(root, stable=stable, settle=settle, known=_known_files(into))
    halt = threading.Event()  # set by a signal, or forwarded from the caller's ``stop``
    wake = _Wake()
    signals = _Signals(halt, wake) if handle_signals and threading.current_thread() is threading.main_thread() else None
    if stop is not None:
        threading.Thread(target=_forward_stop, args=(stop, halt, wake), daemon=True, name="xprosql-watch-stop").start()
    notify = _Inotify.open(root) if use_inotify else None
    checker = _Checker(into, params, series_tag, wake) if anomalies else None
    try:
        yield WatchReport(totals=totals, started=True)
        poll = interval
        next_scan = 0.0  # scan at once
        while True:
            report = WatchReport(totals=totals)
            try:
                now = time.monotonic()
                if now >= next_scan or (notify is not None and notify.dirty):
                    if notify is not None:
                        notify.dirty = False
                    changed = state.scan(now)
                    if notify is not None:
                        next_scan = now + max_interval
                    else:
                        poll = interval if changed else min(poll * 2, max_interval)
                        next_scan = now + poll
                else:
                    state.recheck(now)
                if notify is not None:
                    for path in notify.closed_files:
                        state.mark_closed(path)
                    notify.closed_files.clear()
                if not halt.is_set():
                    interrupted = _ingest_ready(state, report, into=into, tags=tags, series_tag=series_tag,
                                                compact=compact, keep_secrets=keep_secrets, stop=halt)
                    if checker is not None and report.ingested:
                        checker.submit(item.profile_id for item in report.ingested)
                    if interrupted:
                        halt.set()
                if halt.is_set() and checker is not None:
                    checker.drain()  # the checks of what was committed: read-only, seconds
            except KeyboardInterrupt:  # a second signal, or Ctrl-C without our handler: what is committed stays whole
                halt.set()
            if checker is not None:
                checker.collect(report)
            totals.ingested += len(report.ingested)
            totals.skipped += len(report.skipped)
            totals.failed += len(report.failed)
            totals.anomalies += len(report.anomalies)
            totals.compactions += int(report.compaction is not None and report.compaction.files_written > 0)
            totals.vanished, totals.retried = state.vanished, state.retried
            if halt.is_set():
                report.signal = (signals.name if signals is not None else None) or "stop"
                yield report
                return
            if report.ingested or report.skipped or report.failed or report.anomalies or report.checked:
                yield report
            if halt.is_set():  # set while the report was being read
                continue
            timeout = max(0.0, min(next_scan, state.next_deadline(interval)) - time.monotonic())
            _wait(timeout, wake, notify)
    finally:
        if checker is not None:
            checker.close()
        if notify is not None:
            notify.close()
        if signals is not None:
            signals.restore()
        wake.close()


class _Wake:
    """A pipe that wakes the sleeping watcher (from a signal handler or another thread); closed once, safely."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)
        self.lock = threading.Lock()
        self.closed = False

    def ring(self) -> None:
        # Never blocks (a signal handler calls it); a full pipe already wakes the reader.
        if not self.closed:
            try:
                os.write(self.write_fd, b"x")
            except OSError:
                pass

    def drain(self) -> None:
        try:
            while os.read(self.read_fd, 4096):
                pass
        except OSError:
            pass

    def close(self) -> None:
        with self.lock:
            self.closed = True
            os.close(self.read_fd)
            os.close(self.write_fd)


def _check_anomaly_params(params: Mapping[str, Any]) -> None:
    """The anomaly parameters, checked now rather than at the first profile (the library's own checks)."""
    from xprosql.engine.library import library

    library().bind(_ANOMALIES, dict(params))


def _forward_stop(stop: threading.Event, halt: threading.Event, wake: _Wake) -> None:
    """Stop the watch when the caller's ``stop`` is set from another thread (waits without waking up)."""
    stop.wait()
    with wake.lock:  # not once the watch has closed its pipe: the descriptor may be another file's by then
        halt.set()
        wake.ring()


def _wait(timeout: float, wake: _Wake, notify: _Inotify | None) -> None:
    """Sleep until a wake-up byte, an inotify event or ``timeout`` seconds."""
    readable = [wake.read_fd] + ([notify.fd] if notify is not None else [])
    try:
        ready, _, _ = select.select(readable, [], [], timeout)
    except InterruptedError:  # a signal: its handler rang
        return
    if wake.read_fd in ready:
        wake.drain()
    if notify is not None and notify.fd in ready:
        notify.read()


class _Signals:
    """SIGINT and SIGTERM stop the watch after the files being committed; a second one interrupts at once."""

    def __init__(self, stop: threading.Event, wake: _Wake) -> None:
        self.stop, self.wake = stop, wake
        self.name: str | None = None
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, number: int, frame: object) -> None:
        if self.stop.is_set() and self.name is not None:
            raise KeyboardInterrupt  # a second signal: stop now (ingest keeps what it committed whole)
        self.name = signal.Signals(number).name
        self.stop.set()
        self.wake.ring()

    def restore(self) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)


class _State:
    """The profile files of the log directory and what became of each."""

    def __init__(self, root: Path, *, stable: float, settle: float, known: Mapping[str, tuple[int, int]]) -> None:
        self.root, self.stable, self.settle = root, stable, settle
        self.known = dict(known)  # source path -> (file bytes, ingested at, ns): committed before this watch started
        self.files: dict[str, _File] = {}
        self.problems: set[tuple[str, str]] = set()  # directory problems already reported
        self.new_problems: list[tuple[str, str]] = []
        self.vanished = 0
        self.retried = 0
        self.first = True

    def scan(self, now: float) -> bool:
        """List the profile files; True when the list or a file changed."""
        problems: list[tuple[str, str]] = []
        try:
            found = find_profiles(self.root, problems=problems)
        except IngestError:  # no profiles (yet), or the directory is gone: nothing to do until one lands
            found = []
        for problem in problems:
            if problem not in self.problems:
                self.problems.add(problem)
                self.new_problems.append(problem)
        paths = {str(p) for p in found if not p.name.startswith(".")}
        changed = False
        for gone in set(self.files) - paths:
            if self.files.pop(gone).state == "pending":
                self.vanished += 1
            changed = True
        for path in paths:
            changed |= self._observe(path, now)
        self.known.clear()  # only the files present at the first scan can have been committed before it
        self.first = False
        return changed

    def _observe(self, path: str, now: float) -> bool:
        """Stat one file; True when it is new or changed."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        signature = (st.st_size, st.st_mtime_ns, st.st_ino)
        entry = self.files.get(path)
        if entry is not None and entry.signature == signature:
            return False
        since = now
        if entry is None and self.first and time.time_ns() - st.st_mtime_ns >= self.stable * 1e9:
            since = now - self.stable  # unchanged since before the watch started: complete
        fresh = _File(signature, since)
        known = self.known.get(path)
        if known is not None and known[0] == st.st_size and st.st_mtime_ns <= known[1]:
            fresh.state = "done"  # committed from this very file by an earlier run
        self.files[path] = fresh
        return True

    def recheck(self, now: float) -> None:
        """Stat the files not ingested yet: a change starts their wait afresh."""
        for path, entry in list(self.files.items()):
            if entry.state == "pending" or entry.state == "failed":
                self._observe(path, now)  # a change: a fresh record, waiting again (closed once it is closed again)

    def mark_closed(self, path: str) -> None:
        entry = self.files.get(path)
        if entry is not None and entry.state == "pending":
            entry.closed = True

    def ready(self, now: float) -> list[str]:
        """Files unchanged long enough and due for an attempt, oldest first."""
        out = []
        for path, entry in self.files.items():
            if entry.state != "pending" or now < entry.next_try:
                continue
            wait = min(self.stable, _CLOSED_GRACE) if entry.closed else self.stable
            if now - entry.since >= wait:
                out.append(path)
        return sorted(out, key=lambda p: (self.files[p].since, p))

    def next_deadline(self, interval: float) -> float:
        """When the next pending file comes due (or a failing one must be looked at again)."""
        deadline = float("inf")
        for entry in self.files.values():
            if entry.state != "pending":
                continue
            wait = min(self.stable, _CLOSED_GRACE) if entry.closed else self.stable
            due = max(entry.since + wait, entry.next_try)
            if entry.tries:  # a change must not wait for the back-off to be noticed
                due = min(due, time.monotonic() + interval)
            deadline = min(deadline, due)
        return deadline

    def postpone(self, path: str, seconds: float) -> None:
        """Try ``path`` again in ``seconds`` (a full disk), without counting a failed attempt."""
        entry = self.files.get(path)
        if entry is not None:
            entry.next_try = time.monotonic() + seconds

    def done(self, path: str) -> None:
        if path in self.files:
            self.files[path].state = "done"

    def failed(self, path: str, now: float) -> bool:
        """An attempt failed: True when the file has been unchanged past the settle time (report it, once)."""
        entry = self.files.get(path)
        if entry is None:
            return True
        entry.tries += 1
        if now - entry.since >= self.settle:
            entry.state = "failed"
            return True
        self.retried += 1
        backoff = max(self.stable, _CLOSED_GRACE) * 2 ** min(entry.tries, 16)
        entry.next_try = now + min(backoff, max(self.settle / 4, self.stable))
        return False


def _known_files(into: Path) -> dict[str, tuple[int, int]]:
    """Files the warehouse was ingested from: source path -> (file bytes, ingested at in ns)."""
    from xprosql.warehouse import Warehouse

    warehouse = Warehouse(into)
    if warehouse.is_older_format():
        raise WarehouseError(f"{into}: a warehouse of an older xprosql (hive partitions, not Delta tables); convert it "
                             f"with `xprosql upgrade {into}` first")
    if not warehouse.is_warehouse() or not warehouse.profile_ids():
        return {}
    from xprosql.run import load

    with load(into) as run:
        rows = run.sql("SELECT source_path, file_bytes, epoch_ns(ingested_at) FROM profiles").rows()
    return {path: (int(size or -1), int(at or 0)) for path, size, at in rows if path is not None}


def _ingest_ready(state: _State, report: WatchReport, *, into: Path, tags: Mapping[str, str], series_tag: str,
                  compact: CompactMode, keep_secrets: bool, stop: threading.Event) -> bool:
    """Ingest the files that are due, a commit batch at a time, grouped by their tags; True when interrupted."""
    for problem in state.new_problems:
        report.failed.append(problem)
    state.new_problems.clear()
    ready = state.ready(time.monotonic())
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for path in ready:
        try:
            own = tags_for(path, root=state.root, tags=tags)
        except IngestError as exc:
            if state.failed(path, time.monotonic()):
                report.failed.append((path, f"not ingested: {exc.problem}"))
            continue
        own.setdefault(series_tag, state.root.name)
        groups.setdefault(tuple(sorted(own.items())), []).append(path)
    for key, paths in groups.items():
        for start in range(0, len(paths), COMMIT_BATCH):
            if stop.is_set():  # the files not started wait for the next watch
                return False
            chunk = paths[start:start + COMMIT_BATCH]
            interrupted = False
            try:
                part = ingest(chunk, into=into, tags=dict(key), progress=False,
                              compact="auto" if compact == "auto" else False, keep_secrets=keep_secrets)
            except IngestInterrupted as exc:
                part, interrupted = exc.report, True
            if part.stopped:  # a full disk: said once per try; this chunk waits and is tried again, not reported failed
                report.stopped = part.stopped
                full = {path for path, _ in part.failed}
                part.failed = [(path, reason) for path, reason in part.failed if path not in chunk]
                for path in set(chunk) - {item.path for item in [*part.ingested, *part.skipped]}:
                    state.postpone(path, _FULL_DISK_WAIT if path in full or path in part.not_done else 0.0)
            _merge(state, report, part, chunk)
            if interrupted:
                return True
            if part.stopped:
                return False
    return False


def _merge(state: _State, report: WatchReport, part: IngestReport, chunk: list[str]) -> None:
    """Fold one ingest's outcome into the pass's report: a failure counts only once the file is past settling."""
    now = time.monotonic()
    for item in part.ingested:
        state.done(item.path)
        report.ingested.append(item)
    for item in part.skipped:
        state.done(item.path)
        report.skipped.append(item)
    for path, reason in part.failed:
        if path not in chunk:  # the warehouse (a compaction that could not run): said as it is
            report.failed.append((path, reason))
        elif not os.path.exists(path):
            state.files.pop(path, None)
            state.vanished += 1
        elif state.failed(path, now):
            report.failed.append((path, f"{reason} (unchanged for {_duration(now - state.files[path].since)})"))
    if part.compaction is not None:
        report.compaction = part.compaction


class _Checker:
    """Runs the anomaly checks on a thread of its own, so that a file landing meanwhile is committed without waiting
    for them: profiles committed while a check runs are checked together next. Its results go into the next
    report (the watcher is woken for them)."""

    def __init__(self, into: Path, params: Mapping[str, Any], series_tag: str, wake: _Wake) -> None:
        self.into, self.params, self.series_tag, self.wake = into, params, series_tag, wake
        self.condition = threading.Condition()
        self.pending: set[str] = set()
        self.busy = self.closed = False
        self.anomalies: list[Anomaly] = []
        self.failed: list[tuple[str, str]] = []
        self.checked: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True, name="xprosql-watch-anomalies")
        self.thread.start()

    def submit(self, profile_ids: Iterable[str]) -> None:
        with self.condition:
            self.pending.update(profile_ids)
            self.condition.notify_all()

    def _run(self) -> None:
        while True:
            with self.condition:
                while not self.pending and not self.closed:
                    self.condition.wait()
                if not self.pending:
                    return
                batch, self.pending, self.busy = self.pending, set(), True
            anomalies: list[Anomaly] = []
            failed: list[tuple[str, str]] = []
            try:
                anomalies = _anomalies(batch, into=self.into, params=self.params, series_tag=self.series_tag)
            except Exception as exc:  # the profiles are committed: a check that fails is said, and the watch goes on
                failed.append((str(self.into), f"anomaly check of {len(batch)} new profiles failed: "
                                               f"{type(exc).__name__}: {exc}"))
            with self.condition:
                self.anomalies += anomalies
                self.failed += failed
                self.checked += sorted(batch)
                self.busy = False
                self.condition.notify_all()
            self.wake.ring()

    def collect(self, report: WatchReport) -> None:
        """Move the results of the checks that ended into ``report``."""
        with self.condition:
            report.anomalies += self.anomalies
            report.failed += self.failed
            report.checked += self.checked
            self.anomalies, self.failed, self.checked = [], [], []

    def drain(self) -> None:
        """Wait for the checks submitted so far."""
        with self.condition:
            while (self.pending or self.busy) and self.thread.is_alive():
                self.condition.wait(1.0)

    def close(self) -> None:
        with self.condition:
            self.closed = True
            self.pending.clear()
            self.condition.notify_all()
        self.thread.join(5)  # idle after a drain; after a second signal, a check still running is left behind


def _anomalies(new: set[str], *, into: Path, params: Mapping[str, Any], series_tag: str) -> list[Anomaly]:
    """fleet.anomalies over the ``new`` profiles and the recent profiles of their series and host: the rows of the
    new ones."""
    from xprosql.engine.library import library
    from xprosql.run import load

    window = int(params.get("window", library().parameters(_ANOMALIES)["window"].default))
    with load(into) as run:  # (fleet.snapshots and fleet.anomalies name no profiles without rows: no warnings)
        points = run.analysis("fleet.snapshots", tag=series_tag).arrow().select(["job", "host", "time_ns", "profile_id"])
        series: dict[tuple[Any, Any], list[tuple[int, str]]] = {}
        for job, host, time_ns, profile_id in zip(*(c.to_pylist() for c in points.columns), strict=True):
            if job is not None:
                series.setdefault((job, host), []).append((time_ns, profile_id))
        chosen: set[str] = set()
        for members in series.values():
            members.sort()
            for i, (_, profile_id) in enumerate(members):
                if profile_id in new:  # it and the window before it
                    chosen.update(pid for _, pid in members[max(0, i - window):i + 1])
        if not chosen:
            return []
        table = run.analysis(_ANOMALIES, profiles=sorted(chosen), **params).arrow()
    return [Anomaly(series=row["series"], host=row["host"], profile_id=row["profile_id"], time_ns=row["time_ns"],
                    metric=row["metric"], kind=row["kind"], value=row["value"], window_median=row["window_median"],
                    change=row["change"], robust_z=row["robust_z"], direction=row["direction"], what=row["what"],
                    tag=series_tag)
            for row in table.to_pylist() if row["profile_id"] in new]


# -- inotify, through ctypes (Linux) ------------------------------------------------------------------------------

_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ISDIR = 0x40000000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
# Not IN_MODIFY: a large file written in small pieces would wake the watcher per write. A file being written is
# looked at again on a timer (``stable``) instead; its close (IN_CLOSE_WRITE) or its rename into place ends the wait.
_MASK = (_IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF
         | _IN_MOVE_SELF)
_EVENT = struct.Struct("iIII")


class _Inotify:
    """Directory-change notifications for a tree (every directory watched; new ones added as they appear)."""

    def __init__(self, fd: int, libc: Any, root: Path) -> None:
        self.fd, self.libc, self.root = fd, libc, root
        self.directories: dict[int, str] = {}
        self.dirty = True
        self.closed_files: list[str] = []

    @classmethod
    def open(cls, root: Path) -> _Inotify | None:
        """Inotify on ``root``'s tree; None where the system has none or refuses (too many watches): then polling."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        notify = cls(fd, libc, root)
        if not notify.add_tree(str(root)):
            notify.close()
            return None
        return notify

    def add_tree(self, top: str) -> bool:
        """Watch ``top`` and every directory below it (not through links); False when the kernel refuses."""
        for directory, subdirectories, _ in os.walk(top):
            subdirectories[:] = [d for d in subdirectories if not os.path.islink(os.path.join(directory, d))]
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(directory), _MASK)
            if wd < 0:
                if ctypes.get_errno() in (errno.ENOSPC, errno.ENOMEM, errno.EACCES) and directory == top == str(self.root):
                    return False
                continue  # a directory gone meanwhile, or unreadable: the scan reports what it cannot read
            self.directories[wd] = directory
        return True

    def read(self) -> None:
        """Drain the events: a change marks the tree dirty; a new directory is watched; a closed file is noted."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not data:
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size:offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                self.dirty = True
                if mask & _IN_Q_OVERFLOW:  # events were lost: watch every directory again (a rescan follows)
                    self.add_tree(str(self.root))
                    continue
                if mask & _IN_IGNORED:
                    self.directories.pop(wd, None)
                    continue
                directory = self.directories.get(wd)
                if directory is None or not name:
                    continue
                path = os.path.join(directory, os.fsdecode(name))
                if mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_MOVED_TO):
                    self.add_tree(path)
                elif mask & (_IN_CLOSE_WRITE | _IN_MOVED_TO):
                    self.closed_files.append(path)

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def _iso(time_ns: int) -> str:
    return dt.datetime.fromtimestamp(time_ns / 1e9, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"
