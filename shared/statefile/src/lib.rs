//! gitstate's state-file checker, one job: read a Terraform state body once, streaming, decide
//! whether Terraform and OpenTofu could read it back, and say what the catalog needs of it. It is
//! the one parser of a state, and the one definition of what gitstate accepts (DESIGN §2,
//! DECISIONS "What a state body must be").
//!
//! It never does I/O, touches git, takes or checks a lock, seals or opens a document, knows HTTP,
//! or records anything in a catalog: it reads bytes it is given and answers values ([`StateFile`],
//! [`CheckedState`], [`StateFacts`], [`StateError`]), so every rule is tested on bytes alone and
//! the protocol core above it decides what to do with them. It depends on no gitstate crate but
//! `gitstate-url`, for the one state path rule a `terraform_remote_state` address is read by.
//! The catalog's facts it reads ([`StateFacts`], [`identifiers`], [`Use`], [`StateRef`]) are its
//! own types; core's catalog port names them as they are, re-exporting them from its `catalog`
//! and `links` modules (the same concept on two layers: read here, indexed and linked there).
//! Beside the check: [`tfstate`] (a state's resource instances and structure diffs, v3 read as
//! v4) and [`outputs_only`] (a state reduced to what `terraform_remote_state` reads).
//!
//! A body is one of two shapes, told apart by OpenTofu's own sigil:
//! - **a Terraform state** (no `encryption_version`): `version` 4, or 3 for a legacy state kept as
//!   it is, and every field Terraform (or OpenTofu) decodes with the JSON type its Go field takes
//!   (`shape.rs`): `serial` a whole number from 0 to 2^64−1 (v3: to 2^63−1), `lineage` and
//!   `terraform_version` strings (a non-empty `terraform_version` a version go-version parses),
//!   `outputs` an object, `resources` and `check_results` arrays (v3: `modules`), each of their
//!   elements as deep as the decoder goes;
//! - **an OpenTofu client-side encrypted state** (a non-empty `encryption_version`): the envelope
//!   OpenTofu writes, `encrypted_data` a non-empty base64 string, `meta` an object of base64
//!   strings, `serial` a whole number from 0 to 2^63−1 and `lineage` a string where present, and
//!   no `version`. It is stored and served byte for byte.
//!
//! Anything else is refused with one sentence naming the field and what was expected
//! ([`StateError`]); the HTTP layer answers it 400 and nothing is written. JSON `null` counts as
//! absent (Go leaves the field as it was), and keys are matched as Go matches them.

mod addrs;
mod catalogued;
mod checked;
mod cty;
mod facts;
mod flatmap;
mod go_keys;
mod goversion;
mod hcl;
mod header;
pub mod identifiers;
mod mismatch;
mod outputs;
mod prepare;
mod shape;
mod strings;
pub mod tfstate;
mod walk;

pub use catalogued::{state_of_address, StateFacts, StateRef, Use, LINK_SCAN_MAX_BYTES};
pub use identifiers::{ResourceIdentifier, IDENTIFYING_ATTRIBUTES, MAX_IDENTIFIER_BYTES};
pub use outputs::{outputs_only, OutputsError};

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use header::{Header, Top, TopValue};
use mismatch::Seen;
use strings::Wanted;

/// A state body that Terraform and OpenTofu read back: its form and the header the protocol
/// uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFile {
    /// A Terraform state of a format version, or an OpenTofu-encrypted envelope.
    pub form: Form,
    /// `serial`, when the body has one.
    pub serial: Option<u64>,
    /// `lineage`, when the body has a non-empty one.
    pub lineage: Option<String>,
    /// `terraform_version`, when the body has a non-empty one.
    pub terraform_version: Option<String>,
    /// The body has a top-level `"sops"` key (a sealer refuses to seal such a document).
    pub sops_key: bool,
}

/// A state body that [`check`] accepted, and what that one pass read of it: it travels with the
/// body to the state guard, the seal, the push and the catalog, none of which parses it again.
#[derive(Debug, Clone)]
pub struct CheckedState {
    /// The body as sent.
    pub body: Bytes,
    /// Its form and header.
    pub file: StateFile,
    /// What the catalog records of it, when it was read for a catalog.
    pub facts: Option<StateFacts>,
}

/// Which of the two shapes a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A Terraform state of this format version (4, or 3).
    State {
        /// The `version` field.
        version: u64,
    },
    /// A state an OpenTofu client encrypted itself; stored and served as it is.
    ClientEncrypted,
}

