//! What can be done for an interchange before it is decided, on any thread: parsed, and
//! compressed where the inbox does not hold its key yet (a redelivery's bytes are never
//! stored again, so they are not compressed), its messages held for the side effects where
//! they ask for it ([`HoldAhead`]). It touches no database but to look, so that readers can
//! run it ahead of the thread that decides.

use std::ops::Range;

use crate::edifact::{EnvelopeError, Interchange};
use crate::inbox::effects::{HeldAhead, HeldMessage, HoldAhead};
use crate::inbox::{InterchangeKey, KeyProbe};

/// What was made ahead for an interchange the inbox does not hold yet.
#[derive(Debug, Default)]
pub struct Ahead {
    /// Its bytes compressed; `None` where not made (the deciding thread compresses them).
    pub compressed: Option<Vec<u8>>,
    /// Its messages held for the side effects ([`HoldAhead::hold`]); empty where none is.
    pub held: HeldAhead,
}

impl Ahead {
    /// About how many bytes of memory it holds.
    pub fn size(&self) -> usize {
        self.compressed.as_ref().map_or(0, Vec::len)
            + self.held.len() * std::mem::size_of::<Option<std::sync::Arc<HeldMessage>>>()
            + self.held.iter().flatten().map(|h| h.size()).sum::<usize>()
    }
}

/// An interchange with what was made for it ahead, or the error in its place.
pub type Attached<'a> = Result<(Interchange<'a>, Ahead), EnvelopeError>;

/// An [`Attached`] interchange without its bytes, and where they stand in its input: what waits
/// beside the input (read ahead, or fetched ahead) until the deciding thread takes both.
pub type Detached = Result<(Interchange<'static>, Range<usize>, Ahead), EnvelopeError>;

/// The interchange without its bytes (see [`Detached`]).
pub fn detach(item: Attached<'_>) -> Detached {
    item.map(|(i, ahead)| {
        let (i, span) = i.detach();
        (i, span, ahead)
    })
}

/// The interchange with its bytes again, from the input [`detach`] took it from.
pub fn reattach(input: &[u8], item: Detached) -> Attached<'_> {
    item.map(|(i, span, ahead)| (i.reattach(input, span), ahead))
}

/// The largest input whose messages are held ahead: held, a message takes a few times its
/// bytes, for the whole input at once, where the deciding thread holds one message at a time.
pub const HOLD_AHEAD_MAX_BYTES: usize = 1 << 20;

/// True where an input of `len` bytes has its messages held ahead (when asked).
pub fn holds_ahead(len: usize) -> bool {
    len <= HOLD_AHEAD_MAX_BYTES
}

/// The most bytes of inputs [`in_parallel`] holds the messages of, all inputs together: it
/// has no read-ahead budget, and the next batch is prepared while one is decided.
pub const HOLD_AHEAD_BATCH_MAX_BYTES: usize = 4 * HOLD_AHEAD_MAX_BYTES;

/// The interchanges of `bytes`, each compressed unless `probe` says the inbox has its key, and
/// then its messages held as `hold` asks (where `bytes` are few enough: [`holds_ahead`]).
pub fn interchanges<'a, 'p>(
    bytes: &'a [u8],
    probe: Option<&'p (dyn KeyProbe + Send)>,
    hold: Option<&'p HoldAhead>,
) -> impl Iterator<Item = Attached<'a>> + use<'a, 'p> {
    let hold = hold.filter(|_| holds_ahead(bytes.len()));
    crate::envelopes::interchanges(bytes).map(move |item| {
        item.map(|i| {
            let known = probe.is_some_and(|p| p.has(InterchangeKey::of(&i)));
            if known {
                return (i, Ahead::default());
            }
            // A failure here only means the deciding thread compresses it itself.
            let compressed = crate::inbox::compress(&i.raw).ok();
            let held = hold.map(|h| h.hold(&i)).unwrap_or_default();
            (i, Ahead { compressed, held })
        })
    })
}

