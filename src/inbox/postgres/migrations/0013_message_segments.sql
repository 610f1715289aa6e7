-- message_segments(:message), for the operator's side effects (docs/effects.md): a message's
-- segments as rows, each its position (n, 0 for the UNH), its tag and its JSON, as SQLite's
-- table of that name gives them, so that a mapping finds a segment by its tag the same way on
-- both backends. A segment whose tag element holds more than the tag (`[["LIN", "1", "1"],
-- ...]`) has the tag. An SQL function the planner inlines into the statement that calls it:
-- not STRICT, and IMMUTABLE, as jsonb_array_elements is.
CREATE FUNCTION message_segments(message jsonb)
RETURNS TABLE (n integer, tag text, segment jsonb)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (e.o - 1)::integer,
           CASE jsonb_typeof(e.s -> 0) WHEN 'array' THEN e.s -> 0 ->> 0 ELSE e.s ->> 0 END,
           e.s
    FROM jsonb_array_elements(message) WITH ORDINALITY AS e (s, o)
$$;
