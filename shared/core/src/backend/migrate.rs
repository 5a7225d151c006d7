//! Re-sealing what is stored (`gitstate migrate`, issue 18): a state terraform-backend-git left
//! in its legacy aes format, or in plaintext, is written back sealed with the configured keys
//! (or, with no key configured, a legacy aes state as plaintext), one compare-and-swap commit per
//! state. What is sealed already, and files that are not states, are left as they are.

use std::fmt;
use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;

use super::{Backend, BackendError, Caller};
use crate::commit::Message;
use crate::path::StatePath;
use crate::seal::{is_json, is_sops_document, Place, SealError};
use crate::store::{Intent, Revision, StateChange, StateStore};
use crate::text::escape_controls;
use gitstate_statefile::{self as statefile, CheckedState};

/// What a stored file is, as far as a migration is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoredForm {
    /// No file at the path.
    Absent,
    /// A Terraform state in clear (or one an OpenTofu client encrypted itself).
    Plaintext,
    /// The legacy format the configured [`crate::seal::Opener`] opens (terraform-backend-git's
    /// aes).
    LegacyAes,
    /// Sealed already (a sops document, or what the configured sealer opens).
    Sealed,
    /// Not a Terraform state (a README, some other JSON): never touched.
    NotAState,
}

impl fmt::Display for StoredForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoredForm::Absent => "absent",
            StoredForm::Plaintext => "plaintext",
            StoredForm::LegacyAes => "legacy aes",
            StoredForm::Sealed => "sealed",
            StoredForm::NotAState => "not a state",
        })
    }
}

/// What [`Backend::migrate`] found and did (or, in a dry run, would do) for one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Migration {
    /// What is stored.
    pub from: StoredForm,
    /// What it is stored as now (or would be, in a dry run); `None`: left as it is.
    pub to: Option<StoredForm>,
    /// The state's serial, when it has one.
    pub serial: Option<u64>,
    /// The commit that re-sealed it; `None` in a dry run or when nothing changed.
    pub commit: Option<Revision>,
    /// The catalog's facts of the state written (from its one check; its commit included);
    /// `None` when nothing was written.
    #[serde(skip)]
    pub facts: Option<crate::catalog::StateFacts>,
}

impl Migration {
    fn left(from: StoredForm, serial: Option<u64>) -> Migration {
        Migration {
            from,
            to: None,
            serial,
            commit: None,
            facts: None,
        }
    }
}

impl Backend {
    /// Re-seals the state at `path`: a legacy aes or plaintext state is written back sealed with
    /// the configured keys (a legacy aes one as plaintext when no key is configured), in one
    /// commit on the tip that was read (compare-and-swap, re-read on a lost race). A held lock
    /// refuses it ([`BackendError::Locked`]); a file that is neither JSON nor openable here is a
    /// [`SealError::NoKey`] naming what it needs. `dry_run` reads and decides, and writes nothing.
    pub async fn migrate(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        dry_run: bool,
        caller: &Caller,
    ) -> Result<Migration, BackendError> {
        let started = Instant::now();
        let deadline = self.retry.deadline(started, caller.deadline);
        let _serialized = super::serialized(store).await;
        let at = Place::new(store.repository(), path);
        let mut attempts = 0;
        loop {
            let attempt = self
                .begin_write(
                    store,
                    path,
                    Intent::Write,
                    (&mut attempts, started, deadline),
                )
                .await?;
            let snapshot = attempt.snapshot();
            let Some(stored) = snapshot.state.clone() else {
                return Ok(Migration::left(StoredForm::Absent, None));
            };
            let (from, plain) = self.classify(&at, &stored).await?;
            let Some(plain) = plain else {
                return Ok(Migration::left(from, None));
            };
            let serial = plain.file.serial;
            let to = if self.sealer.is_some() {
                StoredForm::Sealed
            } else {
                StoredForm::Plaintext
            };
            if from == to {
                return Ok(Migration::left(from, serial));
            }
            if let Some(lock) = &snapshot.lock {
                return Err(BackendError::Locked(lock.clone()));
            }
            if dry_run {
                return Ok(Migration {
                    to: Some(to),
                    ..Migration::left(from, serial)
                });
            }
            let content = match &self.sealer {
                Some(sealer) => sealer.seal(&at, &plain).await?,
                None => plain.body.clone(),
            };
            if content == stored {
                // A state the sealer stores as it is (an OpenTofu client-encrypted one).
                return Ok(Migration::left(from, serial));
            }
            let who = escape_controls(caller.display()).into_owned();
            let message = match serial {
                Some(serial) => {
                    format!("Migrate {path} (serial {serial}) from {from} to {to} by {who}")
                }
                None => format!("Migrate {path} from {from} to {to} by {who}"),
            };
            // The operator is the author; without a name, the committer.
            let message = Message::by(message, &caller.name);
            let timing = (&mut attempts, started, deadline);
            let change = StateChange::Write(content);
            if let Some(revision) = self
                .push_attempt(attempt, change, &message, "migration", timing)
                .await?
            {
                tracing::info!(%path, %revision, %from, %to, "state migrated");
                return Ok(Migration {
                    from,
                    to: Some(to),
                    serial,
                    commit: Some(revision.clone()),
                    facts: plain.facts.map(|facts| crate::catalog::StateFacts {
                        commit: Some(revision.clone()),
                        ..facts
                    }),
                });
            }
        }
    }

    /// What `stored` is, and the state to write back when it should be re-sealed (`None`: leave
    /// it). A file that is not JSON, not sealed, not text and does not open here is an error: it
    /// is most likely legacy aes under another passphrase.
    async fn classify(
        &self,
        at: &Place,
        stored: &Bytes,
    ) -> Result<(StoredForm, Option<CheckedState>), BackendError> {
        let (opened, legacy) = self.open_legacy(stored.clone()).await;
        if legacy {
            let state = statefile::check(opened, true).map_err(|e| {
                BackendError::BadRequest(format!(
                    "the stored file at {at} opens as legacy aes but is not a Terraform state ({e}); it is left as it is"
                ))
            })?;
            return Ok((StoredForm::LegacyAes, Some(state)));
        }
        if is_sops_document(stored) {
            return Ok((StoredForm::Sealed, None));
        }
        if is_json(stored) && stored.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
            return Ok(match statefile::check(stored.clone(), true) {
                Ok(state) => (StoredForm::Plaintext, Some(state)),
                Err(_) => (StoredForm::NotAState, None),
            });
        }
        if let Some(sealer) = &self.sealer {
            match sealer.open(at, stored.clone()).await {
                Ok(opened) if opened != *stored => return Ok((StoredForm::Sealed, None)),
                Err(e @ SealError::Unavailable { .. }) => return Err(e.into()),
                _ => {}
            }
        }
        if std::str::from_utf8(stored).is_ok() {
            return Ok((StoredForm::NotAState, None));
        }
        // Binary: refused with the sentence a GET without a sealer gets (it names the passphrase
        // it needs).
        self.refuse_sealed(at, stored)?;
        Ok((StoredForm::NotAState, None))
    }
}
