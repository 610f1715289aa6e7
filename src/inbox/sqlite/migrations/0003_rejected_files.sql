-- Migration 3: a rejected file's bytes are kept once, however many errors it has. Each error
-- stored its own copy of the whole file before: one file of 4,000 broken interchanges took
-- 1.5 GB. The errors stay in `rejections`, each pointing at its file.
CREATE TABLE rejected_files (
    id             INTEGER PRIMARY KEY,
    source_file    TEXT NOT NULL,
    file_sha256    TEXT NOT NULL,
    file_size      INTEGER NOT NULL,
    bytes          BLOB,                -- the file, up to the size limit
    truncated      INTEGER NOT NULL,    -- 1 where bytes holds only the start of the file
    first_seen_at  TEXT NOT NULL,
    last_seen_at   TEXT NOT NULL,
    times_seen     INTEGER NOT NULL DEFAULT 1,
    UNIQUE (source_file, file_sha256)
);
CREATE INDEX rejected_files_last_seen_at ON rejected_files (last_seen_at);

INSERT INTO rejected_files (source_file, file_sha256, file_size, bytes, truncated, first_seen_at,
                            last_seen_at, times_seen)
SELECT source_file, file_sha256, max(file_size), bytes, max(truncated), min(first_seen_at),
       max(last_seen_at), max(times_seen)
FROM rejections GROUP BY source_file, file_sha256;

ALTER TABLE rejections ADD COLUMN file_id INTEGER REFERENCES rejected_files (id);
UPDATE rejections SET file_id = (
    SELECT f.id FROM rejected_files f
    WHERE f.source_file = rejections.source_file AND f.file_sha256 = rejections.file_sha256);
ALTER TABLE rejections DROP COLUMN bytes;
CREATE INDEX rejections_file ON rejections (file_id);
