//! The sealer's security rules with age keys (KMS ones run end to end on moto in the tests
//! crate): a fresh data key for every write, documents bound to their place, and under
//! `enforced` only what this server sealed is opened.

use bytes::Bytes;
use gitstate_core::{Place, SealError, StatePath};
use gitstate_seal::{SealerConfig, SopsSealer, Zeroizing};
use gitstate_sops::{encrypt, AgeKey, Document, EncryptOptions, KeySource, MasterKey};
use gitstate_statefile::{self as statefile, CheckedState};

const STATE: &str = r#"{"version":4,"serial":1,"lineage":"l","outputs":{"pw":{"value":"s3cret","type":"string"}},"resources":[]}"#;

fn place(repository: &str, path: &str) -> Place {
    Place::new(repository, &StatePath::parse(path).unwrap())
}

struct Server {
    sealer: SopsSealer,
    identity: String,
    recipient: String,
}

fn server(enforced: bool) -> Server {
    server_keeping(enforced, std::time::Duration::ZERO)
}

/// A server whose unwrapped data keys (and what it sealed) stay in memory for `ttl`.
fn server_keeping(enforced: bool, ttl: std::time::Duration) -> Server {
    let identity = {
        // an identity file as the server reads it
        let generated = age::x25519::Identity::generate();
        use age::secrecy::ExposeSecret;
        generated.to_string().expose_secret().to_owned()
    };
    let recipient = AgeKey::identity(&identity).unwrap().id();
    let config = SealerConfig {
        age_recipients: vec![recipient.clone()],
        age_identities: vec![Zeroizing::new(identity.clone())],
        enforced,
        data_key_ttl: ttl,
        ..SealerConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let sealer = runtime
        .block_on(SopsSealer::from_config(&config))
        .unwrap()
        .unwrap();
    Server {
        sealer,
        identity,
        recipient,
    }
}

impl Server {
    fn keys(&self) -> KeySource {
        KeySource::new().with(Box::new(AgeKey::identity(&self.identity).unwrap()))
    }

    /// What someone with push access but without the server's secrets can make: a document
    /// wrapped for the server's (public) recipient under a data key they chose.
    fn planted(&self, data_key: [u8; 32], extra: Vec<(String, gitstate_sops::Node)>) -> Vec<u8> {
        let recipient = AgeKey::recipient(&self.recipient).unwrap();
        encrypt(
            STATE.as_bytes(),
            &[&recipient as &dyn MasterKey],
            &EncryptOptions {
                data_key: Some(Zeroizing::new(data_key)),
                extra_metadata: extra,
                ..EncryptOptions::default()
            },
        )
        .unwrap()
    }
}

#[test]
fn every_write_gets_a_fresh_data_key() {
    let s = server(false);
    let at = place("default", "prod.tfstate");
    let one = seal_state(&s.sealer, &at, STATE.as_bytes()).unwrap();
    let two = seal_state(&s.sealer, &at, STATE.as_bytes()).unwrap();
    let (a, b) = (
        Document::decrypt(&one, &s.keys()).unwrap(),
        Document::decrypt(&two, &s.keys()).unwrap(),
    );
    assert_ne!(*a.data_key, *b.data_key, "two writes share a data key");
    assert_ne!(
        a.key_groups, b.key_groups,
        "two writes share wrapped entries"
    );
    // both bound to their place in the metadata
    let doc: serde_json::Value = serde_json::from_slice(&one).unwrap();
    assert_eq!(doc["sops"]["gitstate_repository"], "default");
    assert_eq!(doc["sops"]["gitstate_path"], "prod.tfstate");
    assert!(doc["sops"]["gitstate_seal"]
        .as_str()
        .is_some_and(|v| v.starts_with(&format!("hmac-sha256:{}:", s.recipient))));
}

#[test]
fn a_document_sealed_for_one_place_is_refused_at_another() {
    let s = server(false);
    let here = place("default", "a.tfstate");
    let sealed = seal_state(&s.sealer, &here, STATE.as_bytes()).unwrap();
    assert!(s.sealer.open_blocking(&here, &sealed).unwrap().is_some());
    for elsewhere in [place("default", "b.tfstate"), place("other", "a.tfstate")] {
        let e = s.sealer.open_blocking(&elsewhere, &sealed).unwrap_err();
        assert!(matches!(e, SealError::Misplaced(_)), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&format!("at {elsewhere} was sealed for default/a.tfstate")),
            "{text}"
        );
        assert!(!text.contains("s3cret"));
        // nor does it count as holding anything there: a write replaces it
        assert!(s
            .sealer
            .holds_blocking(&elsewhere, &sealed, STATE.as_bytes())
            .is_err());
    }
}

