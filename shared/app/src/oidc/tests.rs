//! The token checks, each refusal on its own: tokens signed with `jsonwebtoken` (a standard JOSE
//! library) with keys `openssl` makes, the issuer's keys in a JWKS file.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use gitstate_tests::oidc::{make_key as key, write_jwks};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::*;

const ISSUER: &str = "https://issuer.test";
const AUDIENCE: &str = "gitstate";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims as a Kubernetes projected token has them, valid for ten minutes.
fn claims() -> Value {
    json!({
        "iss": ISSUER,
        "aud": [AUDIENCE],
        "sub": "system:serviceaccount:team-a:runner",
        "iat": now(),
        "exp": now() + 600,
        "kubernetes.io": {"namespace": "team-a"},
    })
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    encode(&header, claims, key).expect("signed")
}

fn configured(jwks: &Path) -> Issuers {
    Issuers::from_config(&[OidcConfig {
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        jwks_file: Some(jwks.to_owned()),
        max_token_life: Some("1h".into()),
        max_run: None,
        clock_skew: None,
        rules: vec![
            RuleConfig {
                claims: [("kubernetes.io.namespace".to_owned(), "team-a".to_owned())].into(),
                name: "team-a".into(),
                access: Some("read-only".into()),
                paths: vec!["teams/a/**".into()],
            },
            RuleConfig {
                claims: [("sub".to_owned(), "repo:acme/*:**".to_owned())].into(),
                name: "ci".into(),
                access: None,
                paths: Vec::new(),
            },
        ],
    }])
    .expect("issuers")
}

