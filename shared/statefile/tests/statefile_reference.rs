//! The server's decision on a state body (`gitstate_statefile::read`: accepted, or 400)
//! against a reading of what Terraform's own decoder accepts, written here independently of it:
//! - `internal/states/statefile/read.go`: the version sniff (`Version *uint64`), formats 3 and 4
//!   (gitstate stores no older one: no client of an http backend writes it);
//! - `version4.go`: `stateV4` (`serial uint64`, `lineage string`, `terraform_version string`,
//!   `outputs map[string]outputStateV4`, `resources []resourceStateV4`, `check_results
//!   []checkResultsV4`) and `prepareStateV4` (a non-empty `terraform_version` must parse with
//!   go-version);
//! - `version3.go` / `version3_upgrade.go`: `serial int64`, refused below zero; `modules`;
//! - OpenTofu's `internal/encryption/{base,state}.go`: the envelope of a client-encrypted state.
//!
//! Bodies are built from header fields of random JSON types, under spellings Go's
//! `encoding/json` matches to the field (any case; `ſ` for `s`, `K` for `k`) and near misses it
//! does not. Composite values come from pools whose elements are what Terraform writes, wrong at
//! the level of the Go types, or decoded but refused by `prepareStateV4` (a resource without a
//! valid mode, an instance twice); each pool entry says, read from the Go types and
//! `prepareStateV4`, for which field the reader takes it (for v3's fields: the decoder; the v3
//! upgrade's own checks are not made by gitstate).
//!
//! `PROPTEST_CASES=100000 cargo test -p gitstate-statefile --test statefile_reference` for a long run.

use gitstate_statefile::{self as statefile, Form};
use proptest::prelude::*;

/// A JSON value as generated: its text, and what it is for Go's decoder.
#[derive(Debug, Clone)]
enum Tok {
    Null,
    Bool(bool),
    /// A number literal exactly as written.
    Number(String),
    Str(String),
    /// An array or object literal from a pool.
    Composite(&'static Composite),
}

/// A composite literal and the fields whose reader takes it (decoded, and for v4 prepared).
#[derive(Debug)]
struct Composite {
    text: &'static str,
    read_as: &'static [&'static str],
}

impl Tok {
    fn json(&self) -> String {
        match self {
            Tok::Null => "null".into(),
            Tok::Bool(b) => b.to_string(),
            Tok::Number(n) => n.clone(),
            Tok::Str(s) => serde_json::Value::String(s.clone()).to_string(),
            Tok::Composite(c) => c.text.into(),
        }
    }
}

