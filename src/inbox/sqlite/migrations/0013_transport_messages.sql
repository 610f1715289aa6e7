-- The messages `receive` took over a transport whose messages name themselves (AS4's
-- eb:MessageId), claimed in the transaction that decides their interchanges, with the answer
-- sent for each (the signed receipt): a message sent again gets that answer again, byte for
-- byte, and nothing of it is decided twice. Removed by `purge` with the inbox's entries.
CREATE TABLE transport_messages (
    transport    TEXT NOT NULL,
    message_id   TEXT NOT NULL,
    received_at  TEXT NOT NULL,
    answer       BLOB,
    sightings    INTEGER NOT NULL DEFAULT 1,
    last_seen_at TEXT NOT NULL,
    PRIMARY KEY (transport, message_id)
);
CREATE INDEX transport_messages_received ON transport_messages (received_at);
