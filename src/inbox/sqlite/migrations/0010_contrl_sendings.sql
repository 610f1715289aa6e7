-- Which of the partner's sendings each CONTRL event answers (issue 22): the file's name, or the
-- broker's identity of the delivery. A duplicate's CONTRL goes out again only for a sending not
-- answered yet: the same file seen again after our own crash between the commit and the move,
-- a broker's redelivery after one between the commit and the acknowledgement, or another
-- host's copy of the same file, is not the partner asking again.
ALTER TABLE contrl_outbox ADD COLUMN source TEXT;
CREATE UNIQUE INDEX contrl_outbox_source ON contrl_outbox (acknowledgement_id, source);
-- The first sending of each CONTRL stored before: the copy its key was taken from, where the
-- inbox still holds it (a broker's delivery by its whole name, a file by its name alone).
UPDATE contrl_outbox SET source = (
    SELECT CASE
               WHEN i.source_file LIKE 'nats:%' OR i.source_file LIKE 'amqp:%' THEN i.source_file
               ELSE replace(i.source_file, rtrim(i.source_file, replace(i.source_file, '/', '')), '')
           END
    FROM acknowledgements a
    JOIN inbox i ON i.sender = a.sender AND i.recipient = a.recipient AND i.control_ref = a.control_ref
    WHERE a.id = contrl_outbox.acknowledgement_id)
WHERE send = 1;
