-- Migration 2: interchange bytes may be stored compressed. 'zstd' rows hold a zstd frame of the
-- bytes; messages.raw_start/raw_end stay offsets into the uncompressed bytes.
ALTER TABLE interchanges ADD COLUMN raw_codec TEXT NOT NULL DEFAULT 'none';
