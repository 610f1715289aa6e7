-- Where `consume --from kafka://` stands: per consumer group, the offset of the next record of
-- each partition to decide (NULL: a row taken for the batch's lock before any was stored),
-- advanced in the transaction that decided the records before it and never moved back, so that
-- neither a crash between the commit and Kafka's own offset commit, nor a rebalance, nor the
-- late batch of a consumer that lost its partitions (it waits on the row's lock, then finds the
-- position past its records) has a record decided twice. A record's key and the time its
-- producer gave it are kept with its delivery.
CREATE TABLE consumer_positions (
    consumer_group  text NOT NULL,
    topic           text NOT NULL,
    partition       integer NOT NULL,
    next_offset     bigint,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, partition)
);
ALTER TABLE deliveries ADD COLUMN record_key text;
ALTER TABLE deliveries ADD COLUMN produced_at timestamptz;
