-- CONTRL acknowledgements (issue 15): each built in the transaction that made the decision it
-- answers, under the answered key (sender 0004, recipient 0010, control reference 0020), with
-- its own control reference from its partner's counter, allocated in the same transaction so
-- that a crash never reuses one (the UNIQUE constraint holds even against a bug).
CREATE TABLE acknowledgements (
    id           INTEGER PRIMARY KEY,
    sender       TEXT NOT NULL,
    recipient    TEXT NOT NULL,
    control_ref  TEXT NOT NULL,
    partner      TEXT NOT NULL,     -- the answered sender with its qualifier (0004:0007)
    own_ref      TEXT NOT NULL,     -- the CONTRL's own UNB 0020
    action       TEXT NOT NULL,     -- UCI 0083: 7 acknowledged, 8 received, 4 rejected
    error_code   TEXT,              -- 0085, where rejected
    bytes        BLOB NOT NULL,     -- the CONTRL interchange, UNA (if any) to UNZ
    created_at   TEXT NOT NULL,
    UNIQUE (partner, own_ref)
);
CREATE INDEX acknowledgements_key ON acknowledgements (sender, recipient, control_ref);

-- The next CONTRL control reference per partner.
CREATE TABLE contrl_counters (
    partner  TEXT PRIMARY KEY,
    next     INTEGER NOT NULL
) WITHOUT ROWID;
