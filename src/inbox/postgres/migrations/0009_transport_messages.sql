-- The messages `receive` took over a transport whose messages name themselves (AS4's
-- eb:MessageId), claimed in the transaction that decides their interchanges (a second host's
-- claim of the same id waits on this one's row, then finds it taken), with the answer sent for
-- each (the signed receipt): a message sent again gets that answer again, byte for byte, and
-- nothing of it is decided twice. Removed by `purge` with the inbox's entries.
CREATE TABLE transport_messages (
    transport    text NOT NULL,
    message_id   text NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    answer       bytea,
    sightings    integer NOT NULL DEFAULT 1,
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (transport, message_id)
);
CREATE INDEX transport_messages_received ON transport_messages (received_at);