/// The sentence `token` is refused with: never the token or a part of it, nor what the
/// configuration holds (the issuer, the audience, a rule's claims), nor the token's `sub`.
fn refusal(issuers: &Issuers, token: &str) -> String {
    match issuers.verify(token) {
        Some(Err(Refused(sentence))) => {
            assert!(!sentence.contains(token), "the token is in: {sentence}");
            for told in [
                ISSUER,
                "issuer.test",
                AUDIENCE,
                "team-a",
                "acme",
                "serviceaccount",
            ] {
                assert!(!sentence.contains(told), "'{told}' is in: {sentence}");
            }
            for part in token.split('.').filter(|p| p.len() > 8) {
                assert!(
                    !sentence.contains(part),
                    "a part of the token is in: {sentence}"
                );
            }
            sentence
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn tokens_of_each_algorithm_map_to_the_first_matching_rule() {
    let dir = tempfile::tempdir().unwrap();
    let (rsa, rsa_jwk) = key(dir.path(), Algorithm::RS256, "rsa");
    let (ec, ec_jwk) = key(dir.path(), Algorithm::ES256, "ec");
    let (ed, ed_jwk) = key(dir.path(), Algorithm::EdDSA, "ed");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&rsa_jwk, &ec_jwk, &ed_jwk]);
    let issuers = configured(&jwks);
    for (alg, kid, key) in [
        (Algorithm::RS256, "rsa", &rsa),
        (Algorithm::ES256, "ec", &ec),
        (Algorithm::EdDSA, "ed", &ed),
    ] {
        let verified = issuers
            .verify(&sign(alg, Some(kid), key, &claims()))
            .expect("a JWT")
            .unwrap_or_else(|e| panic!("{alg:?}: {e}"));
        assert_eq!(verified.name, "team-a");
        assert_eq!(verified.scope.to_string(), "read-only on teams/a/**");
    }
    // GitHub-shaped claims: the second rule.
    let mut github = claims();
    github["sub"] = json!("repo:acme/infra:ref:refs/heads/main");
    github.as_object_mut().unwrap().remove("kubernetes.io");
    let verified = issuers
        .verify(&sign(Algorithm::RS256, Some("rsa"), &rsa, &github))
        .unwrap()
        .expect("the ci rule");
    assert_eq!(verified.name, "ci");
    assert_eq!(verified.scope.to_string(), Scope::full().to_string());
    // What is no JWT is left to the other checks (a team token, a user's password).
    assert!(issuers.verify("a-team-token").is_none());
    assert!(issuers.verify("a.b.c").is_none());
}

#[test]
fn every_wrong_token_is_refused_with_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (rsa, rsa_jwk) = key(dir.path(), Algorithm::RS256, "rsa");
    let (other, _) = key(dir.path(), Algorithm::RS256, "other");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&rsa_jwk]);
    let issuers = configured(&jwks);
    let signed = |claims: &Value| sign(Algorithm::RS256, Some("rsa"), &rsa, claims);
    let with = |name: &str, value: Value| {
        let mut c = claims();
        c[name] = value;
        c
    };

    // Past its `exp` (beyond the clock skew) a token is admitted only as expired, to finish the
    // run whose lock it took, for `max_run` (1 h by default); past that it is refused.
    let expired = with("exp", json!(now() - 120));
    let verified = issuers
        .verify(&signed(&expired))
        .unwrap()
        .expect("within max_run");
    assert!(verified.expired);
    assert!(!issuers.verify(&signed(&claims())).unwrap().unwrap().expired);
    let mut gone = with("exp", json!(now() - 3700));
    gone["iat"] = json!(now() - 3700 - 600);
    assert!(refusal(&issuers, &signed(&gone)).contains("expired"));
    let audience = with("aud", json!("another"));
    assert!(refusal(&issuers, &signed(&audience)).contains("(aud)"));
    let issuer = with("iss", json!("https://evil.test"));
    let unverified = refusal(&issuers, &signed(&issuer));
    assert!(
        unverified.contains("signature cannot be verified"),
        "{unverified}"
    );
    assert!(!unverified.contains("evil.test"), "{unverified}");
    let early = with("nbf", json!(now() + 600));
    assert!(refusal(&issuers, &signed(&early)).contains("not valid yet"));
    let mut long = with("exp", json!(now() + 48 * 3600));
    long["iat"] = json!(now());
    let life = refusal(&issuers, &signed(&long));
    assert!(life.contains("life (exp - iat)"), "{life}");
    assert!(
        !life.contains("max_token_life") && !life.contains("3600"),
        "{life}"
    );
    let mut no_exp = claims();
    no_exp.as_object_mut().unwrap().remove("exp");
    assert!(refusal(&issuers, &signed(&no_exp)).contains("'exp'"));
    let unmatched = with("sub", json!("system:serviceaccount:team-b:runner"));
    let mut unmatched = unmatched;
    unmatched["kubernetes.io"] = json!({"namespace": "team-b"});
    let sentence = refusal(&issuers, &signed(&unmatched));
    assert!(sentence.contains("no rule"), "{sentence}");
    assert!(!sentence.contains("team-b"), "the token's sub: {sentence}");

    // A key the issuer's set lacks, by kid; a token signed by another key under a known kid;
    // a token naming no kid: each the sentence of an unconfigured issuer.
    let unknown = sign(Algorithm::RS256, Some("other"), &other, &claims());
    assert_eq!(refusal(&issuers, &unknown), unverified);
    let forged = sign(Algorithm::RS256, Some("rsa"), &other, &claims());
    assert_eq!(refusal(&issuers, &forged), unverified);
    let two = dir.path().join("two.json");
    let (_, second) = key(dir.path(), Algorithm::RS256, "second");
    write_jwks(&two, &[&rsa_jwk, &second]);
    let no_kid = sign(Algorithm::RS256, None, &rsa, &claims());
    assert_eq!(refusal(&configured(&two), &no_kid), unverified);
    // And where no issuer is configured at all.
    assert_eq!(refusal(&Issuers::default(), &signed(&claims())), unverified);

    // A payload changed after signing.
    let token = signed(&claims());
    let parts: Vec<&str> = token.split('.').collect();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut payload: Value = serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
    payload["kubernetes.io"] = json!({"namespace": "team-a", "extra": true});
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        b64.encode(serde_json::to_vec(&payload).unwrap()),
        parts[2]
    );
    assert_eq!(refusal(&issuers, &tampered), unverified);

    // `alg: none`, and HS256 keyed with the public key's bytes (algorithm confusion).
    let none = format!(
        "{}.{}.",
        b64.encode(br#"{"alg":"none","typ":"JWT"}"#),
        parts[1]
    );
    assert!(refusal(&issuers, &none).contains("algorithm 'none'"));
    let public = serde_json::to_vec(&rsa_jwk).unwrap();
    let confused = sign(
        Algorithm::HS256,
        Some("rsa"),
        &EncodingKey::from_secret(&public).unwrap(),
        &claims(),
    );
    assert!(refusal(&issuers, &confused).contains("algorithm 'HS256'"));
}

/// Past [`jwks::FILE_RECHECK`], the next use of a `jwks_file` looks at it again.
fn after_a_recheck() {
    std::thread::sleep(jwks::FILE_RECHECK);
}

