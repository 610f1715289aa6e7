//! AS4 (ebMS 3.0, the eDelivery and Peppol profile): the receiving side. A partner's message
//! posted over HTTP is read (`mime.rs`, `xml.rs`), its WS-Security signature checked against
//! the partner's pinned certificate over the canonical form of what it covers (`c14n.rs`,
//! `wss.rs`), its payloads decrypted and inflated (`payload.rs`), each interchange decided in the
//! inbox's transaction with the message's id by the intake (`receiver.rs`), and the signed
//! receipt answered only after the commit (`receipt.rs`).

pub mod c14n;
pub mod config;
pub mod ebms;
pub mod errors;
pub mod message;
pub mod mime;
pub mod ns;
pub mod payload;
pub mod receipt;
pub mod receiver;
pub mod server;
pub mod wss;
pub mod xml;

#[cfg(test)]
mod tests;
