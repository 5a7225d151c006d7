//! The error helpers every module of the engine shares (a leaf: it imports no other module).

use gitstate_core::StoreError;
use gitstate_wire::WireError;

/// Turns any displayable engine failure into [`StoreError::Internal`] with context.
pub(crate) fn internal<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> StoreError + '_ {
    move |e| StoreError::Internal(format!("{context}: {e}"))
}

/// A wire-protocol failure as the stores report it: each category to the [`StoreError`] of the
/// same name and sentence (the wire knows no stores, so the mapping is made here).
pub(crate) fn from_wire(error: WireError) -> StoreError {
    match error {
        WireError::Unauthorized(text) => StoreError::Unauthorized(text),
        WireError::Forbidden(text) => StoreError::Forbidden(text),
        WireError::Refused(text) => StoreError::Refused(text),
        WireError::Unavailable(text) => StoreError::Unavailable(text),
        WireError::Remote(text) => StoreError::Remote(text),
        WireError::Internal(text) => StoreError::Internal(text),
    }
}
