-- Migration 22 (issue 41; PostgreSQL's 19, the same names): the partner's sending a rejected
-- input came in, as a duplicate's answer records it (a file by its name without its folder, a
-- delivery by its broker name), so that the same bytes of the same sending read again (another
-- run over a file not yet moved, the file reprocessed from the quarantine unchanged, another
-- host's copy, a broker's redelivery) are not answered a second time. NULL for the inputs
-- recorded before, until one is seen again by the same name (its upsert fills it in): such an
-- input read from another folder is answered once more, as it was on every read.
ALTER TABLE rejected_files ADD COLUMN sending TEXT;
CREATE INDEX rejected_files_sending ON rejected_files (sending, file_sha256);
