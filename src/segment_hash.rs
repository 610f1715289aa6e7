//! The SHA-256 both readers hash an interchange's segments with (EDIFACT's `edifact/hash.rs`,
//! X12's `x12/read.rs`): the segments as they stand without a transport's line breaks, gathered
//! into a buffer and handed to the hash in blocks.

use sha2::{Digest, Sha256};

/// SHA-256 over segments gathered into a buffer first. Handed to the hash one by one, each
/// segment of a few dozen bytes cost a call that copied it into the hash's block buffer, nearly
/// as much time as hashing it; gathered, the hash takes many blocks per call, and the copy is done
/// in fixed strides that compile to a few vector moves.
pub(crate) struct SegmentHasher {
    sha: Sha256,
    /// `GATHER` bytes to fill, then `STRIDE` bytes of room for the last stride to overrun into.
    pub(crate) buf: Vec<u8>,
    len: usize,
}

impl SegmentHasher {
    pub(crate) const GATHER: usize = 8 * 1024;
    const STRIDE: usize = 32;

    /// A hasher gathering into `buf`: a buffer of an earlier interchange, or a new one.
    pub(crate) fn new(mut buf: Vec<u8>) -> Self {
        buf.resize(Self::GATHER + Self::STRIDE, 0);
        SegmentHasher {
            sha: Sha256::new(),
            buf,
            len: 0,
        }
    }

    /// Appends `data[start..end]`.
    #[inline(always)]
    pub(crate) fn push(&mut self, data: &[u8], start: usize, end: usize) {
        let mut at = start;
        while at < end {
            if self.len >= Self::GATHER {
                self.flush();
            }
            let take = (end - at).min(Self::STRIDE);
            let room = &mut self.buf[self.len..self.len + Self::STRIDE];
            match data.get(at..at + Self::STRIDE) {
                // The bytes past `take` are copied too and overwritten by the next push; `len`
                // never counts them.
                Some(stride) => room.copy_from_slice(stride),
                None => room[..take].copy_from_slice(&data[at..at + take]),
            }
            self.len += take;
            at += take;
        }
    }

    /// Appends bytes of any length, copied exactly (pieces of a wrapped segment).
    pub(crate) fn push_exact(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(Self::STRIDE) {
            if self.len >= Self::GATHER {
                self.flush();
            }
            self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
            self.len += chunk.len();
        }
    }

    fn flush(&mut self) {
        self.sha.update(&self.buf[..self.len]);
        self.len = 0;
    }

    /// The digest, the buffer kept for the next interchange ([`SegmentHasher::into_buffer`]).
    pub(crate) fn finish(&mut self) -> [u8; 32] {
        self.flush();
        std::mem::take(&mut self.sha).finalize().into()
    }

    /// The buffer, for the next interchange's hasher.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// The digest, and the buffer for the next interchange.
    pub(crate) fn finalize(mut self) -> ([u8; 32], Vec<u8>) {
        self.flush();
        (self.sha.finalize().into(), self.buf)
    }
}

/// A SHA-256 as 64 lower-case hex digits, as both readers' interchanges give it. Written into
/// a buffer at once: `hex::encode` collects a `String` a `char` at a time, which cost the
/// deciding thread (that asks for it twice a new interchange) 1.5% of its instructions.
pub(crate) fn sha256_hex(sha256: &[u8; 32]) -> String {
    let mut digits = vec![0u8; 64];
    // Neither can fail (the buffer holds two digits a byte, and digits are ASCII); were one
    // to, the slow way gives the same text.
    if hex::encode_to_slice(sha256, &mut digits).is_err() {
        return hex::encode(sha256);
    }
    String::from_utf8(digits).unwrap_or_else(|_| hex::encode(sha256))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sha256_hex_is_hex_encode() {
        let mut sha = [0u8; 32];
        for (n, b) in sha.iter_mut().enumerate() {
            *b = (n as u8).wrapping_mul(37).wrapping_add(11);
        }
        assert_eq!(super::sha256_hex(&sha), hex::encode(sha));
        assert_eq!(super::sha256_hex(&[0xff; 32]), "f".repeat(64));
    }
}