#[test]
fn enforced_opens_only_what_this_server_sealed() {
    let s = server(true);
    let at = place("default", "prod.tfstate");
    let own = seal_state(&s.sealer, &at, STATE.as_bytes()).unwrap();
    let opened = s.sealer.open_blocking(&at, &own).unwrap().unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&opened).unwrap(),
        serde_json::from_str::<serde_json::Value>(STATE).unwrap()
    );
    assert_eq!(
        s.sealer
            .holds_blocking(&at, &own, STATE.as_bytes())
            .unwrap(),
        Some(true)
    );

    // plaintext
    let e = s.sealer.open_blocking(&at, STATE.as_bytes()).unwrap_err();
    assert!(matches!(e, SealError::NotSealedHere(_)), "{e}");
    assert!(
        e.to_string()
            .contains("not encrypted, and encryption is enforced"),
        "{e}"
    );

    // a planted document wrapped for the server's recipient: it opens with the server's key,
    // but the server did not choose its data key
    let planted = s.planted([9; 32], Vec::new());
    assert!(Document::decrypt(&planted, &s.keys()).is_ok());
    let e = s.sealer.open_blocking(&at, &planted).unwrap_err();
    assert!(matches!(e, SealError::NotSealedHere(_)), "{e}");
    assert!(
        e.to_string().contains("was not sealed by this server"),
        "{e}"
    );

    // the same with this place named and the seal of a real version copied over
    let own_meta: serde_json::Value = serde_json::from_slice(&own).unwrap();
    let copied_seal = own_meta["sops"]["gitstate_seal"]
        .as_str()
        .unwrap()
        .to_owned();
    let planted = s.planted(
        [9; 32],
        vec![
            (
                "gitstate_repository".into(),
                gitstate_sops::Node::Str("default".into()),
            ),
            (
                "gitstate_path".into(),
                gitstate_sops::Node::Str("prod.tfstate".into()),
            ),
            (
                "gitstate_seal".into(),
                gitstate_sops::Node::Str(copied_seal),
            ),
        ],
    );
    let e = s.sealer.open_blocking(&at, &planted).unwrap_err();
    assert!(matches!(e, SealError::NotSealedHere(_)), "{e}");
    // with the replay digest the author can compute, it still holds nothing here
    let digest = {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&[9; 32]).unwrap();
        mac.update(STATE.as_bytes());
        let tag: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("hmac-sha256:{tag}")
    };
    let with_digest = s.planted(
        [9; 32],
        vec![(
            "gitstate_plaintext_hmac".into(),
            gitstate_sops::Node::Str(digest),
        )],
    );
    assert!(s
        .sealer
        .holds_blocking(&at, &with_digest, STATE.as_bytes())
        .is_err());
    let lax_check = server_with(&s, false)
        .holds_blocking(&at, &with_digest, STATE.as_bytes())
        .unwrap();
    assert_eq!(lax_check, Some(true), "the digest was made wrong");

    // not enforced, the planted document is served (it is what sops -d shows): the rule is
    // the enforced mode's
    let lax = Server {
        sealer: server_with(&s, false),
        identity: s.identity.clone(),
        recipient: s.recipient.clone(),
    };
    assert!(lax.sealer.open_blocking(&at, &planted).unwrap().is_some());
}

/// A second sealer with the same age identity.
fn server_with(s: &Server, enforced: bool) -> SopsSealer {
    let config = SealerConfig {
        age_recipients: vec![s.recipient.clone()],
        age_identities: vec![Zeroizing::new(s.identity.clone())],
        enforced,
        ..SealerConfig::default()
    };
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(SopsSealer::from_config(&config))
        .unwrap()
        .unwrap()
}

#[test]
fn a_stored_document_nested_too_deep_is_refused_with_the_reason() {
    let s = server(false);
    let at = place("default", "deep.tfstate");
    // a real version with a 10,000-deep member slipped in: the key opens, the tree does not
    let sealed = seal_state(&s.sealer, &at, STATE.as_bytes()).unwrap();
    let planted = format!(
        "{{\"deep\":{}1{},{}",
        "[".repeat(10_000),
        "]".repeat(10_000),
        &String::from_utf8(sealed.to_vec()).unwrap()[1..]
    );
    let e = s.sealer.open_blocking(&at, planted.as_bytes()).unwrap_err();
    assert!(matches!(e, SealError::Tampered(_)), "{e}");
    assert!(e.to_string().contains("more than 100 levels deep"), "{e}");
    // Deeper than the codec goes, not as deep as the check of a state stops (128 levels).
    let e = seal_state(
        &s.sealer,
        &at,
        format!(
            "{{\"version\":4,\"x\":{}1{}}}",
            "[".repeat(110),
            "]".repeat(110)
        )
        .as_bytes(),
    )
    .unwrap_err();
    assert!(matches!(e, SealError::BadInput(_)), "{e}");
    assert!(e.to_string().contains("more than 100 levels deep"), "{e}");
}

