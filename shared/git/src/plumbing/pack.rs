//! Writing a version-2 pack for a push, at zlib level 1: a state of 1 MiB compresses in half the
//! time of the default level for a pack about 7 % larger (the server inflates it either way;
//! docs/BENCHMARKS.md, 2026-11-24).
//!
//! An object may go as a delta (`REF_DELTA`) against a base: another object of the pack, or one
//! the server has, which makes the pack thin (gitprotocol-capabilities `thin-pack`: receive-pack
//! takes thin packs unless it advertises `no-thin`, and completes them from its own objects).
//! That is how one changed entry in a tree of thousands travels as a few dozen bytes.

use std::collections::HashMap;

use gix::objs::Kind;
use gix::ObjectId;
use gix_pack::data::output;

/// The objects a push carries, whole (as the cache records them once the push is accepted), and
/// the deltas some of them may travel as.
#[derive(Debug, Default, Clone)]
pub struct Pack {
    /// Every object, whole: id, kind, data.
    pub objects: Vec<(ObjectId, Kind, Vec<u8>)>,
    /// By object id: the delta that makes it from `base`.
    pub deltas: HashMap<ObjectId, Delta>,
}

/// An object as a delta against `base`.
#[derive(Debug, Clone)]
pub struct Delta {
    /// The base: an object of the pack, or one the server has.
    pub base: ObjectId,
    /// git's delta format ([`super::delta`]).
    pub data: Vec<u8>,
}

impl From<Vec<(ObjectId, Kind, Vec<u8>)>> for Pack {
    fn from(objects: Vec<(ObjectId, Kind, Vec<u8>)>) -> Self {
        Pack {
            objects,
            deltas: HashMap::new(),
        }
    }
}

/// Encodes `pack` (header, zlib-compressed entries, trailing checksum). With `thin`, a delta
/// may name a base outside the pack; without, only one inside it (the others go whole).
pub fn write_pack(pack: &Pack, thin: bool) -> Result<Vec<u8>, String> {
    let inside: std::collections::HashSet<ObjectId> =
        pack.objects.iter().map(|(id, _, _)| *id).collect();
    let entries = pack
        .objects
        .iter()
        .map(|(id, kind, data)| {
            let count = output::Count::from_data(*id, None);
            let delta = pack
                .deltas
                .get(id)
                .filter(|delta| thin || inside.contains(&delta.base));
            let Some(delta) = delta else {
                let object = gix::objs::Data::new(data, *kind, gix::hash::Kind::Sha1);
                return output::Entry::from_data(
                    &count,
                    &object,
                    gix::zlib::Compression::BEST_SPEED,
                );
            };
            let payload = gix::objs::Data::new(&delta.data, *kind, gix::hash::Kind::Sha1);
            let mut entry =
                output::Entry::from_data(&count, &payload, gix::zlib::Compression::BEST_SPEED)?;
            entry.kind = output::entry::Kind::DeltaOid { id: delta.base };
            Ok(entry)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("compressing an object for the pack: {e}"))?;
    let count = u32::try_from(entries.len()).map_err(|_| "too many objects".to_string())?;
    let mut writer = output::bytes::FromEntriesIter::new(
        std::iter::once(Ok(entries)),
        Vec::new(),
        count,
        gix_pack::data::Version::V2,
        gix::hash::Kind::Sha1,
    );
    for step in writer.by_ref() {
        step.map_err(|e| format!("writing the pack: {e}"))?;
    }
    Ok(writer.into_write())
}
