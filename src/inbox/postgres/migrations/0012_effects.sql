-- The operator's side effects (--effects DIR, docs/effects.md).
--
-- An interchange whose side effect failed on its data is refused: none of it applied, and kept
-- here whole (its bytes as received, zstd) with the statement that failed, the server's
-- SQLSTATE and message, and when and how often it was seen, until `reapply --refused` decides
-- it again (resolved_at, resolved_as: new, duplicate or drift). One open refusal per key and
-- content: an identical resend only counts again.
CREATE TABLE refusals (
    id            bigserial PRIMARY KEY,
    sender        text NOT NULL,
    recipient     text NOT NULL,
    control_ref   text NOT NULL,
    sha256        text NOT NULL,
    source_file   text NOT NULL,
    raw           bytea NOT NULL,
    raw_codec     text NOT NULL DEFAULT 'zstd',
    statement     text NOT NULL,
    message_ref   text,
    code          text NOT NULL,
    error         text NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    times_seen    integer NOT NULL DEFAULT 1,
    resolved_at   timestamptz,
    resolved_as   text
);
CREATE UNIQUE INDEX refusals_open ON refusals (sender, recipient, control_ref, sha256)
    WHERE resolved_at IS NULL;
CREATE INDEX refusals_seen ON refusals (last_seen_at);

-- The operator's own migrations (effects/migrations/NNNN_name.sql), each applied once, with
-- the checksum of the file as applied: an edited applied file stops the start-up.
CREATE TABLE effect_migrations (
    number     integer PRIMARY KEY,
    file       text NOT NULL,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- The mapping each applied message ran (the checksum of _interchange.sql and its type's file),
-- so that `reapply --applied --changed` finds the messages a changed mapping has not run over.
CREATE TABLE message_effects (
    message_id bigint PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    mapping    text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
