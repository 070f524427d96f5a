-- ops._nesting: the parent of each event among the events of its line, nesting by timespan:
-- the op tree of a line (XLA ops in fusions, PyTorch ops calling ops).
--
-- Reads `nesting_events` (profile_id, track_id, event_id, start_ps, dur_ps), which the
-- including module defines before the include. Events are ordered by start (longer
-- first); an event's depth is the number of earlier events still open when it starts,
-- and its parent the latest earlier event one level up. An event that ends after its
-- parent (clock rounding) stays its child. Only lines where some event starts before an
-- earlier one ends nest at all: events of other lines have no row.
--
-- Input: nesting_events AS SELECT profile_id, track_id, event_id, start_ps, dur_ps FROM events
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   track_id  INTEGER  tracks.track_id of the line
--   event_id  BIGINT  events.event_id of a nested or nesting event
--   depth  BIGINT  events open around it when it starts (0: a root)
--   parent_id  BIGINT  events.event_id of the event it is nested in; NULL for roots
WITH _nesting_lines AS (
    -- Some event starts before an earlier one ends exactly when one starts before its predecessor ends.
    SELECT DISTINCT profile_id, track_id
    FROM (
        SELECT profile_id, track_id, start_ps,
            lag(start_ps + dur_ps) OVER (PARTITION BY profile_id, track_id ORDER BY start_ps, dur_ps DESC, event_id)
                AS previous_end_ps
        FROM nesting_events
        WHERE start_ps IS NOT NULL
    )
    WHERE previous_end_ps > start_ps
),
_ordered AS MATERIALIZED (
    SELECT
        profile_id, track_id, event_id, start_ps, dur_ps,
        row_number() OVER (PARTITION BY profile_id, track_id ORDER BY start_ps, dur_ps DESC, event_id) AS ord
    FROM nesting_events SEMI JOIN _nesting_lines USING (profile_id, track_id)
    WHERE start_ps IS NOT NULL
),
_points AS (
    SELECT profile_id, track_id, event_id, ord, start_ps AS at_ps, 0 AS is_end FROM _ordered
    UNION ALL
    SELECT profile_id, track_id, event_id, ord, start_ps + dur_ps, 1 FROM _ordered
),
-- The ends before a start are its position among all points less the starts up to it (ord: starts keep their
-- order among the points, and the order is total), so its depth is ord - 1 - (position - ord): a row number, where a
-- running sum of the ends was a window aggregate three times as slow.
_depths AS MATERIALIZED (
    SELECT
        profile_id, track_id, event_id, ord,
        2 * ord - 1 - row_number() OVER (PARTITION BY profile_id, track_id ORDER BY at_ps, ord, is_end) AS depth,
        is_end
    FROM _points
    QUALIFY is_end = 0
),
-- Each event at depth d marks level d; each event below is nested in the latest mark at its depth - 1 before it.
_marks AS (
    SELECT profile_id, track_id, depth AS level, ord, event_id AS mark_id FROM _depths
)
SELECT profile_id, track_id, event_id, depth, NULL::BIGINT AS parent_id FROM _depths WHERE depth = 0
UNION ALL
SELECT c.profile_id, c.track_id, c.event_id, c.depth, m.mark_id AS parent_id
FROM (SELECT profile_id, track_id, event_id, ord, depth, depth - 1 AS level FROM _depths WHERE depth > 0) AS c
ASOF LEFT JOIN _marks AS m
  ON m.profile_id = c.profile_id AND m.track_id = c.track_id AND m.level = c.level AND c.ord >= m.ord
