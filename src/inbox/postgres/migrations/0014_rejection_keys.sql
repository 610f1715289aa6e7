-- Migration 14 (issue 40): a rejected interchange whose UNB was read is kept under its key
-- (UNB 0004, 0010, 0020), so that `list --sender` finds it and `show` shows it with the CONTRL
-- that rejected it. NULL where no UNB was read (and for the rejections stored before). The
-- columns are named as SQLite's migration 17 names them.
ALTER TABLE rejections ADD COLUMN IF NOT EXISTS sender text;
ALTER TABLE rejections ADD COLUMN IF NOT EXISTS recipient text;
ALTER TABLE rejections ADD COLUMN IF NOT EXISTS control_ref text;
CREATE INDEX IF NOT EXISTS rejections_key ON rejections (sender, recipient, control_ref);