/// Why a body is not a state Terraform and OpenTofu could read back. Each message is one
/// sentence naming the field and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Not a JSON object.
    #[error("the body is not a JSON object; a Terraform state is expected")]
    NotAnObject,
    /// Not JSON that parses.
    #[error("the body is not valid JSON: {0}")]
    NotJson(String),
    /// Neither `version` nor OpenTofu's `encryption_version`.
    #[error("the body is not a Terraform state: it has no \"version\" (nor OpenTofu's \"encryption_version\" of an encrypted state)")]
    NoVersion,
    /// A `version` that is not a format gitstate stores.
    #[error("the body is not a Terraform state gitstate stores: its \"version\" is {found}, and only the state format 4 (or 3, for a legacy state) is accepted")]
    Version {
        /// What it was.
        found: String,
    },
    /// A field given twice.
    #[error("the state has the field \"{0}\" more than once (Terraform matches field names without regard to case), and readers disagree on which one counts (Terraform takes the last, others the first), so nothing was written")]
    Duplicate(&'static str),
    /// A field whose value Terraform or OpenTofu would not decode.
    #[error("the state's \"{place}\" is {found}, and Terraform reads it only as {expected}, so it could not read this state back; nothing was written")]
    Field {
        /// Where, e.g. `serial` or `resources[2].instances[0].schema_version`.
        place: String,
        /// What it was.
        found: String,
        /// What the reader takes.
        expected: String,
    },
    /// A state whose fields decode but which Terraform refuses to read (a check of
    /// `prepareStateV4`), e.g. the same instance twice.
    #[error("the state's \"{place}\" {why}, so Terraform could not read this state back; nothing was written")]
    Unreadable {
        /// Where.
        place: String,
        /// What is wrong, as the rest of the sentence.
        why: String,
    },
    /// An OpenTofu envelope that OpenTofu would not decrypt.
    #[error("the body is an OpenTofu encrypted state whose \"{place}\" is {found}, and OpenTofu reads it only as {expected}; nothing was written")]
    Envelope {
        /// Where.
        place: String,
        /// What it was.
        found: String,
        /// What OpenTofu takes.
        expected: String,
    },
    /// A body with both a state's `version` and OpenTofu's `encryption_version`.
    #[error("the body has both a state's \"version\" and OpenTofu's \"encryption_version\", so it is neither a state nor an encrypted state; nothing was written")]
    Ambiguous,
}

/// The largest serial of a v3 state (Go `int64`) and of OpenTofu's envelope (Go `int`).
const MAX_SIGNED: u64 = i64::MAX as u64;

/// Bodies parsed by this process ([`read`], [`check`], [`catalog_facts`], both of
/// [`same_json`]): what a test counts to prove that a request parses its body once.
static PARSES: AtomicU64 = AtomicU64::new(0);

/// How many state bodies this process has parsed.
pub fn parses() -> u64 {
    PARSES.load(Ordering::Relaxed)
}

/// Reads `body` as a state: its form and header when Terraform and OpenTofu read it back, else
/// what is wrong with it. One pass over the body, nothing of it kept but the header.
pub fn read(body: &[u8]) -> Result<StateFile, StateError> {
    parse(body, Wanted::Nothing).map(|(file, _)| file)
}

/// [`read`] for a body that is to be written: the body with its header and, for a `catalog`,
/// its [`StateFacts`] (identifiers, uses and remote states), all from the same one pass.
pub fn check(body: Bytes, catalog: bool) -> Result<CheckedState, StateError> {
    let wanted = if catalog {
        catalogued::wanted(body.len())
    } else {
        Wanted::Nothing
    };
    let (file, header) = parse(&body, wanted)?;
    let facts = catalog.then(|| catalogued::state_facts(header, body.len()));
    Ok(CheckedState { body, file, facts })
}

/// The catalog's facts of a stored state, whether or not it passes [`read`]'s checks (one
/// written before gitstate checked states still has its identifiers); a body that is not a JSON
/// object has only its size.
pub fn catalog_facts(body: &[u8]) -> StateFacts {
    PARSES.fetch_add(1, Ordering::Relaxed);
    match Header::parse(body, catalogued::wanted(body.len())) {
        Ok(header) => catalogued::state_facts(header, body.len()),
        Err(_) => StateFacts {
            size: body.len() as u64,
            ..StateFacts::default()
        },
    }
}

