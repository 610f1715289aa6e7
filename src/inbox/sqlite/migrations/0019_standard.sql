-- Migration 19 (issue 41): the standard an interchange is written in ('edifact', 'x12') is part
-- of its key, so that an ANSI X12 interchange never collides with an EDIFACT one that carries
-- the same sender, recipient and control number. Every row stored before is EDIFACT's: the
-- column's default says so. The same names on PostgreSQL (0016).
--
-- The key table's primary key changes, which SQLite only does by building the table again
-- (run by `migrations::standard`, which keeps the table's indexes, and has the rename leave
-- the operator's views alone). The standard comes last in each key and index: `list --sender`
-- and the reports still find a sender by the index's first column.
CREATE TABLE inbox_standard (
    sender          TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    control_ref     TEXT NOT NULL,
    sha256          TEXT NOT NULL,
    source_file     TEXT NOT NULL,
    received_at     TEXT NOT NULL,
    interchange_id  INTEGER NOT NULL,
    standard        TEXT NOT NULL DEFAULT 'edifact' CHECK (standard IN ('edifact', 'x12')),
    PRIMARY KEY (sender, recipient, control_ref, standard)
) WITHOUT ROWID;
INSERT INTO inbox_standard (sender, recipient, control_ref, sha256, source_file, received_at,
                            interchange_id, standard)
SELECT sender, recipient, control_ref, sha256, source_file, received_at, interchange_id, 'edifact'
FROM inbox;
DROP TABLE inbox;
ALTER TABLE inbox_standard RENAME TO inbox;

ALTER TABLE interchanges ADD COLUMN standard TEXT NOT NULL DEFAULT 'edifact'
    CHECK (standard IN ('edifact', 'x12'));
DROP INDEX interchanges_key;
CREATE INDEX interchanges_key ON interchanges (sender, recipient, control_ref, standard);

ALTER TABLE sightings ADD COLUMN standard TEXT NOT NULL DEFAULT 'edifact'
    CHECK (standard IN ('edifact', 'x12'));
DROP INDEX sightings_key;
CREATE INDEX sightings_key ON sightings (sender, recipient, control_ref, standard);

ALTER TABLE acknowledgements ADD COLUMN standard TEXT NOT NULL DEFAULT 'edifact'
    CHECK (standard IN ('edifact', 'x12'));
DROP INDEX acknowledgements_key;
CREATE INDEX acknowledgements_key ON acknowledgements (sender, recipient, control_ref, standard);

-- One open refusal per key and content: the key now with its standard.
ALTER TABLE refusals ADD COLUMN standard TEXT NOT NULL DEFAULT 'edifact'
    CHECK (standard IN ('edifact', 'x12'));
DROP INDEX refusals_open;
CREATE UNIQUE INDEX refusals_open ON refusals (sender, recipient, control_ref, standard, sha256)
    WHERE resolved_at IS NULL;

-- A rejection has a key only where its header was read: the standard with it, NULL without.
ALTER TABLE rejections ADD COLUMN standard TEXT CHECK (standard IN ('edifact', 'x12'));
UPDATE rejections SET standard = 'edifact' WHERE sender IS NOT NULL;
DROP INDEX rejections_key;
CREATE INDEX rejections_key ON rejections (sender, recipient, control_ref, standard);
