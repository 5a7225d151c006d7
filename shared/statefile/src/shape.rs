//! The Go types Terraform and OpenTofu decode a state into, as data: what `encoding/json` accepts
//! for each field. Transcribed from `internal/states/statefile` (stateV4 and the v2/v3 structs, as
//! in Terraform 1.0 to 1.15) and from OpenTofu's own copy, which adds a few fields; where the two
//! differ, both sets of fields are here, so a state that passes is read by either.

/// What `encoding/json` accepts for one Go type. JSON `null` is accepted for every shape (Go
/// leaves the value as it was, or nil).
#[derive(Debug)]
pub(crate) enum Shape {
    /// A value the checks after decoding read ([`super::prepare`]): kept as it is parsed (a
    /// string's text, or any other value as JSON), and walked as the inner shape.
    Kept(Fact, &'static Shape),
    /// `json.RawMessage`, `interface{}`, or a type with its own no-op decoder: any JSON value.
    Any,
    /// A resource instance's `attributes` (`json.RawMessage`): any JSON value, whose strings the
    /// catalog reads while it is walked ([`super::strings`]).
    Attributes,
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
    /// matches them ([`super::go_keys::go_key_matches`]); other keys are ignored. A struct of a
    /// [`Scope`] is one record of [`super::facts::Facts`] (also when it is `null`: Go reads a zero
    /// struct).
    Struct(Scope, &'static [Field]),
}

/// Which record of [`super::facts::Facts`] a struct is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// None: its fields are only checked.
    Plain,
    /// An element of `resources`.
    Resource,
    /// An element of a resource's `instances`.
    Instance,
    /// A value of `outputs` (its name is the map's key).
    Output,
    /// An element of `check_results`.
    Check,
    /// An element of a check result's `objects`.
    CheckObject,
}

/// A value the checks after decoding read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fact {
    Mode,
    Module,
    Provider,
    ResourceType,
    ResourceName,
    IndexKey,
    Status,
    Deposed,
    /// An element of `dependencies`.
    Dependency,
    /// An element of OpenTofu's `depends_on`.
    DependsOn,
    SensitiveAttributes,
    OutputType,
    OutputValue,
    CheckKind,
    ConfigAddr,
    ObjectAddr,
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
const DEPENDENCIES: Shape = Shape::List(&Shape::Kept(Fact::Dependency, &Shape::Str));
const DEPENDS_ON: Shape = Shape::List(&Shape::Kept(Fact::DependsOn, &Shape::Str));

/// `outputStateV4` (OpenTofu adds `deprecated`).
pub(crate) const OUTPUT_V4: Shape = Shape::Struct(
    Scope::Output,
    &[
        field("value", Shape::Kept(Fact::OutputValue, &Shape::Any)),
        field("type", Shape::Kept(Fact::OutputType, &Shape::Any)),
        field("sensitive", Shape::Bool),
        field("deprecated", Shape::Str),
    ],
);

/// `instanceObjectStateV4` (OpenTofu adds `provider`, `depends_on` and `skip_destroy`).
const INSTANCE_V4: Shape = Shape::Struct(
    Scope::Instance,
    &[
        field("index_key", Shape::Kept(Fact::IndexKey, &Shape::Any)),
        field("status", Shape::Kept(Fact::Status, &Shape::Str)),
        field("deposed", Shape::Kept(Fact::Deposed, &Shape::Str)),
        field("provider", Shape::Kept(Fact::Provider, &Shape::Str)),
        field("schema_version", Shape::U64),
        field("attributes", Shape::Attributes),
        field("attributes_flat", Shape::Map(&Shape::Str)),
        field(
            "sensitive_attributes",
            Shape::Kept(Fact::SensitiveAttributes, &Shape::Any),
        ),
        field("identity_schema_version", Shape::U64),
        field("identity", Shape::Any),
        field("private", Shape::Bytes),
        field("dependencies", DEPENDENCIES),
        field("depends_on", DEPENDS_ON),
        field("create_before_destroy", Shape::Bool),
        field("skip_destroy", Shape::Bool),
    ],
);

/// `resourceStateV4`.
pub(crate) const RESOURCE_V4: Shape = Shape::Struct(
    Scope::Resource,
    &[
        field("module", Shape::Kept(Fact::Module, &Shape::Str)),
        field("mode", Shape::Kept(Fact::Mode, &Shape::Str)),
        field("type", Shape::Kept(Fact::ResourceType, &Shape::Str)),
        field("name", Shape::Kept(Fact::ResourceName, &Shape::Str)),
        field("each", Shape::Str),
        field("provider", Shape::Kept(Fact::Provider, &Shape::Str)),
        field("instances", Shape::List(&INSTANCE_V4)),
    ],
);

/// `checkResultsObjectV4`.
const CHECK_OBJECT_V4: Shape = Shape::Struct(
    Scope::CheckObject,
    &[
        field("object_addr", Shape::Kept(Fact::ObjectAddr, &Shape::Str)),
        field("status", Shape::Str),
        field("failure_messages", STRINGS),
    ],
);

/// `checkResultsV4`.
pub(crate) const CHECK_RESULTS_V4: Shape = Shape::Struct(
    Scope::Check,
    &[
        field("object_kind", Shape::Kept(Fact::CheckKind, &Shape::Str)),
        field("config_addr", Shape::Kept(Fact::ConfigAddr, &Shape::Str)),
        field("status", Shape::Str),
        field("objects", Shape::List(&CHECK_OBJECT_V4)),
    ],
);

/// `remoteStateV2` (v3's `remote`).
pub(crate) const REMOTE_V3: Shape = Shape::Struct(
    Scope::Plain,
    &[
        field("type", Shape::Str),
        field("config", Shape::Map(&Shape::Str)),
    ],
);

/// `backendStateV2` (v3's `backend`).
pub(crate) const BACKEND_V3: Shape = Shape::Struct(
    Scope::Plain,
    &[
        field("type", Shape::Str),
        field("config", Shape::Any),
        field("hash", Shape::U64),
    ],
);

/// `instanceStateV2`.
const INSTANCE_V3: Shape = Shape::Struct(
    Scope::Plain,
    &[
        field("id", Shape::Str),
        field("attributes", Shape::Map(&Shape::Str)),
        field("meta", Shape::Map(&Shape::Any)),
        field("tainted", Shape::Bool),
    ],
);

/// `resourceStateV2`.
const RESOURCE_V3: Shape = Shape::Struct(
    Scope::Plain,
    &[
        field("type", Shape::Str),
        field("depends_on", STRINGS),
        field("primary", INSTANCE_V3),
        field("deposed", Shape::List(&INSTANCE_V3)),
        field("provider", Shape::Str),
    ],
);

/// `outputStateV2`.
const OUTPUT_V3: Shape = Shape::Struct(
    Scope::Plain,
    &[
        field("sensitive", Shape::Bool),
        field("type", Shape::Str),
        field("value", Shape::Any),
    ],
);

/// `moduleStateV2` (v3's `modules` elements).
pub(crate) const MODULE_V3: Shape = Shape::Struct(
    Scope::Plain,
    &[
        field("path", STRINGS),
        field("outputs", Shape::Map(&OUTPUT_V3)),
        field("resources", Shape::Map(&RESOURCE_V3)),
        field("depends_on", STRINGS),
    ],
);