static COMPOSITES: &[Composite] = &[
    // Empty: a slice takes an empty array; a map or a struct an empty object.
    Composite {
        text: "[]",
        read_as: &["resources", "check_results", "modules"],
    },
    Composite {
        text: "{}",
        read_as: &["outputs", "meta", "remote", "backend"],
    },
    // What Terraform and OpenTofu write. A struct ignores keys it has no field for, so an
    // element of one slice decodes as an element of another whose fields it does not name.
    Composite {
        text: r#"{"o":{"value":"x","type":"string","sensitive":false}}"#,
        read_as: &["outputs", "remote", "backend"],
    },
    Composite {
        text: r#"[{"mode":"managed","type":"null_resource","name":"a","provider":"provider[\"registry.terraform.io/hashicorp/null\"]","instances":[{"schema_version":0,"attributes":{"id":"1","triggers":null},"sensitive_attributes":[],"private":"bnVsbA=="}]}]"#,
        read_as: &["resources", "check_results", "modules"],
    },
    Composite {
        // As a resource: no mode. As a module (v3): decoded.
        text: r#"[{"object_kind":"resource","config_addr":"null_resource.a","status":"pass","objects":[{"object_addr":"null_resource.a","status":"pass"}]}]"#,
        read_as: &["check_results", "modules"],
    },
    Composite {
        // As a check result: no kind, skipped. As a resource: no mode.
        text: r#"[{"path":["root"],"outputs":{},"resources":{"null_resource.a":{"type":"null_resource","depends_on":[],"primary":{"id":"1","attributes":{"id":"1"},"meta":{},"tainted":false},"deposed":[],"provider":"provider.null"}},"depends_on":[]}]"#,
        read_as: &["check_results", "modules"],
    },
    Composite {
        text: r#"{"key_provider.pbkdf2.main":"eyJzYWx0IjoiMDEyMyJ9"}"#,
        read_as: &["meta", "remote", "backend"],
    },
    Composite {
        text: r#"{"type":"s3","config":{"bucket":"b"}}"#,
        read_as: &["remote", "backend"],
    },
    // Wrong at the level of the Go types for some fields.
    Composite {
        text: "[5]",
        read_as: &[],
    },
    Composite {
        text: r#"[{"mode":1}]"#,
        read_as: &["check_results", "modules"],
    },
    Composite {
        text: r#"[{"instances":[{"schema_version":"0"}]}]"#,
        read_as: &["check_results", "modules"],
    },
    Composite {
        text: r#"[{"objects":[{"status":false}]}]"#,
        read_as: &["modules"],
    },
    Composite {
        // A []byte takes an array of numbers.
        text: r#"{"o":[]}"#,
        read_as: &["meta", "remote", "backend"],
    },
    Composite {
        text: r#"{"o":{"sensitive":"yes"}}"#,
        read_as: &["remote", "backend"],
    },
    Composite {
        text: r#"{"k":5}"#,
        read_as: &["remote", "backend"],
    },
    Composite {
        text: r#"[{"path":"root"}]"#,
        read_as: &["check_results"],
    },
    // Decoded, and refused by prepareStateV4 as resources: a mode that is neither managed nor
    // data; the same instance twice; a status that is neither "" nor tainted. As check results
    // (no kind: skipped) and v3 modules (decoded), taken.
    Composite {
        text: r#"[{"mode":"bogus","type":"t","name":"n","provider":"provider[\"registry.terraform.io/hashicorp/null\"]"}]"#,
        read_as: &["check_results", "modules"],
    },
    Composite {
        text: r#"[{"mode":"managed","type":"t","name":"n","provider":"provider[\"registry.terraform.io/hashicorp/null\"]","instances":[{"index_key":1},{"index_key":1.0}]}]"#,
        read_as: &["check_results", "modules"],
    },
    Composite {
        text: r#"[{"mode":"data","type":"t","name":"n","provider":"provider[\"registry.terraform.io/hashicorp/null\"]","instances":[{"status":"gone"}]}]"#,
        read_as: &["check_results", "modules"],
    },
];

fn tok() -> impl Strategy<Value = Tok> {
    let numbers = prop::sample::select(vec![
        "0",
        "1",
        "2",
        "3",
        "4",
        "5",
        "7",
        "-1",
        "-0",
        "4.0",
        "1.5",
        "1e2",
        "4E0",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "99999999999999999999999",
    ])
    .prop_map(|n| Tok::Number(n.to_owned()));
    let strings = prop::sample::select(vec![
        "",
        "4",
        "l",
        "1.15.5",
        "v1.0.3",
        "0.11.14",
        "1.2.3-beta.1+x",
        "banana",
        "1.2.x",
        "1.",
        "V1.2",
        "v0",
        "q83vEjRWeJA=",
        "q83v\nEjRWeJA=",
        "not base64!",
        "AAA",
        "é",
    ])
    .prop_map(|s| Tok::Str(s.to_owned()));
    prop_oneof![
        1 => Just(Tok::Null),
        1 => any::<bool>().prop_map(Tok::Bool),
        4 => numbers,
        4 => strings,
        3 => prop::sample::select((0..COMPOSITES.len()).collect::<Vec<_>>())
            .prop_map(|i| Tok::Composite(&COMPOSITES[i])),
    ]
}