/// Whether two bodies hold the same JSON value (a replay sent with other formatting). Both are
/// parsed into values, so a write asks only when nothing cheaper tells them apart (their serials
/// agree).
pub fn same_json(a: &[u8], b: &[u8]) -> bool {
    PARSES.fetch_add(2, Ordering::Relaxed);
    match (
        serde_json::from_slice::<serde_json::Value>(a),
        serde_json::from_slice::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// One pass over `body`: the state it is, and what the walk kept of it (the strings `wanted`).
fn parse(body: &[u8], wanted: Wanted) -> Result<(StateFile, Header), StateError> {
    PARSES.fetch_add(1, Ordering::Relaxed);
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(StateError::NotAnObject);
    }
    let header = Header::parse(body, wanted).map_err(|e| StateError::NotJson(e.to_string()))?;
    if let Some(top) = header.duplicate {
        return Err(StateError::Duplicate(top.name()));
    }
    let file = if header.given(Top::EncryptionVersion).is_some() {
        envelope(&header)?
    } else {
        state(&header)?
    };
    Ok((file, header))
}

/// A Terraform state (v4, or a legacy v3).
fn state(header: &Header) -> Result<StateFile, StateError> {
    let version = match header.given(Top::Version).map(|v| &v.seen) {
        None => return Err(StateError::NoVersion),
        Some(Seen::Whole(version @ (3 | 4))) => *version,
        Some(other) => {
            return Err(StateError::Version {
                found: other.describe(),
            })
        }
    };
    let (max_serial, fields): (u64, &[Top]) = match version {
        4 => (u64::MAX, &[Top::Outputs, Top::Resources, Top::CheckResults]),
        _ => (MAX_SIGNED, &[Top::Modules, Top::Remote, Top::Backend]),
    };
    let serial = whole(header, Top::Serial, max_serial).map_err(field_error)?;
    let lineage = text(header, Top::Lineage).map_err(field_error)?;
    let terraform_version = text(header, Top::TerraformVersion).map_err(field_error)?;
    if let Some(v) = &terraform_version {
        if !goversion::is_go_version(v) {
            return Err(StateError::Field {
                place: Top::TerraformVersion.name().into(),
                found: "a string that is not a version".into(),
                expected: "a version string such as \"1.15.5\" (or empty)".into(),
            });
        }
    }
    for top in fields {
        if let Some(TopValue {
            mismatch: Some(m), ..
        }) = header.get(*top)
        {
            return Err(StateError::Field {
                place: m.place(top.name()),
                found: m.found.clone(),
                expected: m.expected.into(),
            });
        }
    }
    if version == 4 {
        prepare::check_v4(&header.facts)?;
    }
    Ok(StateFile {
        form: Form::State { version },
        serial,
        lineage,
        terraform_version,
        sops_key: header.sops,
    })
}

/// OpenTofu's client-side encrypted envelope.
fn envelope(header: &Header) -> Result<StateFile, StateError> {
    let envelope_error = |(place, found, expected): Wrong| StateError::Envelope {
        place,
        found,
        expected,
    };
    if header.given(Top::Version).is_some() {
        return Err(StateError::Ambiguous);
    }
    let non_empty = |top: Top, expected: &str| -> Result<(), StateError> {
        match header.given(top) {
            Some(TopValue {
                seen: Seen::Str { empty: false, .. },
                mismatch: None,
            }) => Ok(()),
            other => Err(envelope_error((
                top.name().into(),
                other.map_or("missing".into(), |v| match &v.seen {
                    Seen::Str { empty: true, .. } => "empty".into(),
                    Seen::Str { .. } => "a string that is not base64".into(),
                    seen => seen.describe(),
                }),
                expected.into(),
            ))),
        }
    };
    non_empty(Top::EncryptionVersion, "a non-empty string such as \"v0\"")?;
    non_empty(Top::EncryptedData, "a non-empty base64 string")?;
    if let Some(TopValue {
        mismatch: Some(m), ..
    }) = header.get(Top::Meta)
    {
        return Err(envelope_error((
            m.place(Top::Meta.name()),
            m.found.clone(),
            m.expected.into(),
        )));
    }
    let serial = whole(header, Top::Serial, MAX_SIGNED).map_err(envelope_error)?;
    let lineage = text(header, Top::Lineage).map_err(envelope_error)?;
    Ok(StateFile {
        form: Form::ClientEncrypted,
        serial,
        lineage,
        terraform_version: None,
        sops_key: header.sops,
    })
}

/// What is wrong with a field: its place, what it is, what was expected.
type Wrong = (String, String, String);

fn field_error((place, found, expected): Wrong) -> StateError {
    StateError::Field {
        place,
        found,
        expected,
    }
}

/// A whole-number field from 0 to `max`, when given.
fn whole(header: &Header, top: Top, max: u64) -> Result<Option<u64>, Wrong> {
    match header.given(top).map(|v| &v.seen) {
        None => Ok(None),
        Some(Seen::Whole(n)) if *n <= max => Ok(Some(*n)),
        Some(seen) => Err((
            top.name().into(),
            match seen {
                Seen::Whole(_) => format!("{}, above {max}", seen.describe()),
                _ => seen.describe(),
            },
            format!("a whole number from 0 to {max}"),
        )),
    }
}

/// A string field, when given and not empty.
fn text(header: &Header, top: Top) -> Result<Option<String>, Wrong> {
    match header.given(top).map(|v| &v.seen) {
        None => Ok(None),
        Some(Seen::Str { text, .. }) => Ok(text.clone().filter(|t| !t.is_empty())),
        Some(seen) => Err((top.name().into(), seen.describe(), "a string".into())),
    }
}

#[cfg(test)]
mod tests;
