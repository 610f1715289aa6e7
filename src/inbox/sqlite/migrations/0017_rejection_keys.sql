-- Migration 17 (issue 40): a rejected interchange whose UNB was read is kept under its key
-- (UNB 0004, 0010, 0020), so that `list --sender` finds it and `show` shows it with the CONTRL
-- that rejected it. NULL where no UNB was read (and for the rejections stored before).
ALTER TABLE rejections ADD COLUMN sender TEXT;
ALTER TABLE rejections ADD COLUMN recipient TEXT;
ALTER TABLE rejections ADD COLUMN control_ref TEXT;
CREATE INDEX rejections_key ON rejections (sender, recipient, control_ref);
