//! Shamir secret sharing over GF(2^8) as sops uses it (HashiCorp Vault's `shamir`
//! package: each share is the y bytes followed by one x-coordinate byte).

use zeroize::Zeroizing;

use crate::SopsError;

fn mul(a: u8, b: u8) -> u8 {
    let (mut a, mut b, mut r) = (a, b, 0u8);
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        let hi = a & 0x80;
        a <<= 1;
        if hi != 0 {
            a ^= 0x1b;
        }
        b >>= 1;
    }
    r
}

fn inv(a: u8) -> u8 {
    // a^254 = a^-1 in GF(2^8)
    let mut r = 1u8;
    let mut base = a;
    let mut e = 254u32;
    while e > 0 {
        if e & 1 == 1 {
            r = mul(r, base);
        }
        base = mul(base, base);
        e >>= 1;
    }
    r
}

/// Recombines `shares` (at least the threshold of them) into the secret.
pub fn combine<S: AsRef<[u8]>>(shares: &[S]) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    let shares: Vec<&[u8]> = shares.iter().map(AsRef::as_ref).collect();
    let first = shares
        .first()
        .ok_or_else(|| SopsError::Metadata("no Shamir shares to combine".into()))?;
    let len = first.len();
    if len < 2 || shares.iter().any(|s| s.len() != len) {
        return Err(SopsError::Metadata(
            "Shamir shares are too short or of different lengths".into(),
        ));
    }
    let xs: Vec<u8> = shares.iter().map(|s| s[len - 1]).collect();
    for (i, x) in xs.iter().enumerate() {
        if xs[..i].contains(x) {
            return Err(SopsError::Metadata("duplicate Shamir share".into()));
        }
    }
    let mut secret = Zeroizing::new(vec![0u8; len - 1]);
    for (byte, out) in secret.iter_mut().enumerate() {
        let mut acc = 0u8;
        for (i, share) in shares.iter().enumerate() {
            let mut basis = 1u8;
            for (j, xj) in xs.iter().enumerate() {
                if i != j {
                    // (0 - x_j) / (x_i - x_j), subtraction is xor
                    basis = mul(basis, mul(*xj, inv(xs[i] ^ xj)));
                }
            }
            acc ^= mul(share[byte], basis);
        }
        *out = acc;
    }
    Ok(secret)
}

/// Splits `secret` into `parts` shares, any `threshold` of which recombine it.
pub fn split(
    secret: &[u8],
    parts: usize,
    threshold: usize,
) -> Result<Vec<Zeroizing<Vec<u8>>>, SopsError> {
    use rand::RngCore;
    if threshold < 2 || parts < threshold || parts > 255 {
        return Err(SopsError::Options(format!(
            "Shamir needs 2 <= threshold ({threshold}) <= parts ({parts}) <= 255"
        )));
    }
    let mut rng = rand::rng();
    // distinct non-zero x coordinates 1..=parts shuffled is not needed; 1..=parts is valid.
    let mut shares: Vec<Zeroizing<Vec<u8>>> = (1..=parts)
        .map(|_| Zeroizing::new(Vec::with_capacity(secret.len() + 1)))
        .collect();
    let mut coeffs = Zeroizing::new(vec![0u8; threshold - 1]);
    for &s in secret {
        rng.fill_bytes(coeffs.as_mut_slice());
        for (idx, share) in shares.iter_mut().enumerate() {
            let x = (idx + 1) as u8;
            // Horner: s + c1 x + c2 x^2 ...
            let mut y = 0u8;
            for c in coeffs.iter().rev() {
                y = mul(y, x) ^ c;
            }
            y = mul(y, x) ^ s;
            share.push(y);
        }
    }
    for (idx, share) in shares.iter_mut().enumerate() {
        share.push((idx + 1) as u8);
    }
    Ok(shares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_combine_round_trip() {
        let secret: Vec<u8> = (0..32).collect();
        let shares = split(&secret, 3, 2).unwrap();
        assert_eq!(*combine(&shares[0..2]).unwrap(), secret);
        assert_eq!(*combine(&shares[1..3]).unwrap(), secret);
        assert_eq!(
            *combine(&[shares[0].clone(), shares[2].clone()]).unwrap(),
            secret
        );
        assert_eq!(*combine(&shares).unwrap(), secret);
        assert_ne!(*combine(&shares[0..1]).unwrap(), secret);
    }
}