/// What this process sealed is opened again from memory (the next write's state guard, a read
/// after a write), but only at the place it was sealed for and only for exactly those bytes:
/// everything else takes the full way, with its refusals.
#[test]
fn a_document_this_process_sealed_opens_from_memory_only_where_and_as_it_was_sealed() {
    use gitstate_core::Sealer;
    // Pretty-printed as Terraform writes it: a full open gives back the document's values
    // re-serialized compactly, so getting these exact bytes back means memory answered.
    let pretty = bytes::Bytes::from(
        serde_json::to_vec_pretty(&serde_json::from_str::<serde_json::Value>(STATE).unwrap())
            .unwrap(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for enforced in [false, true] {
        let s = server_keeping(enforced, std::time::Duration::from_secs(60));
        let here = place("default", "a.tfstate");
        let sealed = runtime
            .block_on(s.sealer.seal(&here, &checked(pretty.clone())))
            .unwrap();
        let full = s.sealer.open_blocking(&here, &sealed).unwrap().unwrap();
        assert_ne!(full, pretty, "the premise: a full open re-serializes");
        let opened = runtime
            .block_on(s.sealer.open(&here, sealed.clone()))
            .unwrap();
        assert_eq!(opened, pretty, "opened from memory");

        // Another place: refused as a full open refuses it.
        for elsewhere in [place("default", "b.tfstate"), place("other", "a.tfstate")] {
            let e = runtime
                .block_on(s.sealer.open(&elsewhere, sealed.clone()))
                .unwrap_err();
            assert!(matches!(e, SealError::Misplaced(_)), "{e}");
        }
        // One encrypted value changed: not the sealed bytes, so the full open runs and finds
        // the tampering.
        let text = String::from_utf8(sealed.to_vec()).unwrap();
        let value = text
            .find("ENC[AES256_GCM,data:")
            .expect("an encrypted value")
            + "ENC[AES256_GCM,data:".len();
        let mut tampered = sealed.to_vec();
        tampered[value] = if tampered[value] == b'A' { b'B' } else { b'A' };
        let e = runtime
            .block_on(s.sealer.open(&here, bytes::Bytes::from(tampered)))
            .unwrap_err();
        assert!(matches!(e, SealError::Tampered(_)), "{e}");
    }
    // Without a time to live, nothing is kept: a full open.
    let s = server_keeping(false, std::time::Duration::ZERO);
    let here = place("default", "a.tfstate");
    let sealed = runtime
        .block_on(s.sealer.seal(&here, &checked(pretty.clone())))
        .unwrap();
    let opened = runtime.block_on(s.sealer.open(&here, sealed)).unwrap();
    assert_ne!(opened, pretty);
}

/// Only OpenTofu's own envelope (its sigil, a non-empty `encryption_version`, as
/// `gitstate_statefile` reads it) is stored as it came: a state that merely carries an
/// `encrypted_data` key is sealed like any state, so its secrets never reach the repository in
/// clear (the sealer used to key on `encrypted_data` alone).
#[test]
fn only_opentofus_envelope_is_stored_unsealed() {
    let s = server(false);
    let at = place("default", "prod.tfstate");
    let decoy = STATE.replacen('{', r#"{"encrypted_data":"AAAA","#, 1);
    let sealed = seal_state(&s.sealer, &at, decoy.as_bytes()).unwrap();
    assert!(!String::from_utf8_lossy(&sealed).contains("s3cret"));
    assert!(gitstate_core::seal::is_sops_document(&sealed), "sealed");
    let envelope = r#"{"serial":7,"lineage":"t","meta":{},"encrypted_data":"q83vEjRWeJA=","encryption_version":"v0"}"#;
    let stored = seal_state(&s.sealer, &at, envelope.as_bytes()).unwrap();
    assert_eq!(&stored[..], envelope.as_bytes());
}

/// `plain` as a write has it: after its one check.
fn checked(plain: Bytes) -> CheckedState {
    statefile::check(plain, false).expect("a state")
}

/// Seals `plain` as a write does, after its one check.
fn seal_state(sealer: &SopsSealer, at: &Place, plain: &[u8]) -> Result<Bytes, SealError> {
    let file = statefile::read(plain).expect("a state");
    sealer.seal_blocking(at, plain, &file)
}
