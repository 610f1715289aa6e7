-- CONTRL acknowledgements (issue 15): each built in the transaction that made the decision it
-- answers, under the answered key (sender 0004, recipient 0010, control reference 0020), with
-- its own control reference from its partner's counter, allocated in the same transaction so
-- that a crash never reuses one (the UNIQUE constraint holds even against a bug).
CREATE TABLE acknowledgements (
    id           bigserial PRIMARY KEY,
    sender       text NOT NULL,
    recipient    text NOT NULL,
    control_ref  text NOT NULL,
    partner      text NOT NULL,     -- the answered sender with its qualifier (0004:0007)
    own_ref      text NOT NULL,     -- the CONTRL's own UNB 0020
    action       text NOT NULL,     -- UCI 0083: 7 acknowledged, 8 received, 4 rejected
    error_code   text,              -- 0085, where rejected
    bytes        bytea NOT NULL,     -- the CONTRL interchange, UNA (if any) to UNZ
    created_at   timestamptz NOT NULL,
    UNIQUE (partner, own_ref)
);
CREATE INDEX acknowledgements_key ON acknowledgements (sender, recipient, control_ref);

-- The next CONTRL control reference per partner.
CREATE TABLE contrl_counters (
    partner  text PRIMARY KEY,
    next     bigint NOT NULL
);
