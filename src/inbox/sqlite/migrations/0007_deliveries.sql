-- Deliveries `consume` took from a broker: one row per delivery, in the batch that decided it.
-- `source` is the broker's own identity for it (the source_file its interchanges, sightings and
-- rejections name), `filename` the edi-filename header it carried, and `delivery_count` how
-- many times the broker had delivered it (1 the first time; more after a consumer crash or an
-- acknowledgement that was lost).
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY,
    source          TEXT NOT NULL,
    filename        TEXT,
    delivery_count  INTEGER NOT NULL,
    size            INTEGER NOT NULL,
    seen_at         TEXT NOT NULL
);
CREATE INDEX deliveries_source ON deliveries (source);
CREATE INDEX deliveries_seen_at ON deliveries (seen_at);
