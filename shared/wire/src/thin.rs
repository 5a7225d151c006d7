//! A thin pack, taken apart: what a fetch gets when it asks for `thin-pack`
//! (gitprotocol-capabilities). Its deltas may name bases by id that are not in the pack but that
//! the server takes the client to have: the trees of the `have` commits. That is what makes a
//! tip moved by another writer cost what changed (git's `upload-pack` marks the `have` commits'
//! trees as uninteresting only when it builds a thin pack), but a request cache holds only the
//! trees something read, so some bases may be missing here. gix's pack writer then fails the
//! whole pack; [`resolve`] instead resolves every object it can (bases in the pack, or from
//! `have`) and leaves out those whose base is missing: a tree nobody read here, whose new version
//! nobody needs either (it comes by id when something reads that path).

use std::collections::HashMap;

use gix::objs::Kind;
use gix::ObjectId;
use gix_pack::data::entry::Header;
use gix_pack::data::input::{BytesToEntriesIter, EntryDataMode, Mode};

use super::delta;

/// An object, whole: id, kind, data.
pub type Object = (ObjectId, Kind, Vec<u8>);

/// The objects a client holds, by id (kind and data): the bases of a thin pack's deltas.
pub type Have<'a> = &'a dyn Fn(&gix::oid) -> Option<(Kind, Vec<u8>)>;

/// An entry ready to resolve, with its base's kind and data when it is a delta.
type Ready = (usize, Option<(Kind, Vec<u8>)>);

/// The objects of a thin pack.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Every object resolved, whole: id, kind, data.
    pub objects: Vec<Object>,
    /// Objects left out because their base is neither in the pack nor here.
    pub left_out: usize,
}

/// Where a delta's base is.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Base {
    /// Another entry of the pack, at this offset.
    Offset(u64),
    /// An object by id, in the pack or outside it.
    Id(ObjectId),
}

/// Resolves the objects of `pack` (a whole pack: header, entries, trailer, which is verified);
/// `have` gives an object the client holds. The objects, inflated, may not weigh more than
/// `limit` bytes together (a few bytes of delta can ask for megabytes: a hostile server's pack
/// is refused, not inflated; a thin fetch brings commits and trees, never a state).
pub fn resolve(pack: &[u8], have: Have<'_>, limit: u64) -> Result<Resolved, String> {
    let entries = BytesToEntriesIter::new_from_header(
        pack,
        Mode::Verify,
        EntryDataMode::Keep,
        gix::hash::Kind::Sha1,
    )
    .map_err(|e| format!("reading a pack's header: {e}"))?
    .collect::<Result<Vec<_>, _>>()
    .map_err(|e| format!("reading a pack: {e}"))?;

    // The deltas waiting for each base, and the objects that need none.
    let mut waiting: HashMap<Base, Vec<usize>> = HashMap::new();
    let mut ready: Vec<Ready> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        match entry.header {
            Header::OfsDelta { base_distance } => {
                let base = entry
                    .pack_offset
                    .checked_sub(base_distance)
                    .ok_or("a pack delta whose base lies before the pack")?;
                waiting.entry(Base::Offset(base)).or_default().push(index);
            }
            Header::RefDelta { base_id } => {
                waiting.entry(Base::Id(base_id)).or_default().push(index);
            }
            _ => ready.push((index, None)),
        }
    }
    let mut resolved: Vec<Option<Object>> = vec![None; entries.len()];
    let mut work = Work {
        entries: &entries,
        limit,
        total: 0,
        waiting,
        ready,
    };
    work.run(&mut resolved)?;
    // What still waits has its base outside the pack: the client's, or nowhere.
    let outside: Vec<ObjectId> = work
        .waiting
        .keys()
        .filter_map(|base| match base {
            Base::Id(id) => Some(*id),
            Base::Offset(_) => None,
        })
        .collect();
    for id in outside {
        if let Some((kind, data)) = have(&id) {
            work.release(Base::Id(id), kind, &data);
            work.run(&mut resolved)?;
        }
    }
    let objects: Vec<_> = resolved.into_iter().flatten().collect();
    Ok(Resolved {
        left_out: entries.len() - objects.len(),
        objects,
    })
}

/// Entries whose base is known, resolved one after the other; each resolved object releases
/// the deltas waiting for it.
struct Work<'a> {
    entries: &'a [gix_pack::data::input::Entry],
    /// The most bytes all objects may weigh, inflated.
    limit: u64,
    /// What they weigh so far.
    total: u64,
    /// The deltas waiting for each base.
    waiting: HashMap<Base, Vec<usize>>,
    /// Entries ready to resolve, with their base's kind and data when they are deltas.
    ready: Vec<Ready>,
}

