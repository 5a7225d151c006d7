//! The few pkt-line pieces the send-pack client writes and parses itself (gix has no push): encoding
//! a data line, and splitting a buffer of pkt-lines (the `report-status` inside side-band 1).

/// A flush packet.
pub const FLUSH: &[u8] = b"0000";

/// Largest payload of one pkt-line (65520 bytes minus the 4-byte length).
pub const MAX_DATA_LEN: usize = 65516;

/// Appends `data` as one pkt-line to `out`. `data` must fit in one line.
pub fn encode(data: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    if data.len() > MAX_DATA_LEN {
        return Err(format!(
            "a pkt-line of {} bytes is longer than the protocol allows",
            data.len()
        ));
    }
    out.extend_from_slice(format!("{:04x}", data.len() + 4).as_bytes());
    out.extend_from_slice(data);
    Ok(())
}

/// One decoded packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    /// `0000`.
    Flush,
    /// `0001` (protocol v2 delimiter) or `0002` (response end): not expected here, but tolerated.
    Special,
    /// A data line (payload only).
    Data(&'a [u8]),
}

/// Splits `buf` into packets. Stops with an error on a malformed length.
pub fn split(mut buf: &[u8]) -> Result<Vec<Packet<'_>>, String> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        if buf.len() < 4 {
            return Err("truncated pkt-line length".into());
        }
        let len = std::str::from_utf8(&buf[..4])
            .ok()
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or_else(|| format!("invalid pkt-line length {:?}", &buf[..4]))?;
        match len {
            0 => {
                out.push(Packet::Flush);
                buf = &buf[4..];
            }
            1..=3 => {
                out.push(Packet::Special);
                buf = &buf[4..];
            }
            _ => {
                if buf.len() < len {
                    return Err("truncated pkt-line".into());
                }
                out.push(Packet::Data(&buf[4..len]));
                buf = &buf[len..];
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes split into packets or fail with a sentence; never a panic.
        #[test]
        fn any_bytes_split_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = split(&bytes);
        }

        /// Length-prefixed garbage (the shape a server sends) too.
        #[test]
        fn framed_garbage_splits_or_fails(
            parts in proptest::collection::vec((0usize..70, proptest::collection::vec(any::<u8>(), 0..64)), 0..8)
        ) {
            let mut buf = Vec::new();
            for (len, data) in parts {
                buf.extend_from_slice(format!("{len:04x}").as_bytes());
                buf.extend_from_slice(&data);
            }
            let _ = split(&buf);
        }

        /// What `encode` writes, `split` reads back.
        #[test]
        fn encoded_lines_split_back(lines in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..8)) {
            let mut buf = Vec::new();
            for line in &lines {
                encode(line, &mut buf).unwrap();
            }
            let packets = split(&buf).unwrap();
            let expected: Vec<Packet<'_>> = lines.iter().map(|l| Packet::Data(l)).collect();
            prop_assert_eq!(packets, expected);
        }
    }

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        encode(b"unpack ok\n", &mut buf).unwrap();
        encode(b"ok refs/heads/main\n", &mut buf).unwrap();
        buf.extend_from_slice(FLUSH);
        assert_eq!(&buf[..4], b"000e");
        assert_eq!(
            split(&buf).unwrap(),
            vec![
                Packet::Data(b"unpack ok\n"),
                Packet::Data(b"ok refs/heads/main\n"),
                Packet::Flush
            ]
        );
        assert!(split(b"00zz").is_err());
        assert!(split(b"0010abc").is_err());
    }
}
