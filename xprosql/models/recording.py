"""Keys of xprosql's own CUPTI recording (a Kineto-format trace): written by :mod:`xprosql.cupti`, read by ingest."""

from __future__ import annotations

__all__ = ["PM_SAMPLE_ARG", "PM_SAMPLING_CATEGORY", "RECORDER_KEY"]

# Top-level key of the trace holding what the recorder knows (skipped kinds, PM sampling details).
RECORDER_KEY = "xprosqlRecorder"
# PM samples travel as X events of this category; args hold the sample index under PM_SAMPLE_ARG
# and one number per metric (CUPTI metric names all contain "__", so no metric is called that).
PM_SAMPLING_CATEGORY = "pm_sampling"
PM_SAMPLE_ARG = "sample"
