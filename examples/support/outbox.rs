//! The outbox of an inbox as the bare publishers of the benchmarks read it (`bare_nats_publish`,
//! `bare_kafka`): each event's message bytes and the columns its headers are made of, in order.
// Each publisher uses what its broker needs of it.
#![allow(dead_code)]

use anyhow::{Context, anyhow};

/// One event: its message's bytes and what its CloudEvents attributes are made of.
pub struct Event {
    pub id: i64,
    pub body: Vec<u8>,
    /// The UNA service string advice of its interchange, where it has one.
    pub una: Option<String>,
    /// The attributes by their bare names (`type`, `edisender`, ...), in one order.
    pub attributes: Vec<(&'static str, String)>,
    pub sender: String,
    pub recipient: String,
}

/// Every event of the inbox at `db`, in the order written.
pub fn events(db: &str) -> anyhow::Result<Vec<Event>> {
    let conn = rusqlite::Connection::open(db).context("the inbox")?;
    let mut stmt = conn.prepare(
        "SELECT o.id, i.raw, i.raw_codec, m.raw_start, m.raw_end, o.event_type, o.created_at,
                i.sender, i.recipient, i.control_ref, i.syntax_id || ':' || i.syntax_version,
                i.sender_qualifier, m.reference, m.message_type,
                m.version || ':' || m.release || ':' || m.agency
         FROM outbox o
         JOIN messages m ON m.id = o.message_id JOIN interchanges i ON i.id = m.interchange_id
         ORDER BY o.id",
    )?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let raw: Vec<u8> = r.get(1)?;
        let raw = if r.get::<_, String>(2)? == "zstd" {
            zstd::stream::decode_all(raw.as_slice())?
        } else {
            raw
        };
        let (start, end): (i64, i64) = (r.get(3)?, r.get(4)?);
        let body = raw
            .get(start as usize..end as usize)
            .ok_or_else(|| anyhow!("event {id}: bad offsets"))?
            .to_vec();
        let text = |n: usize| r.get::<_, Option<String>>(n).map(Option::unwrap_or_default);
        let mut attributes = Vec::new();
        for (name, n) in [
            ("type", 5),
            ("time", 6),
            ("edisender", 7),
            ("edirecipient", 8),
            ("edicontrolref", 9),
            ("edisyntax", 10),
            ("edisenderqualifier", 11),
            ("edimessageref", 12),
            ("edimessagetype", 13),
            ("edimessageversion", 14),
        ] {
            attributes.push((name, text(n)?));
        }
        out.push(Event {
            id,
            una: raw
                .starts_with(b"UNA")
                .then(|| String::from_utf8_lossy(&raw[3..9]).into_owned()),
            body,
            attributes,
            sender: text(7)?,
            recipient: text(8)?,
        });
    }
    Ok(out)
}
