//! The step before a decision, for any input: its interchanges parsed, and the bytes of each
//! compressed where the inbox does not hold its key yet (a redelivery's bytes are never
//! stored again, so they are not compressed). It touches no database but to look, so that
//! readers can run it ahead of the thread that decides.

use std::ops::Range;

use crate::edifact::{EnvelopeError, Interchange};
use crate::inbox::{InterchangeKey, KeyProbe};

/// An interchange with (where done ahead) its bytes compressed, or the error in its place.
pub type Attached<'a> = Result<(Interchange<'a>, Option<Vec<u8>>), EnvelopeError>;

/// An [`Attached`] interchange without its bytes, and where they stand in its input: what waits
/// beside the input (read ahead, or fetched ahead) until the deciding thread takes both.
pub type Detached = Result<(Interchange<'static>, Range<usize>, Option<Vec<u8>>), EnvelopeError>;

/// The interchange without its bytes (see [`Detached`]).
pub fn detach(item: Attached<'_>) -> Detached {
    item.map(|(i, compressed)| {
        let (i, span) = i.detach();
        (i, span, compressed)
    })
}

/// The interchange with its bytes again, from the input [`detach`] took it from.
pub fn reattach(input: &[u8], item: Detached) -> Attached<'_> {
    item.map(|(i, span, compressed)| (i.reattach(input, span), compressed))
}

/// The interchanges of `bytes`, each compressed unless `probe` says the inbox has its key.
pub fn interchanges<'a, 'p>(
    bytes: &'a [u8],
    probe: Option<&'p (dyn KeyProbe + Send)>,
) -> impl Iterator<Item = Attached<'a>> + use<'a, 'p> {
    crate::envelopes::interchanges(bytes).map(move |item| {
        item.map(|i| {
            let known = probe.is_some_and(|p| p.has(InterchangeKey::of(&i)));
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

/// Prepares several inputs on a few threads, one per look at the inbox's keys in `probes`
/// (given back, for the next batch): done on the deciding thread alone, it made `consume` 1.5x
/// to 1.7x the time of `ingest` on the same interchanges, whose readers prepare ahead. Each
/// input's interchanges, in the inputs' order.
pub fn in_parallel<'d>(
    inputs: &[&'d [u8]],
    probes: &mut Vec<Option<Box<dyn KeyProbe + Send>>>,
) -> Vec<Vec<Attached<'d>>> {
    let per = inputs.len().div_ceil(probes.len().max(1)).max(1);
    let taken = std::mem::take(probes);
    let (items, given_back) = std::thread::scope(|scope| {
        let workers: Vec<_> = inputs
            .chunks(per)
            .zip(taken.into_iter().chain(std::iter::repeat_with(|| None)))
            .map(|(chunk, probe)| {
                scope.spawn(move || {
                    let items: Vec<Vec<Attached<'d>>> = chunk
                        .iter()
                        .map(|bytes| interchanges(bytes, probe.as_deref()).collect())
                        .collect();
                    (items, probe)
                })
            })
            .collect();
        let mut items = Vec::with_capacity(inputs.len());
        let mut given_back = Vec::new();
        for w in workers {
            let (done, probe) = w.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            items.extend(done);
            given_back.push(probe);
        }
        (items, given_back)
    });
    *probes = given_back;
    items
}

/// The SHA-256 (hex) of an input holding rejected pieces, which its record is keyed by;
/// `None` for an input whose interchanges all parsed.
pub fn hash_if_rejected(bytes: &[u8], items: &[Attached<'_>]) -> Option<String> {
    use sha2::{Digest, Sha256};
    items
        .iter()
        .any(Result::is_err)
        .then(|| hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detached_interchange_is_the_same_once_reattached() {
        let text = b"UNB+UNOA:2+S+R+260101:1200+R1'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+R1'";
        let items: Vec<Attached<'_>> = interchanges(text, None).collect();
        let parsed = items[0].as_ref().map(|(i, _)| i.clone()).ok();
        let detached: Vec<Detached> = items.into_iter().map(detach).collect();
        let again: Vec<Attached<'_>> = detached
            .into_iter()
            .map(|d| reattach(&text[..], d))
            .collect();
        let back = again[0].as_ref().map(|(i, _)| i.clone()).ok();
        assert!(back.is_some());
        assert_eq!(back, parsed);
    }

    #[test]
    fn inputs_prepared_in_parallel_keep_their_order() {
        let good = |r: &str| {
            format!("UNB+UNOA:2+S+R+260101:1200+{r}'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+{r}'")
        };
        let texts: Vec<String> = (0..7).map(|k| good(&format!("R{k}"))).collect();
        let mut inputs: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
        inputs.insert(3, b"not EDIFACT");
        let mut probes: Vec<Option<Box<dyn KeyProbe + Send>>> = vec![None, None, None];
        let items = in_parallel(&inputs, &mut probes);
        assert_eq!(probes.len(), 3, "every probe is given back");
        assert_eq!(items.len(), 8);
        for (k, input) in items.iter().enumerate() {
            assert_eq!(input.len(), 1);
            match (&input[0], k) {
                (Err(_), 3) => assert!(hash_if_rejected(inputs[k], input).is_some()),
                (Ok((i, compressed)), k) => {
                    let want = format!("R{}", if k < 3 { k } else { k - 1 });
                    assert_eq!(i.unb.control_ref, want);
                    assert!(compressed.is_some(), "no probe: every one compressed");
                    assert_eq!(hash_if_rejected(inputs[k], input), None);
                }
                (other, k) => panic!("input {k}: {other:?}"),
            }
        }
    }
}
