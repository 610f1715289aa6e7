-- Migration 17 (issue 42; SQLite's 20, the same names): the answers a transport sends apart
-- from the request that brought its message: AS2's asynchronous MDNs, POSTed to the URL of the
-- message's Receipt-Delivery-Option. A row is written in the transaction that claims the message and
-- stores its answer (in transport_messages), so an MDN is never sent for a message that was not
-- committed; `receive` delivers it after the commit, and tries again with a growing wait (the
-- first within 30 seconds) until the partner's server takes it. A sending again of the message
-- makes its row due again (its sender did not get the MDN). Removed with its message by `purge`.
CREATE TABLE answer_outbox (
    transport    text NOT NULL,
    message_id   text NOT NULL,
    url          text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- When it is tried next; while a receiver tries it, the end of that try's lease.
    due_at       timestamptz NOT NULL DEFAULT now(),
    attempts     integer NOT NULL DEFAULT 0,
    delivered_at timestamptz,
    last_error   text,
    PRIMARY KEY (transport, message_id),
    FOREIGN KEY (transport, message_id) REFERENCES transport_messages (transport, message_id)
        ON DELETE CASCADE
);
CREATE INDEX answer_outbox_due ON answer_outbox (due_at) WHERE delivered_at IS NULL;
