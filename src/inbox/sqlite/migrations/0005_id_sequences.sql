-- Migration 5: interchange ids from a sequence, as a database server hands them out, rather
-- than max(id) + 1, which only holds while one writer at a time can look.
CREATE TABLE id_sequences (
    name  TEXT PRIMARY KEY,
    next  INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO id_sequences (name, next)
SELECT 'interchanges', coalesce(max(id), 0) + 1 FROM interchanges;