/// Prepares several inputs on a few threads, one per look at the inbox's keys in `probes`
/// (given back, for the next batch), their messages held as `hold` asks where the inputs are
/// few enough bytes ([`HOLD_AHEAD_BATCH_MAX_BYTES`]): done on the deciding thread alone, it made `consume` 1.5x
/// to 1.7x the time of `ingest` on the same interchanges, whose readers prepare ahead. Each
/// input's interchanges, in the inputs' order.
pub fn in_parallel<'d>(
    inputs: &[&'d [u8]],
    probes: &mut Vec<Option<Box<dyn KeyProbe + Send>>>,
    hold: Option<&HoldAhead>,
) -> Vec<Vec<Attached<'d>>> {
    let all: usize = inputs.iter().map(|i| i.len()).sum();
    let hold = hold.filter(|_| all <= HOLD_AHEAD_BATCH_MAX_BYTES);
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
                        .map(|bytes| interchanges(bytes, probe.as_deref(), hold).collect())
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
        let items: Vec<Attached<'_>> = interchanges(text, None, None).collect();
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

    /// The messages are held where asked, for an interchange the inbox may not hold and an
    /// input small enough; a key the inbox holds, or an input past the limit, gets none.
    #[test]
    fn messages_are_held_ahead_for_a_new_interchange_of_a_small_input() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        std::fs::write(
            dir.path().join("INVOIC.sql"),
            "SELECT segment FROM message_segments(:message) WHERE tag = 'BGM'",
        )
        .expect("a file");
        let effects = crate::effects::Effects::load(dir.path()).expect("the mapping");
        let hold = HoldAhead::of(std::sync::Arc::new(effects)).expect("a mapping by segments");
        let text = b"UNB+UNOC:3+S+R+240101:1200+REF'UNH+1+INVOIC:D:96A:UN'BGM+380+INV1+9'\
            UNT+3+1'UNZ+1+REF'";
        let held = |bytes: &[u8], probe: Option<&(dyn KeyProbe + Send)>| -> Vec<usize> {
            interchanges(bytes, probe, Some(&hold))
                .map(|item| item.expect("read").1.held.iter().flatten().count())
                .collect()
        };
        assert_eq!(held(text, None), vec![1]);
        struct Knows;
        impl KeyProbe for Knows {
            fn has(&self, _: InterchangeKey<'_>) -> bool {
                true
            }
        }
        assert_eq!(held(text, Some(&Knows)), vec![0], "a duplicate is not held");
        // Padded past the limit with blank lines (between interchanges, as partners send).
        let mut large = text.to_vec();
        large.resize(HOLD_AHEAD_MAX_BYTES + 1, b'\n');
        assert!(!holds_ahead(large.len()));
        assert_eq!(held(&large, None), vec![0], "too large to hold ahead");
        let ahead = interchanges(text, None, Some(&hold))
            .next()
            .unwrap()
            .unwrap()
            .1;
        assert!(ahead.size() > ahead.compressed.as_ref().map_or(0, Vec::len));

        // Several inputs at once: held while they are few enough bytes together.
        let mut full = text.to_vec();
        full.resize(HOLD_AHEAD_MAX_BYTES, b'\n');
        let held_in_parallel = |n: usize| -> usize {
            let inputs: Vec<&[u8]> = vec![&full[..]; n];
            let mut probes: Vec<Option<Box<dyn KeyProbe + Send>>> = vec![None, None];
            in_parallel(&inputs, &mut probes, Some(&hold))
                .iter()
                .flatten()
                .map(|item| item.as_ref().expect("read").1.held.iter().flatten().count())
                .sum()
        };
        assert_eq!(held_in_parallel(4), 4);
        assert_eq!(
            held_in_parallel(5),
            0,
            "past the batch's limit nothing is held"
        );
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
        let items = in_parallel(&inputs, &mut probes, None);
        assert_eq!(probes.len(), 3, "every probe is given back");
        assert_eq!(items.len(), 8);
        for (k, input) in items.iter().enumerate() {
            assert_eq!(input.len(), 1);
            match (&input[0], k) {
                (Err(_), 3) => assert!(hash_if_rejected(inputs[k], input).is_some()),
                (Ok((i, ahead)), k) => {
                    let want = format!("R{}", if k < 3 { k } else { k - 1 });
                    assert_eq!(i.unb.control_ref, want);
                    assert!(ahead.compressed.is_some(), "no probe: every one compressed");
                    assert!(ahead.held.is_empty(), "nothing asked to hold");
                    assert_eq!(hash_if_rejected(inputs[k], input), None);
                }
                (other, k) => panic!("input {k}: {other:?}"),
            }
        }
    }
}
