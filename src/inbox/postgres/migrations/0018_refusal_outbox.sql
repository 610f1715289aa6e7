-- Migration 18 (issue 42; SQLite's 21, the same names): the negative MDNs of AS2 messages
-- refused (a check failed, an id taken, the side effects refusing) whose sender asked for its
-- MDN asynchronously (Receipt-Delivery-Option), where the URL may be trusted: the partner's
-- `mdn_urls` list it, or the message passed every check. A refused message has no row in
-- transport_messages (its sending again is decided anew), so its MDN is kept here with its
-- bytes, written in the transaction that refuses it, and delivered by `receive` as
-- answer_outbox's are (lease, retries, the same figures). One row per message id: a refusal of
-- it again replaces the MDN and makes it due again; the message then accepted removes it
-- (undelivered) in the transaction that queues its own MDN. Removed by `purge` after --days.
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
    PRIMARY KEY (transport, message_id)
);
CREATE INDEX refusal_outbox_due ON refusal_outbox (due_at) WHERE delivered_at IS NULL;
CREATE INDEX refusal_outbox_created ON refusal_outbox (created_at);
