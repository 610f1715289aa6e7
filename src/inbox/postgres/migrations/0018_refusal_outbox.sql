-- Migration 18 (issue 42; SQLite's 21, the same names): the negative MDNs of AS2 messages
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
    transport    text NOT NULL,
    message_id   text NOT NULL,
    url          text NOT NULL,
    answer       bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- When it is tried next; while a receiver tries it, the end of that try's lease.
    due_at       timestamptz NOT NULL DEFAULT now(),
    attempts     integer NOT NULL DEFAULT 0,
    delivered_at timestamptz,
    last_error   text,
    -- When its message was claimed again (and accepted, or refused anew): not sent after.
    superseded_at timestamptz,
    PRIMARY KEY (transport, message_id)
);
CREATE INDEX refusal_outbox_due ON refusal_outbox (due_at)
    WHERE delivered_at IS NULL AND superseded_at IS NULL;
CREATE INDEX refusal_outbox_created ON refusal_outbox (created_at);
