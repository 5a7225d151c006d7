//! Objects fetched by id (the trees and blob on a path, DESIGN §9.5) land as loose objects, not
//! as a pack: gix cannot repack, every pack is one more index each lookup may search, and a
//! generation retires after [`super::CacheBudget::packs`] of them, so a reconcile loop reading
//! thousands of states would otherwise start cold every few hundred reads. A fetch that brings
//! many objects or many bytes keeps its pack.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use gitstate_core::StoreError;
use gix::objs::Find;

use super::pushed::write_objects;
use super::Cache;
use crate::errors::from_wire;
use crate::objects::internal;
use gitstate_wire::fetchpack::{FetchRequest, UploadPack};

/// A fetch by id with at most this many objects, and a pack of at most [`LOOSE_BYTES`], is
/// written loose.
const LOOSE_OBJECTS: u32 = 64;
/// See [`LOOSE_OBJECTS`].
const LOOSE_BYTES: u64 = 1 << 20;

impl Cache {
    /// Sends `request` over `session` and puts what came into the cache: loose when it is small,
    /// else as the pack. The pack is first written into a scratch directory of its own in the
    /// cache, which no reader looks at; every object lands atomically (a loose file or a pack
    /// renamed in, its index last), so fetches by id need not hold the cache's write lock.
    pub(super) fn fetch_into_store(
        &self,
        session: &mut UploadPack,
        request: &FetchRequest,
    ) -> Result<(), StoreError> {
        static SCRATCH: AtomicUsize = AtomicUsize::new(0);
        let scratch = self.dir.join(format!(
            "incoming-{}",
            SCRATCH.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(scratch.join("pack"))
            .map_err(internal("making the cache's scratch directory"))?;
        let taken = session
            .fetch(request, &scratch.join("pack"), None)
            .map_err(from_wire)
            .and_then(|fetched| match fetched.pack {
                Some(pack) => self.take_in(&scratch, &pack, fetched.objects),
                None => Ok(()),
            });
        let _ = std::fs::remove_dir_all(&scratch);
        taken
    }

    /// Moves the fetched `pack` (in `scratch`, holding `objects` objects) into the cache.
    fn take_in(&self, scratch: &Path, pack: &Path, objects: u32) -> Result<(), StoreError> {
        let size = std::fs::metadata(pack).map_or(u64::MAX, |m| m.len());
        if objects > LOOSE_OBJECTS || size > LOOSE_BYTES {
            return self.move_pack_in(pack);
        }
        let odb = gix::odb::at(scratch, gix::hash::Kind::Sha1)
            .map_err(internal("opening a fetched pack"))?;
        let mut fetched = Vec::new();
        let mut buf = Vec::new();
        for id in odb.iter().map_err(internal("listing a fetched pack"))? {
            let id = id.map_err(internal("listing a fetched pack"))?;
            let data = odb
                .try_find(&id, &mut buf)
                .map_err(internal("reading a fetched pack"))?
                .ok_or_else(|| StoreError::Internal(format!("{id} is not in its pack")))?;
            fetched.push((id, data.kind, data.data.to_vec()));
        }
        let written = write_objects(&self.repo(), &fetched)?;
        self.fetched("blobs", written, false);
        Ok(())
    }

    /// Renames the fetched `pack` and its index into the cache's pack directory: the pack
    /// first, so that the index never names a pack that is not there.
    fn move_pack_in(&self, pack: &Path) -> Result<(), StoreError> {
        let (Some(name), index) = (pack.file_name(), pack.with_extension("idx")) else {
            return Err(StoreError::Internal("a fetched pack has no name".into()));
        };
        let target = self.pack_dir().join(name);
        std::fs::rename(pack, &target).map_err(internal("moving a fetched pack"))?;
        std::fs::rename(&index, target.with_extension("idx"))
            .map_err(internal("moving a fetched pack's index"))?;
        self.fetched_pack("blobs", Some(&target));
        Ok(())
    }
}
