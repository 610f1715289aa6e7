-- The operator's side effects (--effects DIR, docs/effects.md).
--
-- An interchange whose side effect failed on its data is refused: none of it applied, and kept
-- here whole (its bytes as received, zstd) with the statement that failed, the database's code
-- and message, and when and how often it was seen, until `reapply --refused` decides it again
-- (resolved_at, resolved_as: new, duplicate or drift). One open refusal per key and content: an
-- identical resend only counts again.
CREATE TABLE refusals (
    id            INTEGER PRIMARY KEY,
    sender        TEXT NOT NULL,
    recipient     TEXT NOT NULL,
    control_ref   TEXT NOT NULL,
    sha256        TEXT NOT NULL,
    source_file   TEXT NOT NULL,
    raw           BLOB NOT NULL,
    raw_codec     TEXT NOT NULL DEFAULT 'zstd',
    statement     TEXT NOT NULL,
    message_ref   TEXT,
    code          TEXT NOT NULL,
    error         TEXT NOT NULL,
    first_seen_at TEXT NOT NULL,
    last_seen_at  TEXT NOT NULL,
    times_seen    INTEGER NOT NULL DEFAULT 1,
    resolved_at   TEXT,
    resolved_as   TEXT
);
CREATE UNIQUE INDEX refusals_open ON refusals (sender, recipient, control_ref, sha256)
    WHERE resolved_at IS NULL;
CREATE INDEX refusals_seen ON refusals (last_seen_at);

-- The operator's own migrations (effects/migrations/NNNN_name.sql), each applied once, with
-- the checksum of the file as applied: an edited applied file stops the start-up.
CREATE TABLE effect_migrations (
    number     INTEGER PRIMARY KEY,
    file       TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    applied_at TEXT NOT NULL
);

-- The mapping each applied message ran (the checksum of _interchange.sql and its type's file),
-- so that `reapply --applied --changed` finds the messages a changed mapping has not run over.
CREATE TABLE message_effects (
    message_id INTEGER PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    mapping    TEXT NOT NULL,
    applied_at TEXT NOT NULL
);
