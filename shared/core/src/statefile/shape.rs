//! The Go types Terraform and OpenTofu decode a state into, as data: what `encoding/json` accepts
//! for each field. Transcribed from `internal/states/statefile` (stateV4 and the v2/v3 structs, as
//! in Terraform 1.0 to 1.15) and from OpenTofu's own copy, which adds a few fields; where the two
//! differ, both sets of fields are here, so a state that passes is read by either.

/// What `encoding/json` accepts for one Go type. JSON `null` is accepted for every shape (Go
/// leaves the value as it was, or nil).
#[derive(Debug)]
pub(crate) enum Shape {
    /// `json.RawMessage`, `interface{}`, or a type with its own no-op decoder: any JSON value.
    Any,
    /// `string`.
    Str,
    /// `uint64`: an integer literal from 0 to 2^64−1 (no fraction, no exponent, no minus sign).
    U64,
    /// `uint8`, as an element of a `[]byte` given as an array: an integer literal from 0 to 255.
    U8,
    /// `bool`.
    Bool,
    /// `[]byte`: a base64 string (standard alphabet, padded), or an array of numbers 0 to 255.
    Bytes,
    /// A slice: an array whose elements have this shape.
    List(&'static Shape),
    /// `map[string]T`: an object whose values have this shape.
    Map(&'static Shape),
    /// A struct (or a pointer to one): an object whose keys are matched to the fields as Go
    /// matches them ([`crate::statefile::walk::go_key_matches`]); other keys are ignored.
    Struct(&'static [Field]),
}

/// One field of a struct: its JSON name (the tag) and its shape.
#[derive(Debug)]
pub(crate) struct Field {
    pub name: &'static str,
    pub shape: Shape,
}

const fn field(name: &'static str, shape: Shape) -> Field {
    Field { name, shape }
}

const STRINGS: Shape = Shape::List(&Shape::Str);

/// `outputStateV4` (OpenTofu adds `deprecated`).
pub(crate) const OUTPUT_V4: Shape = Shape::Struct(&[
    field("value", Shape::Any),
    field("type", Shape::Any),
    field("sensitive", Shape::Bool),
    field("deprecated", Shape::Str),
]);

/// `instanceObjectStateV4` (OpenTofu adds `provider`, `depends_on` and `skip_destroy`).
const INSTANCE_V4: Shape = Shape::Struct(&[
    field("index_key", Shape::Any),
    field("status", Shape::Str),
    field("deposed", Shape::Str),
    field("provider", Shape::Str),
    field("schema_version", Shape::U64),
    field("attributes", Shape::Any),
    field("attributes_flat", Shape::Map(&Shape::Str)),
    field("sensitive_attributes", Shape::Any),
    field("identity_schema_version", Shape::U64),
    field("identity", Shape::Any),
    field("private", Shape::Bytes),
    field("dependencies", STRINGS),
    field("depends_on", STRINGS),
    field("create_before_destroy", Shape::Bool),
    field("skip_destroy", Shape::Bool),
]);

/// `resourceStateV4`.
pub(crate) const RESOURCE_V4: Shape = Shape::Struct(&[
    field("module", Shape::Str),
    field("mode", Shape::Str),
    field("type", Shape::Str),
    field("name", Shape::Str),
    field("each", Shape::Str),
    field("provider", Shape::Str),
    field("instances", Shape::List(&INSTANCE_V4)),
]);

/// `checkResultsObjectV4`.
const CHECK_OBJECT_V4: Shape = Shape::Struct(&[
    field("object_addr", Shape::Str),
    field("status", Shape::Str),
    field("failure_messages", STRINGS),
]);

/// `checkResultsV4`.
pub(crate) const CHECK_RESULTS_V4: Shape = Shape::Struct(&[
    field("object_kind", Shape::Str),
    field("config_addr", Shape::Str),
    field("status", Shape::Str),
    field("objects", Shape::List(&CHECK_OBJECT_V4)),
]);

/// `remoteStateV2` (v3's `remote`).
pub(crate) const REMOTE_V3: Shape = Shape::Struct(&[
    field("type", Shape::Str),
    field("config", Shape::Map(&Shape::Str)),
]);

/// `backendStateV2` (v3's `backend`).
pub(crate) const BACKEND_V3: Shape = Shape::Struct(&[
    field("type", Shape::Str),
    field("config", Shape::Any),
    field("hash", Shape::U64),
]);

/// `instanceStateV2`.
const INSTANCE_V3: Shape = Shape::Struct(&[
    field("id", Shape::Str),
    field("attributes", Shape::Map(&Shape::Str)),
    field("meta", Shape::Map(&Shape::Any)),
    field("tainted", Shape::Bool),
]);

/// `resourceStateV2`.
const RESOURCE_V3: Shape = Shape::Struct(&[
    field("type", Shape::Str),
    field("depends_on", STRINGS),
    field("primary", INSTANCE_V3),
    field("deposed", Shape::List(&INSTANCE_V3)),
    field("provider", Shape::Str),
]);

/// `outputStateV2`.
const OUTPUT_V3: Shape = Shape::Struct(&[
    field("sensitive", Shape::Bool),
    field("type", Shape::Str),
    field("value", Shape::Any),
]);

/// `moduleStateV2` (v3's `modules` elements).
pub(crate) const MODULE_V3: Shape = Shape::Struct(&[
    field("path", STRINGS),
    field("outputs", Shape::Map(&OUTPUT_V3)),
    field("resources", Shape::Map(&RESOURCE_V3)),
    field("depends_on", STRINGS),
]);
