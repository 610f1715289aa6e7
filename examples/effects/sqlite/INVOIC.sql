-- An invoice (INVOIC, any directory): its document number (BGM 1004, the second segment's
-- second element), its date (DTM with qualifier 137, format 102 CCYYMMDD, written as an ISO
-- date), its total (MOA 77 after UNS, not a line's MOA before it) and currency (CUX 6345).
-- An upsert on the invoice's own key: idempotent, as reapply --applied needs.
INSERT INTO partner_invoices
    (sender, invoice_no, invoice_date, total, currency, interchange_id, message_id)
VALUES (
    :sender,
    :message -> 1 -> 2 ->> 0,
    (SELECT substr(d.value -> 1 ->> 1, 1, 4) || '-' || substr(d.value -> 1 ->> 1, 5, 2) || '-'
            || substr(d.value -> 1 ->> 1, 7, 2)
     FROM json_each(:message) AS d
     WHERE d.value ->> 0 = 'DTM' AND d.value -> 1 ->> 0 = '137'),
    (SELECT m.value -> 1 ->> 1
     FROM json_each(:message) AS m
     WHERE m.value ->> 0 = 'MOA' AND m.value -> 1 ->> 0 = '77'
       AND m.key > (SELECT u.key FROM json_each(:message) AS u WHERE u.value ->> 0 = 'UNS')),
    (SELECT c.value -> 1 ->> 1 FROM json_each(:message) AS c WHERE c.value ->> 0 = 'CUX'),
    :interchange_id,
    :message_id
)
ON CONFLICT (sender, invoice_no) DO UPDATE SET
    invoice_date = excluded.invoice_date,
    total = excluded.total,
    currency = excluded.currency,
    interchange_id = excluded.interchange_id,
    message_id = excluded.message_id;

-- Its lines: LIN 1082 (line number) and 7140 (the item number, a GTIN here), with the QTY 47
-- (invoiced quantity) that follows it, before the next LIN.
INSERT INTO partner_invoice_lines (sender, invoice_no, line_no, gtin, quantity)
SELECT :sender,
       :message -> 1 -> 2 ->> 0,
       l.value -> 1 ->> 0,
       l.value -> 3 ->> 0,
       (SELECT q.value -> 1 ->> 1
        FROM json_each(:message) AS q
        WHERE q.value ->> 0 = 'QTY' AND q.value -> 1 ->> 0 = '47' AND q.key > l.key
          AND q.key < coalesce((SELECT min(n.key) FROM json_each(:message) AS n
                                WHERE n.value ->> 0 IN ('LIN', 'UNS') AND n.key > l.key), 1e9)
        ORDER BY q.key LIMIT 1)
FROM json_each(:message) AS l
WHERE l.value ->> 0 = 'LIN'
ON CONFLICT (sender, invoice_no, line_no) DO UPDATE SET
    gtin = excluded.gtin,
    quantity = excluded.quantity;
