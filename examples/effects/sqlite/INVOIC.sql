-- An invoice (INVOIC, any directory): its document number (BGM 1004), date (DTM 137, format 102
-- CCYYMMDD, as an ISO date), total (MOA 77 after UNS) and currency (CUX 6345), each segment found
-- by its tag in message_segments(:message), each value read with one path (docs/effects.md).
-- An upsert on the invoice's own key: idempotent, as reapply --applied needs.
INSERT INTO partner_invoices
    (sender, invoice_no, invoice_date, total, currency, interchange_id, message_id)
SELECT
    :sender,
    (SELECT segment ->> '$[2][0]' FROM message_segments(:message) WHERE tag = 'BGM'),
    (SELECT substr(d, 1, 4) || '-' || substr(d, 5, 2) || '-' || substr(d, 7, 2)
     FROM (SELECT segment ->> '$[1][1]' AS d FROM message_segments(:message)
           WHERE tag = 'DTM' AND segment ->> '$[1][0]' = '137')),
    (SELECT segment ->> '$[1][1]' FROM message_segments(:message)
     WHERE tag = 'MOA' AND segment ->> '$[1][0]' = '77'
       AND n > (SELECT n FROM message_segments(:message) WHERE tag = 'UNS')),
    (SELECT segment ->> '$[1][1]' FROM message_segments(:message) WHERE tag = 'CUX'),
    :interchange_id,
    :message_id
WHERE true
ON CONFLICT (sender, invoice_no) DO UPDATE SET
    invoice_date = excluded.invoice_date,
    total = excluded.total,
    currency = excluded.currency,
    interchange_id = excluded.interchange_id,
    message_id = excluded.message_id;

-- Its lines: LIN 1082 (line number) and 7140 (the item number, a GTIN here), each with the
-- first QTY 47 (invoiced quantity) between it and the next LIN (or the UNS after the last).
INSERT INTO partner_invoice_lines (sender, invoice_no, line_no, gtin, quantity)
SELECT
    :sender,
    (SELECT segment ->> '$[2][0]' FROM message_segments(:message) WHERE tag = 'BGM'),
    l.segment ->> '$[1][0]',
    l.segment ->> '$[3][0]',
    (SELECT q.segment ->> '$[1][1]' FROM message_segments(:message) AS q
     WHERE q.tag = 'QTY' AND q.segment ->> '$[1][0]' = '47' AND q.n > l.n AND q.n < l.next
     ORDER BY q.n LIMIT 1)
FROM (SELECT n, tag, segment, lead(n, 1, 1000000000) OVER (ORDER BY n) AS next
      FROM message_segments(:message) WHERE tag IN ('LIN', 'UNS')) AS l
WHERE l.tag = 'LIN'
ON CONFLICT (sender, invoice_no, line_no) DO UPDATE SET
    gtin = excluded.gtin,
    quantity = excluded.quantity;
