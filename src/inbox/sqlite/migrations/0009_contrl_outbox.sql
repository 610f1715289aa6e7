-- The CONTRLs to deliver (issue 15): one event per sending of an acknowledgement, written in the
-- transaction that made it (send 1) or that decided a redelivery of its interchange (send 2,
-- 3, ...: the same bytes again), with the publisher's bookkeeping of the message outbox.
CREATE TABLE contrl_outbox (
    id                  INTEGER PRIMARY KEY,
    acknowledgement_id  INTEGER NOT NULL REFERENCES acknowledgements (id),
    send                INTEGER NOT NULL,
    event_type          TEXT NOT NULL,      -- edifact.CONTRL.outbound
    created_at          TEXT NOT NULL,
    published_at        TEXT,
    attempts            INTEGER NOT NULL DEFAULT 0,
    last_error          TEXT,
    last_attempt_at     TEXT,
    last_attempt_pass   TEXT,
    failed_at           TEXT,
    UNIQUE (acknowledgement_id, send)
);
CREATE INDEX contrl_outbox_unpublished ON contrl_outbox (id)
    WHERE published_at IS NULL AND failed_at IS NULL;
