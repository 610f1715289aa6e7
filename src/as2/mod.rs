//! AS2 (RFC 4130): the receiving side, beside AS4 on the same `receive` server. A partner's
//! message POSTed to `/as2` is read (`entity.rs`), its S/MIME layers opened and its signature
//! checked against the partner's pinned certificate (`smime.rs`, `message.rs`), its interchange
//! decided in the inbox's transaction with its Message-ID claimed (the receiver shared with
//! AS4), and its MDN (`mdn.rs`), stored with the decision, answered only after the commit: in
//! the HTTP response, or POSTed to the partner by `delivery.rs` where it asked for an
//! asynchronous MDN.

pub mod config;
pub mod delivery;
pub mod entity;
pub mod mdn;
pub mod message;
pub mod smime;

/// The transport's name in the inbox's table of messages, and its deliveries' prefix.
pub const TRANSPORT: &str = "as2";