/// How a field's name is spelled in the body.
#[derive(Debug, Clone, Copy)]
enum Spelling {
    Exact,
    Upper,
    Capitalised,
    /// `s` written `ſ` (U+017F), `k` written `K` (U+212A): Go folds both.
    Unicode,
    /// Dotless `ı` for `i`, or a trailing `_`: Go does not take it for the field.
    NearMiss,
}

fn spell(name: &str, how: Spelling) -> String {
    match how {
        Spelling::Exact => name.to_owned(),
        Spelling::Upper => name.to_uppercase(),
        Spelling::Capitalised => {
            let mut c = name.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect())
                .unwrap_or_default()
        }
        Spelling::Unicode => name.replace('s', "\u{017F}").replace('k', "\u{212A}"),
        Spelling::NearMiss if name.contains('i') => name.replacen('i', "\u{0131}", 1),
        Spelling::NearMiss => format!("{name}_"),
    }
}

/// Whether Go reads the key as the field `name`: its own reading, applied letter by letter to
/// both (`strings.EqualFold` with the two folds that reach ASCII).
fn go_reads_as(key: &str, name: &str) -> bool {
    fn fold(c: char) -> Option<char> {
        match c {
            '\u{017F}' => Some('s'),
            '\u{212A}' => Some('k'),
            c if c.is_ascii() => Some(c.to_ascii_lowercase()),
            _ => None,
        }
    }
    let key: Option<String> = key.chars().map(fold).collect();
    key.as_deref() == Some(name)
}

fn spelling() -> impl Strategy<Value = Spelling> {
    prop_oneof![
        6 => Just(Spelling::Exact),
        1 => Just(Spelling::Upper),
        1 => Just(Spelling::Capitalised),
        1 => Just(Spelling::Unicode),
        1 => Just(Spelling::NearMiss),
    ]
}

/// A generated body: fields in order, each a spelled key and a value.
type Body = Vec<(String, Tok)>;

const STATE_FIELDS: &[&str] = &[
    "version",
    "serial",
    "lineage",
    "terraform_version",
    "outputs",
    "resources",
    "check_results",
    "modules",
    "remote",
    "backend",
];

const ENVELOPE_FIELDS: &[&str] = &[
    "encryption_version",
    "encrypted_data",
    "meta",
    "serial",
    "lineage",
    "version",
];

/// Each field absent or present (a version of 3 or 4 more often than not, so that the other
/// fields are judged), spelled one way, then shuffled.
fn body(
    fields: &'static [&'static str],
    likely: Vec<(&'static str, Tok)>,
) -> impl Strategy<Value = Body> {
    let present = prop::collection::vec((any::<u8>(), tok(), spelling()), fields.len());
    (present, any::<u64>(), any::<bool>()).prop_map(move |(choices, seed, prefer)| {
        let mut out = Vec::new();
        for (name, (roll, value, how)) in fields.iter().zip(choices) {
            if roll % 4 == 0 {
                continue;
            }
            let value = match likely.iter().find(|(n, _)| n == name) {
                Some((_, v)) if prefer && roll % 3 != 0 => v.clone(),
                _ => value,
            };
            out.push((spell(name, how), value));
        }
        if seed % 5 == 0 {
            // [5]: wrong for every field, and not a field Go reads.
            out.push(("unknown_field".into(), Tok::Composite(&COMPOSITES[8])));
        }
        // A deterministic shuffle from the seed: Go reads fields in any order.
        let n = out.len();
        for i in (1..n).rev() {
            let j = (seed.rotate_left(i as u32) % (i as u64 + 1)) as usize;
            out.swap(i, j);
        }
        out
    })
}

fn text(body: &Body) -> String {
    let fields: Vec<String> = body
        .iter()
        .map(|(k, v)| format!("{}:{}", serde_json::Value::String(k.clone()), v.json()))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// The value Go decodes into the field `name`, when a key of the body reads as it.
fn field<'a>(body: &'a Body, name: &str) -> Option<&'a Tok> {
    body.iter()
        .find(|(k, _)| go_reads_as(k, name))
        .map(|(_, v)| v)
}

