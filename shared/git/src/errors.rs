//! The error helper every module of the engine shares (a leaf: it imports no other module).

use gitstate_core::StoreError;

/// Turns any displayable engine failure into [`StoreError::Internal`] with context.
pub(crate) fn internal<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> StoreError + '_ {
    move |e| StoreError::Internal(format!("{context}: {e}"))
}
