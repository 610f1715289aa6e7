-- The business tables of the example mapping (docs/effects.md): one row per invoice and one
-- per invoice line, keyed on what the partner says (sender, document number), so that running
-- the mapping again over history (reapply --applied) changes nothing that is already right.
CREATE TABLE partner_invoices (
    sender         TEXT NOT NULL,
    invoice_no     TEXT NOT NULL,
    invoice_date   TEXT NOT NULL,
    total          NUMERIC NOT NULL,
    currency       TEXT,
    interchange_id INTEGER NOT NULL,
    message_id     INTEGER NOT NULL,
    PRIMARY KEY (sender, invoice_no)
);

CREATE TABLE partner_invoice_lines (
    sender     TEXT NOT NULL,
    invoice_no TEXT NOT NULL,
    line_no    TEXT NOT NULL,
    gtin       TEXT,
    quantity   NUMERIC,
    PRIMARY KEY (sender, invoice_no, line_no)
);
