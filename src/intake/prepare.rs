//! The step before a decision, for any input: its interchanges parsed, and the bytes of each
//! compressed where the inbox does not hold its key yet (a redelivery's bytes are never
//! stored again, so they are not compressed). It touches no database but to look, so that
//! readers can run it ahead of the thread that decides.

use crate::edifact::{self, EnvelopeError, Interchange};
use crate::inbox::KeyProbe;

/// An interchange with (where done ahead) its bytes compressed, or the error in its place.
pub type Attached<'a> = Result<(Interchange<'a>, Option<Vec<u8>>), EnvelopeError>;

/// The interchanges of `bytes`, each compressed unless `probe` says the inbox has its key.
pub fn interchanges<'a, 'p>(
    bytes: &'a [u8],
    probe: Option<&'p (dyn KeyProbe + Send)>,
) -> impl Iterator<Item = Attached<'a>> + use<'a, 'p> {
    edifact::interchanges(bytes).map(move |item| {
        item.map(|i| {
            let u = &i.unb;
            let known = probe.is_some_and(|p| p.has(&u.sender, &u.recipient, &u.control_ref));
            // A failure here only means the deciding thread compresses it itself.
            let compressed = if known {
                None
            } else {
                crate::inbox::compress(&i.raw).ok()
            };
            (i, compressed)
        })
    })
}
