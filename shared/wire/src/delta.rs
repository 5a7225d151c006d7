//! git's delta format (a pack's `OFS_DELTA`/`REF_DELTA` payload, gitformat-pack "Deltified
//! representation"): the sizes of the base and the result as little-endian base-128 numbers, then
//! instructions that copy a range of the base or insert literal bytes. gix-pack applies deltas
//! only inside its own pack code and has no encoder, so both directions are here.
//!
//! [`encode`] makes the delta a one-place edit needs: the common prefix and the common suffix of
//! the base copied, the middle inserted. That is what a write does to every tree on its path (one
//! entry added, changed or removed) and, for a plain state, often to its file; it is what makes a
//! push into a folder of thousands of states carry a few dozen bytes per tree instead of the whole
//! tree. [`apply`] reads any delta (those a server's `pack-objects` makes too), bounded.

/// The largest range one copy instruction names here (git's own encoder uses the same).
const MAX_COPY: usize = 0x10000;
/// The most literal bytes one insert instruction carries.
const MAX_INSERT: usize = 0x7f;

/// Why a delta could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The delta is not well formed (truncated, reserved instruction, a copy outside the base, a
    /// result that does not have the announced size).
    #[error("a corrupt delta: {0}")]
    Corrupt(&'static str),
    /// The base given is not the size the delta was made against.
    #[error("a delta made against a base of {expected} bytes was given one of {given}")]
    BaseSize {
        /// The size the delta names.
        expected: u64,
        /// The base's size.
        given: u64,
    },
    /// The result would be larger than allowed.
    #[error("a delta's result of {size} bytes is over the limit of {limit}")]
    TooLarge {
        /// The size the delta names.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

/// The delta that turns `base` into `target`: copy the common prefix, insert what differs,
/// copy the common suffix.
pub fn encode(base: &[u8], target: &[u8]) -> Vec<u8> {
    let prefix = base.iter().zip(target).take_while(|(a, b)| a == b).count();
    let room = base.len().min(target.len()) - prefix;
    let suffix = base
        .iter()
        .rev()
        .zip(target.iter().rev())
        .take(room)
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = Vec::with_capacity(32 + target.len() - prefix - suffix);
    size(&mut out, base.len());
    size(&mut out, target.len());
    copy(&mut out, 0, prefix);
    for chunk in target[prefix..target.len() - suffix].chunks(MAX_INSERT) {
        out.push(chunk.len() as u8);
        out.extend_from_slice(chunk);
    }
    copy(&mut out, base.len() - suffix, suffix);
    out
}

/// Applies `delta` to `base`; the result may be at most `limit` bytes.
pub fn apply(base: &[u8], delta: &[u8], limit: u64) -> Result<Vec<u8>, DeltaError> {
    let mut at = 0;
    let base_size = read_size(delta, &mut at)?;
    if base_size != base.len() as u64 {
        return Err(DeltaError::BaseSize {
            expected: base_size,
            given: base.len() as u64,
        });
    }
    let result_size = read_size(delta, &mut at)?;
    if result_size > limit {
        return Err(DeltaError::TooLarge {
            size: result_size,
            limit,
        });
    }
    let result_size = usize::try_from(result_size).map_err(|_| DeltaError::Corrupt("size"))?;
    let mut out = Vec::with_capacity(result_size);
    while let Some(&op) = delta.get(at) {
        at += 1;
        let piece = if op & 0x80 != 0 {
            // Bits 0-3: which bytes of the offset follow; bits 4-6: which of the size.
            let (mut offset, mut len) = (0usize, 0usize);
            for bit in 0..7 {
                if op & (1 << bit) != 0 {
                    let byte = usize::from(
                        *delta
                            .get(at)
                            .ok_or(DeltaError::Corrupt("a truncated copy instruction"))?,
                    );
                    at += 1;
                    if bit < 4 {
                        offset |= byte << (8 * bit);
                    } else {
                        len |= byte << (8 * (bit - 4));
                    }
                }
            }
            let len = if len == 0 { 0x10000 } else { len };
            let end = offset
                .checked_add(len)
                .ok_or(DeltaError::Corrupt("a copy past the base"))?;
            base.get(offset..end)
                .ok_or(DeltaError::Corrupt("a copy past the base"))?
        } else if op == 0 {
            return Err(DeltaError::Corrupt("the reserved instruction 0"));
        } else {
            let end = at + op as usize;
            let bytes = delta
                .get(at..end)
                .ok_or(DeltaError::Corrupt("a truncated insert instruction"))?;
            at = end;
            bytes
        };
        if out.len() + piece.len() > result_size {
            return Err(DeltaError::Corrupt("more bytes than announced"));
        }
        out.extend_from_slice(piece);
    }
    if out.len() != result_size {
        return Err(DeltaError::Corrupt("fewer bytes than announced"));
    }
    Ok(out)
}

/// Appends `n` as a delta header size (7 bits a byte, low first, high bit: more follows).
fn size(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Reads a delta header size at `*at`.
fn read_size(delta: &[u8], at: &mut usize) -> Result<u64, DeltaError> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *delta
            .get(*at)
            .ok_or(DeltaError::Corrupt("a truncated header"))?;
        *at += 1;
        n |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err(DeltaError::Corrupt("a header size of more than 64 bits"))
}

/// Appends the instructions copying `len` bytes of the base from `offset`.
fn copy(out: &mut Vec<u8>, mut offset: usize, mut len: usize) {
    while len > 0 {
        let piece = len.min(MAX_COPY);
        let mut op = 0x80u8;
        let at = out.len();
        out.push(0);
        for (bit, byte) in (offset as u32).to_le_bytes().into_iter().enumerate() {
            if byte != 0 {
                op |= 1 << bit;
                out.push(byte);
            }
        }
        // A size of 0x10000 is written as no size bytes at all.
        if piece != 0x10000 {
            for (bit, byte) in (piece as u32).to_le_bytes().into_iter().take(3).enumerate() {
                if byte != 0 {
                    op |= 1 << (bit + 4);
                    out.push(byte);
                }
            }
        }
        out[at] = op;
        offset += piece;
        len -= piece;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(base: &[u8], target: &[u8]) -> Vec<u8> {
        let delta = encode(base, target);
        assert_eq!(apply(base, &delta, u64::MAX).unwrap(), target);
        delta
    }

    #[test]
    fn a_one_place_edit_costs_the_edit() {
        let base: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut target = base.clone();
        target.splice(100_000..100_020, *b"twenty other bytes!!");
        let delta = round_trip(&base, &target);
        assert!(delta.len() < 80, "{} bytes", delta.len());
        let mut grown = base.clone();
        grown.splice(5..5, b"inserted".iter().copied());
        assert!(round_trip(&base, &grown).len() < 60);
        assert!(round_trip(&base, &base[..base.len() - 1]).len() < 60);
    }

    #[test]
    fn edges_round_trip() {
        round_trip(b"", b"");
        round_trip(b"", b"new");
        round_trip(b"old", b"");
        round_trip(b"same", b"same");
        round_trip(b"aaaa", b"aa");
        round_trip(b"aa", b"aaaa");
        let big = vec![7u8; 0x10000 * 3 + 5];
        round_trip(&big, &big);
        round_trip(&big, &big[1..]);
    }

    #[test]
    fn a_bad_delta_is_an_error() {
        let delta = encode(b"hello world", b"hello there world");
        assert!(matches!(
            apply(b"hello", &delta, u64::MAX),
            Err(DeltaError::BaseSize { .. })
        ));
        assert!(matches!(
            apply(b"hello world", &delta, 3),
            Err(DeltaError::TooLarge { .. })
        ));
        assert!(apply(b"hello world", &delta[..delta.len() - 1], u64::MAX).is_err());
        // Size 11 -> 1, then a copy of 5 bytes: more than announced.
        assert!(apply(b"hello world", &[11, 1, 0x90, 5], u64::MAX).is_err());
        assert!(apply(b"hello world", &[11, 1, 0], u64::MAX).is_err());
        // A copy past the base.
        assert!(apply(b"hello world", &[11, 2, 0x91, 10, 2], u64::MAX).is_err());
    }

    proptest::proptest! {
        /// Whatever two buffers: the delta rebuilds the target; any bytes as a delta give a
        /// result or an error, never a panic.
        #[test]
        fn any_pair_round_trips(
            base in proptest::collection::vec(0u8..4, 0..300),
            target in proptest::collection::vec(0u8..4, 0..300),
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            round_trip(&base, &target);
            let _ = apply(&base, &junk, 1 << 20);
        }
    }
}
