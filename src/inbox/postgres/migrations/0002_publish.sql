-- The publisher's bookkeeping on each outbox event: how often it was tried, why it last
-- failed, when and in which pass (so that one pass tries it once), and when it was parked
-- after too many attempts. Parked events stay unpublished and are no longer claimed.
ALTER TABLE outbox ADD COLUMN attempts integer NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN last_error text;
ALTER TABLE outbox ADD COLUMN last_attempt_at timestamptz;
ALTER TABLE outbox ADD COLUMN last_attempt_pass text;
ALTER TABLE outbox ADD COLUMN failed_at timestamptz;
DROP INDEX outbox_unpublished;
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL AND failed_at IS NULL;
CREATE INDEX outbox_failed ON outbox (failed_at) WHERE published_at IS NULL AND failed_at IS NOT NULL;
-- An interchange's events, for publishing it whole.
CREATE INDEX outbox_message ON outbox (message_id);
