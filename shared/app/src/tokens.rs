//! Team-mode caller tokens: the configuration holds only SHA-256 hashes (`sha256:<hex>`), and a
//! presented token is checked against each in constant time.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Decodes `sha256:<64 hex digits>`; the error names the rule, never the value.
pub fn parse_hash(text: &str) -> Result<[u8; 32], String> {
    let hex = text.strip_prefix("sha256:").ok_or_else(|| {
        "a token hash must look like sha256:<64 hex digits> (printf %s TOKEN | sha256sum)"
            .to_owned()
    })?;
    if hex.len() != 64 {
        return Err("a token hash must have 64 hex digits after 'sha256:'".into());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| "a token hash may hold only hex digits after 'sha256:'".to_owned())?;
    }
    Ok(out)
}

/// The `sha256:<hex>` form of `token`'s hash, as configured for team mode (the wrapper configures
/// its per-run token this way).
pub fn hash_of(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .fold(String::from("sha256:"), |mut out, b| {
            out.push_str(&format!("{b:02x}"));
            out
        })
}

/// True when `token` hashes to `hash`, compared in constant time.
pub fn matches(hash: &[u8; 32], token: &str) -> bool {
    let digest = Sha256::digest(token.as_bytes());
    bool::from(digest.as_slice().ct_eq(hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_and_matches() {
        let real = format!("sha256:{}", hex(&Sha256::digest(b"s3cret")));
        let hash = parse_hash(&real).unwrap();
        assert!(matches(&hash, "s3cret"));
        assert!(!matches(&hash, "s3cret "));
        assert!(!matches(&hash, ""));
        assert!(parse_hash("md5:abc").is_err());
        assert!(parse_hash("sha256:xyz").is_err());
        assert!(parse_hash(&format!("sha256:{}", "g".repeat(64))).is_err());
        assert_eq!(hash_of("s3cret"), real);
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
