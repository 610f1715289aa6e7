-- Where `consume --from kafka://` stands: per consumer group, the offset of the next record of
-- each partition to decide, advanced in the transaction that decided the records before it and
-- never moved back, so that neither a crash between the commit and Kafka's own offset commit,
-- nor a rebalance, nor the late batch of a consumer that lost its partitions has a record decided
-- twice. A record's key and the time its producer gave it are kept with its delivery.
CREATE TABLE consumer_positions (
    consumer_group  TEXT NOT NULL,
    topic           TEXT NOT NULL,
    partition       INTEGER NOT NULL,
    next_offset     INTEGER NOT NULL,
    updated_at      TEXT NOT NULL,
    PRIMARY KEY (consumer_group, topic, partition)
);
ALTER TABLE deliveries ADD COLUMN record_key TEXT;
ALTER TABLE deliveries ADD COLUMN produced_at TEXT;