#[test]
fn keys_rotate_with_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (old, old_jwk) = key(dir.path(), Algorithm::ES256, "old");
    let (new, new_jwk) = key(dir.path(), Algorithm::ES256, "new");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&old_jwk]);
    let issuers = configured(&jwks);
    let by_old = sign(Algorithm::ES256, Some("old"), &old, &claims());
    let by_new = sign(Algorithm::ES256, Some("new"), &new, &claims());
    assert!(matches!(issuers.verify(&by_old), Some(Ok(_))));
    assert!(refusal(&issuers, &by_new).contains("signature cannot be verified"));
    // Both while the issuer rotates, then only the new one.
    write_jwks(&jwks, &[&old_jwk, &new_jwk]);
    after_a_recheck();
    assert!(matches!(issuers.verify(&by_old), Some(Ok(_))));
    assert!(matches!(issuers.verify(&by_new), Some(Ok(_))));
    write_jwks(&jwks, &[&new_jwk]);
    after_a_recheck();
    assert!(refusal(&issuers, &by_old).contains("signature cannot be verified"));
    assert!(matches!(issuers.verify(&by_new), Some(Ok(_))));
}

/// The file is the truth: removed, no JWKS, or an empty set, it admits no token of its issuer
/// (revocation without a restart); written again, its keys work again.
#[test]
fn a_removed_broken_or_emptied_key_file_admits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (k, jwk) = key(dir.path(), Algorithm::ES256, "k");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&jwk]);
    let issuers = configured(&jwks);
    let token = sign(Algorithm::ES256, Some("k"), &k, &claims());
    assert!(matches!(issuers.verify(&token), Some(Ok(_))));
    let revocations: [(&str, &dyn Fn()); 3] = [
        ("removed", &|| std::fs::remove_file(&jwks).unwrap()),
        ("not JSON", &|| std::fs::write(&jwks, b"not json").unwrap()),
        ("empty", &|| {
            std::fs::write(&jwks, br#"{"keys":[]}"#).unwrap()
        }),
    ];
    for (what, revoke) in revocations {
        revoke();
        after_a_recheck();
        let sentence = refusal(&issuers, &token);
        assert!(
            sentence.contains("signature cannot be verified"),
            "{what}: {sentence}"
        );
        write_jwks(&jwks, &[&jwk]);
        after_a_recheck();
        assert!(
            matches!(issuers.verify(&token), Some(Ok(_))),
            "{what}: again"
        );
    }
    // An empty set at start: the issuer starts and admits nothing.
    std::fs::write(&jwks, br#"{"keys":[]}"#).unwrap();
    let empty = configured(&jwks);
    assert!(refusal(&empty, &token).contains("signature cannot be verified"));
}

fn rule(claims: &[(&str, &str)], name: &str) -> RuleConfig {
    RuleConfig {
        claims: claims
            .iter()
            .map(|(c, p)| ((*c).to_owned(), (*p).to_owned()))
            .collect(),
        name: name.into(),
        access: None,
        paths: Vec::new(),
    }
}

#[test]
fn a_wrong_configuration_is_refused_at_start_with_a_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let (_, jwk) = key(dir.path(), Algorithm::EdDSA, "ed");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&jwk]);
    let good = OidcConfig {
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        jwks_file: Some(jwks.clone()),
        max_token_life: None,
        max_run: None,
        clock_skew: None,
        rules: vec![rule(&[("sub", "system:serviceaccount:team-a:*")], "any")],
    };
    assert!(Issuers::from_config(std::slice::from_ref(&good)).is_ok());
    let github = "https://token.actions.githubusercontent.com";
    let broken = [
        (
            OidcConfig {
                issuer: "http://plain.test".into(),
                ..good.clone()
            },
            "https://",
        ),
        (
            OidcConfig {
                audience: String::new(),
                ..good.clone()
            },
            "audience",
        ),
        (
            OidcConfig {
                jwks_file: Some(dir.path().join("absent.json")),
                ..good.clone()
            },
            "cannot be read",
        ),
        (
            OidcConfig {
                rules: Vec::new(),
                ..good.clone()
            },
            "rule",
        ),
        (
            OidcConfig {
                max_token_life: Some("forever".into()),
                ..good.clone()
            },
            "max_token_life",
        ),
        (
            OidcConfig {
                rules: vec![good.rules[0].clone(), rule(&[], "none")],
                ..good.clone()
            },
            "rule 2 ('none'): it names no claim",
        ),
        (
            OidcConfig {
                rules: vec![rule(&[("sub", "*")], "everyone")],
                ..good.clone()
            },
            "rule 1 ('everyone'): it matches every token",
        ),
        (
            OidcConfig {
                issuer: github.into(),
                rules: vec![rule(
                    &[("sub", "repo:acme/infra:ref:refs/heads/main")],
                    "infra",
                )],
                ..good.clone()
            },
            "rule 1 ('infra'): GitHub Actions signs tokens",
        ),
    ];
    for (config, says) in broken {
        let e = Issuers::from_config(&[config]).expect_err(says);
        assert!(e.contains(says) && e.contains("auth.oidc"), "{e}");
        assert!(
            !e.contains("sub = \"*\""),
            "it suggests a rule for everyone: {e}"
        );
    }
    let twice = Issuers::from_config(&[good.clone(), good]).expect_err("twice");
    assert!(twice.contains("twice"), "{twice}");
}

