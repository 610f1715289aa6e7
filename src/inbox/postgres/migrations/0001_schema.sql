-- edi-inbox on PostgreSQL, migration 1: the same tables and columns as the SQLite inbox (after
-- its migration 5), in PostgreSQL's types. Run with search_path set to the inbox's own schema.
-- Later changes are new files appended to MIGRATIONS in src/inbox/postgres/mod.rs; this one is
-- never edited once released (schema_migrations counts what is applied).

-- The duplicate-detection window: one row per key ever accepted, until purged. Its primary key
-- is the decision: INSERT ... ON CONFLICT ON CONSTRAINT inbox_key DO NOTHING takes it or not.
CREATE TABLE inbox (
    sender          text NOT NULL,          -- UNB S002/0004
    recipient       text NOT NULL,          -- UNB S003/0010
    control_ref     text NOT NULL,          -- UNB 0020
    sha256          text NOT NULL,          -- payload hash of the accepted copy
    source_file     text NOT NULL,
    received_at     timestamptz NOT NULL,   -- the server's clock: hosts' clocks differ
    interchange_id  bigint NOT NULL,        -- interchanges.id (no foreign key: purge keeps the record)
    CONSTRAINT inbox_key PRIMARY KEY (sender, recipient, control_ref)
);
CREATE INDEX inbox_received_at ON inbox (received_at);

CREATE SEQUENCE interchanges_id_seq AS bigint;

-- The business record: every accepted interchange, its envelope and its bytes, stored once.
CREATE TABLE interchanges (
    id                  bigint PRIMARY KEY,
    sender              text NOT NULL,
    sender_qualifier    text,
    sender_routing      text,
    recipient           text NOT NULL,
    recipient_qualifier text,
    recipient_routing   text,
    control_ref         text NOT NULL,
    syntax_id           text NOT NULL,
    syntax_version      text NOT NULL,
    prepared_date       text NOT NULL,
    prepared_time       text NOT NULL,
    recipient_ref       text,
    application_ref     text,
    priority            text,
    ack_request         text,
    agreement_id        text,
    test_indicator      text,
    sha256              text NOT NULL,
    source_file         text NOT NULL,
    source_offset       bigint NOT NULL,
    received_at         timestamptz NOT NULL,
    raw                 bytea NOT NULL,      -- UNA (if any) .. UNZ, compressed per raw_codec
    raw_codec           text NOT NULL DEFAULT 'none'
);
ALTER SEQUENCE interchanges_id_seq OWNED BY interchanges.id;
CREATE INDEX interchanges_key ON interchanges (sender, recipient, control_ref);

CREATE TABLE messages (
    id               bigserial PRIMARY KEY,
    interchange_id   bigint NOT NULL REFERENCES interchanges (id),
    position         integer NOT NULL,
    reference        text NOT NULL,
    message_type     text NOT NULL,
    version          text NOT NULL,
    release          text NOT NULL,
    agency           text NOT NULL,
    association_code text,
    group_ref        text,
    segments         integer NOT NULL,
    raw_start        bigint NOT NULL,
    raw_end          bigint NOT NULL
);
CREATE INDEX messages_interchange ON messages (interchange_id);

CREATE TABLE outbox (
    id            bigserial PRIMARY KEY,
    message_id    bigint NOT NULL REFERENCES messages (id),
    event_type    text NOT NULL,
    created_at    timestamptz NOT NULL,
    published_at  timestamptz
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;

CREATE TABLE sightings (
    id             bigserial PRIMARY KEY,
    sender         text NOT NULL,
    recipient      text NOT NULL,
    control_ref    text NOT NULL,
    status         text NOT NULL CHECK (status IN ('duplicate', 'drift')),
    sha256         text NOT NULL,
    stored_sha256  text NOT NULL,
    source_file    text NOT NULL,
    seen_at        timestamptz NOT NULL,
    payload        bytea
);
CREATE INDEX sightings_key ON sightings (sender, recipient, control_ref);
CREATE INDEX sightings_seen_at ON sightings (seen_at);

CREATE TABLE rejected_files (
    id             bigserial PRIMARY KEY,
    source_file    text NOT NULL,
    file_sha256    text NOT NULL,
    file_size      bigint NOT NULL,
    bytes          bytea,
    truncated      boolean NOT NULL,
    first_seen_at  timestamptz NOT NULL,
    last_seen_at   timestamptz NOT NULL,
    times_seen     integer NOT NULL DEFAULT 1,
    UNIQUE (source_file, file_sha256)
);
CREATE INDEX rejected_files_last_seen_at ON rejected_files (last_seen_at);

CREATE TABLE rejections (
    id             bigserial PRIMARY KEY,
    source_file    text NOT NULL,
    file_sha256    text NOT NULL,
    error          text NOT NULL,
    kind           text NOT NULL,
    byte_offset    bigint NOT NULL,
    first_seen_at  timestamptz NOT NULL,
    last_seen_at   timestamptz NOT NULL,
    times_seen     integer NOT NULL DEFAULT 1,
    file_size      bigint NOT NULL,
    truncated      boolean NOT NULL,
    file_id        bigint REFERENCES rejected_files (id),
    UNIQUE (source_file, file_sha256, kind, byte_offset)
);
CREATE INDEX rejections_file ON rejections (file_id);

-- Cumulative counters for monitoring, one row per host and name, summed when read: a row that
-- every host updated would make the hosts wait for each other at every commit.
CREATE TABLE counters (
    host   text NOT NULL,
    name   text NOT NULL,
    value  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (host, name)
);
