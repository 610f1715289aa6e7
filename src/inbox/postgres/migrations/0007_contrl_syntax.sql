-- A CONTRL's syntax version (its UNB 0002), stored with it (issue 23): what publishes it says
-- CONTRL:4:1 or CONTRL:D:3 from this, not from a look at its bytes. The CONTRLs stored before
-- are read once here: version 4 where their message identifier is CONTRL:4:1 (whatever the
-- component separator), 3 otherwise.
ALTER TABLE acknowledgements ADD COLUMN syntax_version text NOT NULL DEFAULT '3';
UPDATE acknowledgements SET syntax_version = '4'
WHERE convert_from(bytes, 'LATIN1') LIKE '%CONTRL_4_1_UN%';
