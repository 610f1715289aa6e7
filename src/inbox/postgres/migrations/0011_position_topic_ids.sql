-- The topic id (KIP-516) of the topic each position belongs to: a topic deleted and created
-- again under the same name has another, and starts from its beginning instead of below the
-- old topic's position (whose records it never had). NULL where the brokers gave none, or the
-- position is older than this column: the next batch stores it.
ALTER TABLE consumer_positions ADD COLUMN topic_id text;
