-- The business tables of the example mapping (docs/effects.md): one row per invoice and one
-- per invoice line, keyed on what the partner says (sender, document number), so that running
-- the mapping again over history (reapply --applied) changes nothing that is already right.
CREATE TABLE partner_invoices (
    sender         text NOT NULL,
    invoice_no     text NOT NULL,
    invoice_date   date NOT NULL,
    total          numeric(15, 2) NOT NULL,
    currency       text,
    interchange_id bigint NOT NULL,
    message_id     bigint NOT NULL,
    PRIMARY KEY (sender, invoice_no)
);

CREATE TABLE partner_invoice_lines (
    sender     text NOT NULL,
    invoice_no text NOT NULL,
    line_no    text NOT NULL,
    gtin       text,
    quantity   numeric,
    PRIMARY KEY (sender, invoice_no, line_no)
);
