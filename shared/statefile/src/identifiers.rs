//! What names a real-world object in a state (the resource index's vocabulary, which the catalog
//! and the links across states share): the identifying attributes and one identifier, as the
//! checker reads them. Where one is managed (a repository and path besides) is the catalog's
//! (core's `identifiers::ManagedBy`).

use serde::{Deserialize, Serialize};

/// One identifying attribute of a managed resource instance: what the resource index maps to
/// the state that manages it. Only these attributes are indexed, never other values.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceIdentifier {
    /// The attribute's value, e.g. an instance id or an ARN.
    pub value: String,
    /// The resource type, e.g. `aws_instance`.
    pub resource_type: String,
    /// Which attribute: one of [`IDENTIFYING_ATTRIBUTES`].
    pub field: String,
    /// The instance's address in its state, e.g. `module.net.aws_vpc.main[0]`.
    pub address: String,
}

/// The attributes the resource index keeps: those that name a real-world object.
pub const IDENTIFYING_ATTRIBUTES: [&str; 4] = ["id", "arn", "self_link", "name"];

/// Longest identifier indexed, in bytes (DynamoDB keys are at most 1 KiB / 2 KiB).
pub const MAX_IDENTIFIER_BYTES: usize = 800;