/// Under GitHub's issuer a rule pins the owner by id: a token of another owner with the same
/// repository name (one registered again after a rename) is refused.
#[test]
fn a_shared_issuer_admits_only_the_pinned_owner() {
    let dir = tempfile::tempdir().unwrap();
    let (k, jwk) = key(dir.path(), Algorithm::RS256, "k");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&jwk]);
    let github = "https://token.actions.githubusercontent.com";
    let issuers = Issuers::from_config(&[OidcConfig {
        issuer: github.into(),
        audience: AUDIENCE.into(),
        jwks_file: Some(jwks),
        rules: vec![rule(
            &[
                ("repository_owner_id", "1342004"),
                ("sub", "repo:acme/infra:ref:refs/heads/*"),
            ],
            "infra",
        )],
        ..Default::default()
    }])
    .expect("a rule with the owner's id starts");
    let token = |owner_id: &str, sub: &str| {
        let mut c = claims();
        c["iss"] = json!(github);
        c["sub"] = json!(sub);
        c["repository_owner_id"] = json!(owner_id);
        sign(Algorithm::RS256, Some("k"), &k, &c)
    };
    let main = "repo:acme/infra:ref:refs/heads/main";
    let verified = issuers.verify(&token("1342004", main)).unwrap();
    assert_eq!(verified.expect("the owner's branch").name, "infra");
    for (owner_id, sub) in [
        ("9999999", main),
        ("1342004", "repo:acme/infra:environment:prod"),
        ("1342004", "repo:acme/infra:pull_request"),
    ] {
        let sentence = refusal(&issuers, &token(owner_id, sub));
        assert!(sentence.contains("no rule"), "{sentence}");
        assert!(
            !sentence.contains("1342004") && !sentence.contains(github),
            "{sentence}"
        );
    }
}

/// Every rule of the README's workload-identity section starts as written (its `jwks_file`, a
/// path on the reader's machine, replaced by a real one).
#[test]
fn the_readme_examples_start() {
    #[derive(serde::Deserialize)]
    struct File {
        auth: Auth,
    }
    #[derive(serde::Deserialize)]
    struct Auth {
        #[serde(rename = "oidc", deserialize_with = "crate::blocks::one_or_more")]
        oidc: Vec<OidcConfig>,
    }
    let readme = include_str!("../../../../README.md");
    let section = readme
        .split("#### Workload identity")
        .nth(1)
        .expect("the README's workload-identity section");
    let section = section.split("\n### ").next().unwrap_or(section);
    let dir = tempfile::tempdir().unwrap();
    let (_, jwk) = key(dir.path(), Algorithm::EdDSA, "ed");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&jwk]);
    let mut issuers = Vec::new();
    for block in section.split("```hcl\n").skip(1) {
        let text = block.split("```").next().unwrap_or_default();
        let file: File = hcl::from_str(text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
        for mut config in file.auth.oidc {
            if config.jwks_file.is_some() {
                config.jwks_file = Some(jwks.clone());
            }
            Issuers::from_config(std::slice::from_ref(&config))
                .unwrap_or_else(|e| panic!("{e}:\n{text}"));
            issuers.push(config.issuer);
        }
    }
    for shared in &claim_rules::SHARED_ISSUERS {
        assert!(issuers.iter().any(|i| i == shared.issuer), "{issuers:?}");
    }
    assert!(issuers.len() >= 3, "{issuers:?}");
}
