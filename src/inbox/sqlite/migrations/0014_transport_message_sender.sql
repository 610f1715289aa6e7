-- Who sent each transport message (AS4's eb:From party), and what it carried (a SHA-256 over
-- its payloads): a message id is only the same message from the same party with the same
-- content. Another party's message under an id already taken, or other content under it, is
-- refused rather than answered with the first message's receipt, which would lose it unseen.
-- Rows from before have neither, and are taken as they were.
ALTER TABLE transport_messages ADD COLUMN sender TEXT;
ALTER TABLE transport_messages ADD COLUMN content_sha256 TEXT;
