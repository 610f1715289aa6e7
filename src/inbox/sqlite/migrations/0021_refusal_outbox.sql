-- Migration 21 (issue 42; PostgreSQL's 18, the same names): the negative MDNs of AS2 messages
-- refused whose sender asked for its MDN asynchronously (Receipt-Delivery-Option). Only messages the side effects refused: they
-- passed every check, and their id is no other message's. A refused message has no row in
-- transport_messages (its sending again is decided anew), so its MDN is kept here with its
-- bytes, written in the transaction that refuses it, and delivered by `receive` as
-- answer_outbox's are (lease, retries, the same figures). One row per message id: a refusal of
-- it again replaces the MDN and makes it due again (its attempts counted on, so that a try of
-- the MDN it replaced never records the new one as delivered); the id claimed again (its
-- sending again, accepted) marks it superseded, never sent after. Removed by `purge` after
-- --days.
CREATE TABLE refusal_outbox (
    transport    TEXT NOT NULL,
    message_id   TEXT NOT NULL,
    url          TEXT NOT NULL,
    answer       BLOB NOT NULL,
    created_at   TEXT NOT NULL,
    -- When it is tried next; while a receiver tries it, the end of that try's lease.
    due_at       TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    delivered_at TEXT,
    last_error   TEXT,
    -- When its message was claimed again (and accepted, or refused anew): not sent after.
    superseded_at TEXT,
    PRIMARY KEY (transport, message_id)
);
CREATE INDEX refusal_outbox_due ON refusal_outbox (due_at)
    WHERE delivered_at IS NULL AND superseded_at IS NULL;
CREATE INDEX refusal_outbox_created ON refusal_outbox (created_at);
