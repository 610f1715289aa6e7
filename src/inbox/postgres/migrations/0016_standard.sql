-- Migration 16 (issue 41): the standard an interchange is written in ('edifact', 'x12') is part
-- of its key, so that an ANSI X12 interchange never collides with an EDIFACT one that carries
-- the same sender, recipient and control number. Every row stored before is EDIFACT's: the
-- column's default says so (a default, so no row is written again). The same names as SQLite's
-- migration 19. The standard comes last in each key and index: `list --sender` and the reports
-- still find a sender by the index's first column.
ALTER TABLE inbox ADD COLUMN standard text NOT NULL DEFAULT 'edifact'
    CONSTRAINT inbox_standard CHECK (standard IN ('edifact', 'x12'));
-- The decision's INSERT ... ON CONFLICT ON CONSTRAINT inbox_key goes on naming it.
ALTER TABLE inbox DROP CONSTRAINT inbox_key,
    ADD CONSTRAINT inbox_key PRIMARY KEY (sender, recipient, control_ref, standard);

ALTER TABLE interchanges ADD COLUMN standard text NOT NULL DEFAULT 'edifact'
    CONSTRAINT interchanges_standard CHECK (standard IN ('edifact', 'x12'));
DROP INDEX interchanges_key;
CREATE INDEX interchanges_key ON interchanges (sender, recipient, control_ref, standard);

ALTER TABLE sightings ADD COLUMN standard text NOT NULL DEFAULT 'edifact'
    CONSTRAINT sightings_standard CHECK (standard IN ('edifact', 'x12'));
DROP INDEX sightings_key;
CREATE INDEX sightings_key ON sightings (sender, recipient, control_ref, standard);

ALTER TABLE acknowledgements ADD COLUMN standard text NOT NULL DEFAULT 'edifact'
    CONSTRAINT acknowledgements_standard CHECK (standard IN ('edifact', 'x12'));
DROP INDEX acknowledgements_key;
CREATE INDEX acknowledgements_key ON acknowledgements (sender, recipient, control_ref, standard);

-- One open refusal per key and content: the key now with its standard.
ALTER TABLE refusals ADD COLUMN standard text NOT NULL DEFAULT 'edifact'
    CONSTRAINT refusals_standard CHECK (standard IN ('edifact', 'x12'));
DROP INDEX refusals_open;
CREATE UNIQUE INDEX refusals_open ON refusals (sender, recipient, control_ref, standard, sha256)
    WHERE resolved_at IS NULL;

-- A rejection has a key only where its header was read: the standard with it, NULL without.
ALTER TABLE rejections ADD COLUMN standard text
    CONSTRAINT rejections_standard CHECK (standard IN ('edifact', 'x12'));
UPDATE rejections SET standard = 'edifact' WHERE sender IS NOT NULL;
DROP INDEX rejections_key;
CREATE INDEX rejections_key ON rejections (sender, recipient, control_ref, standard);
