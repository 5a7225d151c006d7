//! Workspaces (DESIGN §10): the rules of the workspace API that Terraform's `cloud` block and
//! `remote` backend speak, independent of HTTP and JSON:API. A workspace of a repository is the
//! state at its mapped path ([`WorkspacePath`]); it exists when that state exists or when it has a
//! record ([`Record`]); its lock IS the lock branch of that path, so the http protocol and the
//! workspace API meet on one state and one lock.
//!
//! Every operation goes through [`Backend`]'s own operations and the [`StateStore`] port, so the
//! state check, the guard, sealing, compare-and-swap and the write queue apply unchanged:
//! `mapping.rs` names and paths, `ids.rs` the stateless ids, `record.rs` the records, `tags.rs`
//! the tags' rule, `outputs.rs` a state's outputs as the API lists them, `rules.rs` each operation on one workspace and its lock, `versions.rs` its state versions,
//! `list.rs` the list, `tests.rs` the
//! rules against the fakes.

mod ids;
mod list;
mod mapping;
mod operations;
mod outputs;
mod record;
mod tags;
mod versions;

pub use ids::{OutputId, StateVersionId, WorkspaceId};
pub use list::{Listed, PageRequest, Search, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
pub use mapping::{NameError, WorkspaceName, WorkspacePath, DEFAULT_WORKSPACE_PATH, MAX_NAME_LEN};
pub use operations::{admit, Holder, Workspace, WorkspaceError, Workspaces};
pub use outputs::{outputs_of, Output};
pub use record::Record;
pub use tags::{parse_tag, parse_tags, TagError, MAX_TAG_LEN};
pub use versions::Current;

#[cfg(test)]
mod tests;
