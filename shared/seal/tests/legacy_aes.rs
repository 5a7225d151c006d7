//! terraform-backend-git's legacy aes files, as an independent implementation (Python's
//! `cryptography`, `tests/vectors/legacy-aes/generate.py`) wrote them, open under their
//! passphrase and under no other; nothing else is taken for one.

use gitstate_core::Opener;
use gitstate_seal::{LegacyAes, Passphrase, Zeroizing};

fn vector(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/vectors/legacy-aes/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn opener(passphrase: &str) -> LegacyAes {
    LegacyAes::new(&Passphrase::new(
        Zeroizing::new(passphrase.to_owned()),
        "a test",
    ))
}

#[test]
fn the_vectors_open_under_their_passphrase() {
    let plain = vector("state.tfstate.json");
    for (file, passphrase) in [
        ("state.tfstate.aes", "correct horse battery staple"),
        (
            "state-unicode-passphrase.tfstate.aes",
            "žluťoučký kůň 🐎 pass",
        ),
        ("state-empty-passphrase.tfstate.aes", ""),
    ] {
        let opened = opener(passphrase)
            .open(&vector(file))
            .unwrap_or_else(|| panic!("{file} does not open"));
        assert_eq!(opened.as_ref(), plain.as_slice(), "{file}");
    }
}

#[test]
fn nothing_else_opens() {
    let sealed = vector("state.tfstate.aes");
    let right = opener("correct horse battery staple");
    for passphrase in [
        "correct horse battery stapl",
        "Correct horse battery staple",
        "",
    ] {
        assert!(opener(passphrase).open(&sealed).is_none(), "{passphrase:?}");
    }
    // Any change to nonce, ciphertext or tag fails the tag check.
    for at in [0, 11, 12, sealed.len() / 2, sealed.len() - 1] {
        let mut tampered = sealed.clone();
        tampered[at] ^= 0x01;
        assert!(right.open(&tampered).is_none(), "byte {at} flipped");
    }
    // Cut short, empty, plaintext, or shorter than nonce + tag: not this format.
    for short in [
        &sealed[..sealed.len() - 1],
        &sealed[..28],
        &sealed[..27],
        &[][..],
        &vector("state.tfstate.json")[..],
    ] {
        assert!(right.open(short).is_none(), "{} bytes", short.len());
    }
}

#[test]
fn the_passphrase_is_never_printed() {
    let passphrase = Passphrase::new(
        Zeroizing::new("correct horse battery staple".to_owned()),
        "environment TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE",
    );
    let opener = LegacyAes::new(&passphrase);
    for shown in [format!("{passphrase:?}"), format!("{opener:?}")] {
        assert!(!shown.contains("staple"), "{shown}");
        assert!(!shown.contains("9cc2ae8a"), "the key is printed: {shown}");
    }
    assert_eq!(
        opener.key_source(),
        "the passphrase in environment TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE"
    );
}