impl Work<'_> {
    /// Makes the deltas waiting for `base` ready, with its `kind` and `data`.
    fn release(&mut self, base: Base, kind: Kind, data: &[u8]) {
        for child in self.waiting.remove(&base).unwrap_or_default() {
            self.ready.push((child, Some((kind, data.to_vec()))));
        }
    }

    /// Resolves every ready entry into `resolved`, and what that releases.
    fn run(&mut self, resolved: &mut [Option<Object>]) -> Result<(), String> {
        while let Some((index, base)) = self.ready.pop() {
            let entry = &self.entries[index];
            let inflated = inflate(entry, self.limit - self.total)?;
            let (kind, data) = match (entry.header, base) {
                (Header::Commit, _) => (Kind::Commit, inflated),
                (Header::Tree, _) => (Kind::Tree, inflated),
                (Header::Blob, _) => (Kind::Blob, inflated),
                (Header::Tag, _) => (Kind::Tag, inflated),
                (_, Some((kind, base))) => (
                    kind,
                    delta::apply(&base, &inflated, self.limit - self.total)
                        .map_err(|e| e.to_string())?,
                ),
                (_, None) => return Err("a pack delta without its base".into()),
            };
            self.total += data.len() as u64;
            let id = gix::objs::compute_hash(gix::hash::Kind::Sha1, kind, &data)
                .map_err(|e| format!("hashing an object of a pack: {e}"))?;
            self.release(Base::Offset(entry.pack_offset), kind, &data);
            self.release(Base::Id(id), kind, &data);
            resolved[index] = Some((id, kind, data));
        }
        Ok(())
    }
}

/// The inflated data of `entry` (kept compressed by the iterator), at most `limit` bytes.
fn inflate(entry: &gix_pack::data::input::Entry, limit: u64) -> Result<Vec<u8>, String> {
    if entry.decompressed_size > limit {
        return Err(format!(
            "a pack entry of {} bytes is over the limit of {limit}",
            entry.decompressed_size
        ));
    }
    let compressed = entry
        .compressed
        .as_deref()
        .ok_or("a pack entry without its data")?;
    let size = usize::try_from(entry.decompressed_size).map_err(|_| "a pack entry's size")?;
    let mut out = vec![0u8; size];
    let (_, _, written) = gix::zlib::Inflate::default()
        .once(compressed, &mut out)
        .map_err(|e| format!("inflating a pack entry: {e}"))?;
    if written != size {
        return Err("a pack entry shorter than its header says".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::{write_pack, Delta, Pack};

    fn object(kind: Kind, data: &[u8]) -> Object {
        let id = gix::objs::compute_hash(gix::hash::Kind::Sha1, kind, data).unwrap();
        (id, kind, data.to_vec())
    }

    /// A pack written here with deltas against a base outside it, and one inside.
    fn thin_pack() -> (Vec<u8>, [Object; 4]) {
        let filler: Vec<u8> = (0..2000u32).flat_map(|i| i.to_le_bytes()).collect();
        let mut base = filler.clone();
        base.extend_from_slice(b"base");
        let mut first = filler.clone();
        first.extend_from_slice(b"first");
        let mut second = filler.clone();
        second.extend_from_slice(b"second");
        let (base, first, second) = (
            object(Kind::Blob, &base),
            object(Kind::Blob, &first),
            object(Kind::Blob, &second),
        );
        let whole = object(Kind::Tree, b"");
        let mut deltas = HashMap::new();
        deltas.insert(
            first.0,
            Delta {
                base: base.0,
                data: delta::encode(&base.2, &first.2),
            },
        );
        deltas.insert(
            second.0,
            Delta {
                base: first.0,
                data: delta::encode(&first.2, &second.2),
            },
        );
        let pack = Pack {
            objects: vec![second.clone(), whole.clone(), first.clone()],
            deltas,
        };
        let bytes = write_pack(&pack, true).unwrap();
        (bytes, [base, first, second, whole])
    }

    #[test]
    fn a_thin_pack_resolves_against_what_the_client_has() {
        let (bytes, [base, first, second, whole]) = thin_pack();
        assert!(
            bytes.len() < 200,
            "{} bytes: deltas, not whole objects",
            bytes.len()
        );
        let have = |id: &gix::oid| (id == base.0).then(|| (base.1, base.2.clone()));
        let mut resolved = resolve(&bytes, &have, 1 << 20).unwrap();
        resolved.objects.sort();
        let mut expected = vec![first, second, whole];
        expected.sort();
        assert_eq!(resolved.objects, expected);
        assert_eq!(resolved.left_out, 0);
    }

    #[test]
    fn objects_whose_base_is_missing_are_left_out() {
        let (bytes, [_, _, _, whole]) = thin_pack();
        let resolved = resolve(&bytes, &|_| None, 1 << 20).unwrap();
        assert_eq!(resolved.objects, vec![whole]);
        assert_eq!(resolved.left_out, 2);
    }

    #[test]
    fn limits_and_damage_are_errors() {
        let (bytes, [base, ..]) = thin_pack();
        let have = |id: &gix::oid| (id == base.0).then(|| (base.1, base.2.clone()));
        assert!(
            resolve(&bytes, &have, 100).is_err(),
            "over the object limit"
        );
        // Each object is within 10,000 bytes; together they are not.
        assert!(resolve(&bytes, &have, 10_000).is_err(), "over the total");
        assert!(resolve(&bytes, &have, 30_000).is_ok());
        let mut damaged = bytes.clone();
        let at = damaged.len() / 2;
        damaged[at] ^= 0xff;
        assert!(resolve(&damaged, &have, 1 << 20).is_err());
        assert!(resolve(&bytes[..bytes.len() - 3], &have, 1 << 20).is_err());
    }
}
