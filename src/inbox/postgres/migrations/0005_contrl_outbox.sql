-- The CONTRLs to deliver (issue 15): one event per sending of an acknowledgement, written in the
-- transaction that made it (send 1) or that decided a redelivery of its interchange (send 2,
-- 3, ...: the same bytes again), with the publisher's bookkeeping of the message outbox.
CREATE TABLE contrl_outbox (
    id                  bigserial PRIMARY KEY,
    acknowledgement_id  bigint NOT NULL REFERENCES acknowledgements (id),
    send                integer NOT NULL,
    event_type          text NOT NULL,
    created_at          timestamptz NOT NULL,
    published_at        timestamptz,
    attempts            integer NOT NULL DEFAULT 0,
    last_error          text,
    last_attempt_at     timestamptz,
    last_attempt_pass   text,
    failed_at           timestamptz,
    UNIQUE (acknowledgement_id, send)
);
CREATE INDEX contrl_outbox_unpublished ON contrl_outbox (id)
    WHERE published_at IS NULL AND failed_at IS NULL;
