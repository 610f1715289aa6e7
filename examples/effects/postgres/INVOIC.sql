-- An invoice (INVOIC, any directory): its document number (BGM 1004), date (DTM 137, format 102
-- CCYYMMDD), total (MOA 77 after UNS, not a line's MOA before it) and currency (CUX 6345), its
-- segments read once (s: each one's position, tag, qualifier and value). An upsert on the
-- invoice's own key: idempotent, as reapply --applied needs.
INSERT INTO partner_invoices
    (sender, invoice_no, invoice_date, total, currency, interchange_id, message_id)
WITH s AS MATERIALIZED (
    SELECT n, v ->> 0 AS tag, v -> 1 ->> 0 AS qualifier, v -> 1 ->> 1 AS value
    FROM jsonb_array_elements(:message) WITH ORDINALITY AS e(v, n)
)
SELECT
    :sender,
    :message -> 1 -> 2 ->> 0,
    (SELECT to_date(value, 'YYYYMMDD') FROM s WHERE tag = 'DTM' AND qualifier = '137'),
    (SELECT value::numeric FROM s WHERE tag = 'MOA' AND qualifier = '77'
       AND n > (SELECT n FROM s WHERE tag = 'UNS')),
    (SELECT value FROM s WHERE tag = 'CUX'),
    :interchange_id,
    :message_id
ON CONFLICT (sender, invoice_no) DO UPDATE SET
    invoice_date = excluded.invoice_date,
    total = excluded.total,
    currency = excluded.currency,
    interchange_id = excluded.interchange_id,
    message_id = excluded.message_id;

-- Its lines: LIN 1082 (line number) and 7140 (the item number, a GTIN here), with the QTY 47
-- (invoiced quantity) of the line: each segment numbered with the LIN before it (a window over
-- the message, one pass), so that a line's quantity is found without a scan per line.
INSERT INTO partner_invoice_lines (sender, invoice_no, line_no, gtin, quantity)
WITH s AS MATERIALIZED (
    SELECT n, v, max(CASE WHEN v ->> 0 = 'LIN' THEN n END) OVER (ORDER BY n) AS line
    FROM jsonb_array_elements(:message) WITH ORDINALITY AS e(v, n)
),
qty AS (
    SELECT line, min((v -> 1 ->> 1)::numeric) AS quantity
    FROM s WHERE v ->> 0 = 'QTY' AND v -> 1 ->> 0 = '47' GROUP BY line
)
SELECT :sender, :message -> 1 -> 2 ->> 0, l.v -> 1 ->> 0, l.v -> 3 ->> 0, qty.quantity
FROM s AS l LEFT JOIN qty ON qty.line = l.n
WHERE l.v ->> 0 = 'LIN'
ON CONFLICT (sender, invoice_no, line_no) DO UPDATE SET
    gtin = excluded.gtin,
    quantity = excluded.quantity;
