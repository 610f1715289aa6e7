-- Where each sighting of a key was read from, which host decided it, and where its file was
-- moved after the commit (issue 40, item 3): on the interchange for its first sighting (new),
-- on its sightings row for a duplicate or drift. The same names on SQLite (0018). NULL in rows
-- from before: not known. moved_to is written by a second, short transaction after the move (a
-- crash before it leaves NULL, never a place the file did not reach).
ALTER TABLE interchanges ADD COLUMN source_path text;
ALTER TABLE interchanges ADD COLUMN host text;
ALTER TABLE interchanges ADD COLUMN moved_to text;
ALTER TABLE sightings ADD COLUMN source_path text;
ALTER TABLE sightings ADD COLUMN host text;
ALTER TABLE sightings ADD COLUMN moved_to text;
