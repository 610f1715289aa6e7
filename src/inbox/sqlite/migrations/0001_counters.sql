-- Migration 1: cumulative counters for monitoring (Prometheus counters must never go down, and
-- purge deletes the sightings and rejections they could otherwise be counted from).
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