/// `strconv.ParseUint(literal, 10, 64)`, which `encoding/json` uses for a `uint64`.
fn parse_uint(literal: &str) -> Option<u64> {
    literal
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| literal.parse().ok())
        .flatten()
}

/// `strconv.ParseInt(literal, 10, 64)`, for an `int64` / `int`. One deliberate difference:
/// Go reads `-0` as 0, gitstate refuses it (serde_json cannot tell `-0` from `-0.0`, which Go
/// refuses; no Terraform or OpenTofu writes either).
fn parse_int(literal: &str) -> Option<i64> {
    if literal == "-0" {
        return None;
    }
    let digits = literal.strip_prefix('-').unwrap_or(literal);
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| literal.parse().ok())
        .flatten()
}

/// Go's `uint64` field: `Ok(None)` when absent or null.
fn go_uint64(tok: Option<&Tok>) -> Result<Option<u64>, ()> {
    match tok {
        None | Some(Tok::Null) => Ok(None),
        Some(Tok::Number(n)) => parse_uint(n).map(Some).ok_or(()),
        _ => Err(()),
    }
}

fn go_int64(tok: Option<&Tok>) -> Result<Option<i64>, ()> {
    match tok {
        None | Some(Tok::Null) => Ok(None),
        Some(Tok::Number(n)) => parse_int(n).map(Some).ok_or(()),
        _ => Err(()),
    }
}

fn go_string(tok: Option<&Tok>) -> Result<String, ()> {
    match tok {
        None | Some(Tok::Null) => Ok(String::new()),
        Some(Tok::Str(s)) => Ok(s.clone()),
        _ => Err(()),
    }
}

fn go_composite(tok: Option<&Tok>, name: &str) -> Result<(), ()> {
    match tok {
        None | Some(Tok::Null) => Ok(()),
        Some(Tok::Composite(c)) if c.read_as.contains(&name) => Ok(()),
        _ => Err(()),
    }
}

/// hashicorp/go-version's `NewVersion`: its regular expression, then every numeric segment as
/// an int64.
fn go_version(text: &str) -> bool {
    let pattern = regex::Regex::new(concat!(
        r"^v?([0-9]+(\.[0-9]+)*?)",
        r"(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|(-?([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?",
        r"(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?",
        r"?$"
    ))
    .expect("go-version's pattern");
    pattern.captures(text).is_some_and(|c| {
        c[1].split('.')
            .all(|segment| segment.parse::<i64>().is_ok())
    })
}

/// What Terraform reads of a body that is not an envelope: `(serial, lineage)`, or `Err`.
fn terraform_reads(body: &Body) -> Result<(Option<u64>, String), ()> {
    // read.go: sniffJSONStateVersion.
    let version = go_uint64(field(body, "version"))?.ok_or(())?;
    let (serial, lineage) = match version {
        4 => {
            let serial = go_uint64(field(body, "serial"))?;
            for name in ["outputs", "resources", "check_results"] {
                go_composite(field(body, name), name)?;
            }
            (serial, go_string(field(body, "lineage"))?)
        }
        3 => {
            let serial = go_int64(field(body, "serial"))?;
            // version3_upgrade.go: "state has serial less than zero".
            let serial = match serial {
                Some(s) if s < 0 => return Err(()),
                s => s.map(|s| s as u64),
            };
            for name in ["modules", "remote", "backend"] {
                go_composite(field(body, name), name)?;
            }
            (serial, go_string(field(body, "lineage"))?)
        }
        _ => return Err(()),
    };
    let terraform_version = go_string(field(body, "terraform_version"))?;
    if !terraform_version.is_empty() && !go_version(&terraform_version) {
        return Err(());
    }
    Ok((serial, lineage))
}

