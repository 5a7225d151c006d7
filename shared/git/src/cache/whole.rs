//! The fetch of whole trees through gix (protocol v0/v1, or v2 without `filter`): shallow at
//! depth 1 for a request cache, the whole history for the history cache.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use gitstate_core::StoreError;
use gix::remote::Direction;
use gix::ObjectId;

use super::{all_arrived, ref_matches};
use super::{tracking_ref, Cache};
use crate::errors::from_wire;
use crate::objects::internal;
use gitstate_wire::transport::{classify, connect, http_options, Endpoint};

impl Cache {
    /// Today's fetch through gix: shallow (depth 1, whole trees) for a request cache, the whole
    /// history for the history cache.
    pub(super) fn refresh_whole(
        &self,
        endpoint: &Endpoint,
        names: &[&str],
    ) -> Result<Option<HashMap<String, ObjectId>>, StoreError> {
        let repo = self.repo();
        let transport =
            connect(endpoint, gix::protocol::transport::Protocol::V1).map_err(from_wire)?;
        let is_http = matches!(
            endpoint.url.scheme,
            gix::url::Scheme::Http | gix::url::Scheme::Https
        );
        // Tracking refs in the cache give the server `have`s, so a moved tip costs only the new
        // objects, not the whole tree again.
        let specs: Vec<String> = names
            .iter()
            .map(|n| format!("+{n}:{}", tracking_ref(n)))
            .collect();
        let remote = repo
            .remote_at(endpoint.url.clone())
            .map_err(internal("setting up the remote"))?
            .with_fetch_tags(gix::remote::fetch::Tags::None)
            .with_refspecs(specs.iter().map(String::as_str), Direction::Fetch)
            .map_err(internal("setting up the refspecs"))?;
        let mut connection = remote
            .to_connection_with_transport(transport)
            .with_credentials(|_| Ok(None));
        if is_http {
            connection = connection.with_transport_options(Box::new(http_options(endpoint)));
        }
        gitstate_wire::fetchpack::round_trip("upload-pack", "advertisement");
        let prepare = connection
            .prepare_fetch(
                gix::progress::Discard,
                gix::remote::ref_map::Options::default(),
            )
            .map_err(|e| from_wire(classify(endpoint, "listing the refs of", &e)))?;
        let mut tips = HashMap::new();
        for r in &prepare.ref_map().remote_refs {
            let (name, id, _) = r.unpack();
            if let Some(id) = id {
                if names.iter().any(|n| ref_matches(n, name)) {
                    tips.insert(name.to_string(), id.to_owned());
                }
            }
        }
        if tips.values().all(|id| repo.has_object(id)) {
            // Everything is here: skip the fetch round trip.
            return Ok(Some(tips));
        }
        let _guard = self
            .write_lock
            .lock()
            .map_err(|_| StoreError::Internal("the cache lock is poisoned".into()))?;
        if tips.values().all(|id| self.repo().has_object(id)) {
            // Another request's fetch brought them while this one waited for the lock.
            return Ok(Some(tips));
        }
        let prepare = if self.shallow {
            let depth = std::num::NonZeroU32::MIN;
            prepare.with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(depth))
        } else {
            prepare
        };
        gitstate_wire::fetchpack::round_trip("upload-pack", "fetch");
        let received = prepare.receive(gix::progress::Discard, &AtomicBool::new(false));
        let received = match received {
            Ok(received) => received,
            Err(e) if is_local_lock_busy(&e) => return Ok(None),
            Err(e) => return Err(from_wire(classify(endpoint, "fetching from", &e))),
        };
        let pack = match &received.status {
            gix::remote::fetch::Status::Change {
                write_pack_bundle, ..
            } => write_pack_bundle.data_path.as_deref(),
            gix::remote::fetch::Status::NoPackReceived { .. } => None,
        };
        self.fetched_pack("whole", pack);
        all_arrived(&self.repo(), endpoint, &tips)?;
        Ok(Some(tips))
    }
}

/// True when `error` is a lock file of the cache held by someone else (e.g. `shallow.lock`).
fn is_local_lock_busy(error: &gix::Error) -> bool {
    error.iter_errors().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AlreadyExists)
    })
}
