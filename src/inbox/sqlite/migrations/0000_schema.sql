-- edi-inbox schema, migration 0. Later changes are new migrations appended in src/inbox/sqlite/migrations.rs;
-- this file is never edited once released (PRAGMA user_version counts what is applied).

-- The duplicate-detection window: one row per key ever accepted, until purged.
-- The primary key is the decision: INSERT ... ON CONFLICT DO NOTHING either takes it or not.
CREATE TABLE inbox (
    sender          TEXT NOT NULL,      -- UNB S002/0004
    recipient       TEXT NOT NULL,      -- UNB S003/0010
    control_ref     TEXT NOT NULL,      -- UNB 0020
    sha256          TEXT NOT NULL,      -- payload hash of the accepted copy
    source_file     TEXT NOT NULL,
    received_at     TEXT NOT NULL,      -- RFC 3339 UTC, fixed width, so text order is time order
    interchange_id  INTEGER NOT NULL,   -- interchanges.id (no foreign key: purge keeps the record)
    PRIMARY KEY (sender, recipient, control_ref)
) WITHOUT ROWID;
CREATE INDEX inbox_received_at ON inbox (received_at);

-- The business record: every accepted interchange, its envelope and its bytes, stored once.
CREATE TABLE interchanges (
    id                  INTEGER PRIMARY KEY,
    sender              TEXT NOT NULL,  -- 0004
    sender_qualifier    TEXT,           -- S002/0007
    sender_routing      TEXT,           -- S002/0008
    recipient           TEXT NOT NULL,  -- 0010
    recipient_qualifier TEXT,           -- S003/0007
    recipient_routing   TEXT,           -- S003/0014
    control_ref         TEXT NOT NULL,  -- 0020
    syntax_id           TEXT NOT NULL,  -- S001/0001
    syntax_version      TEXT NOT NULL,  -- S001/0002
    prepared_date       TEXT NOT NULL,  -- S004/0017
    prepared_time       TEXT NOT NULL,  -- S004/0019
    recipient_ref       TEXT,           -- S005/0022
    application_ref     TEXT,           -- 0026
    priority            TEXT,           -- 0029
    ack_request         TEXT,           -- 0031
    agreement_id        TEXT,           -- 0032
    test_indicator      TEXT,           -- 0035
    sha256              TEXT NOT NULL,
    source_file         TEXT NOT NULL,
    source_offset       INTEGER NOT NULL,
    received_at         TEXT NOT NULL,
    raw                 BLOB NOT NULL   -- UNA (if any) .. UNZ as it stood in the file
);
CREATE INDEX interchanges_key ON interchanges (sender, recipient, control_ref);

-- One row per message; its bytes are a range of interchanges.raw, not a second copy.
CREATE TABLE messages (
    id               INTEGER PRIMARY KEY,
    interchange_id   INTEGER NOT NULL REFERENCES interchanges (id),
    position         INTEGER NOT NULL,  -- 1-based order within the interchange
    reference        TEXT NOT NULL,     -- UNH 0062
    message_type     TEXT NOT NULL,     -- S009/0065
    version          TEXT NOT NULL,     -- S009/0052
    release          TEXT NOT NULL,     -- S009/0054
    agency           TEXT NOT NULL,     -- S009/0051
    association_code TEXT,              -- S009/0057
    group_ref        TEXT,              -- UNG 0048
    segments         INTEGER NOT NULL,  -- UNT 0074, checked
    raw_start        INTEGER NOT NULL,  -- byte range of UNH..UNT within interchanges.raw
    raw_end          INTEGER NOT NULL
);
CREATE INDEX messages_interchange ON messages (interchange_id);

-- The transactional outbox: one event per message, written in the same transaction as the
-- message; a downstream publisher sets published_at.
CREATE TABLE outbox (
    id            INTEGER PRIMARY KEY,
    message_id    INTEGER NOT NULL REFERENCES messages (id),
    event_type    TEXT NOT NULL,        -- e.g. edifact.INVOIC.received
    created_at    TEXT NOT NULL,
    published_at  TEXT
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;

-- Every later sighting of a key already in the inbox: an exact redelivery (duplicate) or the
-- same key with other content (drift, whose bytes are kept in full for a person to look at).
CREATE TABLE sightings (
    id             INTEGER PRIMARY KEY,
    sender         TEXT NOT NULL,
    recipient      TEXT NOT NULL,
    control_ref    TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('duplicate', 'drift')),
    sha256         TEXT NOT NULL,       -- hash of this copy
    stored_sha256  TEXT NOT NULL,       -- hash of the copy accepted first
    source_file    TEXT NOT NULL,
    seen_at        TEXT NOT NULL,
    payload        BLOB                 -- drift only
);
CREATE INDEX sightings_key ON sightings (sender, recipient, control_ref);
CREATE INDEX sightings_seen_at ON sightings (seen_at);

-- Input that was rejected: nothing is lost even without --quarantine. One row per file path and
-- content; seeing the same broken file again counts it rather than storing it again.
CREATE TABLE rejections (
    id             INTEGER PRIMARY KEY,
    source_file    TEXT NOT NULL,
    file_sha256    TEXT NOT NULL,
    error          TEXT NOT NULL,
    kind           TEXT NOT NULL,
    byte_offset    INTEGER NOT NULL,
    first_seen_at  TEXT NOT NULL,
    last_seen_at   TEXT NOT NULL,
    times_seen     INTEGER NOT NULL DEFAULT 1,
    file_size      INTEGER NOT NULL,
    bytes          BLOB,                -- the file, up to the size limit
    truncated      INTEGER NOT NULL,    -- 1 where bytes holds only the start of the file
    UNIQUE (source_file, file_sha256, kind, byte_offset)
);
CREATE INDEX rejections_last_seen_at ON rejections (last_seen_at);