/// What OpenTofu reads of an envelope (a body whose `encryption_version` is not null): `basedata`
/// and `statedata` decoded, the version sigil non-empty, data that decrypts (non-empty base64),
/// and an outer serial the inner state's (a `uint64`) can equal. A body that also has `version`
/// is refused: Terraform would take it for a state, OpenTofu for an envelope.
fn opentofu_reads(body: &Body) -> Result<(Option<u64>, String), ()> {
    if !matches!(field(body, "version"), None | Some(Tok::Null)) {
        return Err(());
    }
    let base64 = |s: &str| {
        let s: String = s.chars().filter(|c| *c != '\n' && *c != '\r').collect();
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(s).is_ok()
    };
    match field(body, "encryption_version") {
        Some(Tok::Str(v)) if !v.is_empty() => {}
        _ => return Err(()),
    }
    match field(body, "encrypted_data") {
        Some(Tok::Str(d)) if !d.is_empty() && base64(d) => {}
        _ => return Err(()),
    }
    go_composite(field(body, "meta"), "meta")?;
    let serial = match go_int64(field(body, "serial"))? {
        Some(s) if s < 0 => return Err(()),
        s => s.map(|s| s as u64),
    };
    Ok((serial, go_string(field(body, "lineage"))?))
}

fn reference(body: &Body) -> Result<(Option<u64>, String), ()> {
    match field(body, "encryption_version") {
        None | Some(Tok::Null) => terraform_reads(body),
        Some(_) => opentofu_reads(body),
    }
}

fn check(body: &Body) -> Result<(), TestCaseError> {
    let json = text(body);
    let expected = reference(body);
    // A body being written is read with the catalog's facts too: the same decision.
    let checked = statefile::check(bytes::Bytes::from(json.clone()), true);
    prop_assert_eq!(
        checked.map(|c| c.file),
        statefile::read(json.as_bytes()),
        "read with the catalog's facts: {}",
        json
    );
    match (statefile::read(json.as_bytes()), expected) {
        (Ok(file), Ok((serial, lineage))) => {
            prop_assert_eq!(file.serial, serial, "serial of {}", json);
            prop_assert_eq!(
                file.lineage.unwrap_or_default(),
                lineage,
                "lineage of {}",
                json
            );
            let envelope = !matches!(field(body, "encryption_version"), None | Some(Tok::Null));
            prop_assert_eq!(
                file.form == Form::ClientEncrypted,
                envelope,
                "form of {}",
                json
            );
        }
        (Err(_), Err(())) => {}
        (Ok(_), Err(())) => prop_assert!(false, "accepted what Terraform cannot read: {}", json),
        (Err(e), Ok(_)) => prop_assert!(false, "refused what Terraform reads: {} ({})", json, e),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(4000)
    ))]

    #[test]
    fn states_are_accepted_exactly_when_terraform_reads_them(
        body in body(STATE_FIELDS, vec![
            ("version", Tok::Number("4".into())),
            ("serial", Tok::Number("3".into())),
            ("lineage", Tok::Str("l".into())),
        ])
    ) {
        check(&body)?;
    }

    #[test]
    fn legacy_states_are_accepted_exactly_when_terraform_reads_them(
        body in body(STATE_FIELDS, vec![("version", Tok::Number("3".into()))])
    ) {
        check(&body)?;
    }

    #[test]
    fn envelopes_are_accepted_exactly_when_opentofu_reads_them(
        body in body(ENVELOPE_FIELDS, vec![
            ("encryption_version", Tok::Str("v0".into())),
            ("encrypted_data", Tok::Str("q83vEjRWeJA=".into())),
        ])
    ) {
        check(&body)?;
    }
}

#[test]
fn the_reference_reads_go_version_as_go_version_does() {
    // The reference itself, on what its regular expression decides.
    assert!(go_version("1.15.5") && go_version("v0.11.14") && go_version("1.2.3-"));
    assert!(!go_version("banana") && !go_version("1.") && !go_version("V1.2"));
    assert!(!go_version("99999999999999999999.0"));
}
