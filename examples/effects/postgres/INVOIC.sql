-- An invoice (INVOIC, any directory): its document number (BGM 1004), date (DTM 137, format 102
-- CCYYMMDD), total (MOA 77 after UNS, not a line's MOA before it) and currency (CUX 6345), its
-- segments read once from message_segments(:message) (s: position, tag, qualifier, JSON). An
-- upsert on the invoice's own key: idempotent, as reapply --applied needs.
INSERT INTO partner_invoices
    (sender, invoice_no, invoice_date, total, currency, interchange_id, message_id)
WITH s AS MATERIALIZED (
    SELECT n, tag, segment -> 1 ->> 0 AS qualifier, segment FROM message_segments(:message)
)
SELECT
    :sender,
    (SELECT segment -> 2 ->> 0 FROM s WHERE tag = 'BGM'),
    (SELECT to_date(segment -> 1 ->> 1, 'YYYYMMDD') FROM s WHERE tag = 'DTM' AND qualifier = '137'),
    (SELECT (segment -> 1 ->> 1)::numeric FROM s WHERE tag = 'MOA' AND qualifier = '77'
       AND n > (SELECT n FROM s WHERE tag = 'UNS')),
    (SELECT segment -> 1 ->> 1 FROM s WHERE tag = 'CUX'),
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
    SELECT n, tag, segment,
           max(n) FILTER (WHERE tag = 'LIN') OVER (ORDER BY n) AS line
    FROM message_segments(:message)
),
qty AS (
    SELECT line, min((segment -> 1 ->> 1)::numeric) AS quantity
    FROM s WHERE tag = 'QTY' AND segment -> 1 ->> 0 = '47' GROUP BY line
)
SELECT :sender, (SELECT segment -> 2 ->> 0 FROM s WHERE tag = 'BGM'),
       l.segment -> 1 ->> 0, l.segment -> 3 ->> 0, qty.quantity
FROM s AS l LEFT JOIN qty ON qty.line = l.n
WHERE l.tag = 'LIN'
ON CONFLICT (sender, invoice_no, line_no) DO UPDATE SET
    gtin = excluded.gtin,
    quantity = excluded.quantity;
