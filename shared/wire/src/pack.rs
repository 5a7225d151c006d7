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

/// The longest chain of deltas inside one pack; a longer one goes whole from there.
const MAX_DEPTH: usize = 50;

/// Encodes `pack` (header, zlib-compressed entries, trailing checksum). With `thin`, a delta
/// may name a base outside the pack; without, only one inside it (the others go whole).
///
/// A base inside the pack is written before the deltas made from it. That matters for a push
/// whose objects the server already has (a push that lost the race to an identical one, two
/// leaders folding the same writes): git's `index-pack --fix-thin` takes a delta's base from
/// its own objects when the delta comes first, then resolves that delta again from the pack's
/// copy and fails the push ("REF_DELTA … already resolved (duplicate base …?)").
pub fn write_pack(pack: &Pack, thin: bool) -> Result<Vec<u8>, String> {
    let entries = plan(pack, thin)
        .into_iter()
        .map(|(index, delta)| {
            let (id, kind, data) = &pack.objects[index];
            let count = output::Count::from_data(*id, None);
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

/// The objects of `pack` in the order they are written, each with the delta it goes as: a base
/// inside the pack before its deltas; a delta whose base is outside goes only `thin`; a delta
/// that would close a cycle, or make a chain longer than [`MAX_DEPTH`], goes whole.
fn plan(pack: &Pack, thin: bool) -> Vec<(usize, Option<&Delta>)> {
    let index: HashMap<ObjectId, usize> = pack
        .objects
        .iter()
        .enumerate()
        .map(|(i, (id, _, _))| (*id, i))
        .collect();
    // Per object: the delta it keeps and its depth (0: whole, or a base outside the pack).
    let mut planned: Vec<Option<(Option<&Delta>, usize)>> = vec![None; pack.objects.len()];
    for start in 0..pack.objects.len() {
        // The chain of in-pack bases from `start` down to one already planned or without one.
        let mut chain = vec![start];
        let mut on_chain = std::collections::HashSet::from([start]);
        loop {
            let last = chain[chain.len() - 1];
            if planned[last].is_some() {
                chain.pop();
                break;
            }
            let delta = pack.deltas.get(&pack.objects[last].0);
            match delta.and_then(|d| index.get(&d.base)) {
                Some(&base) if !on_chain.contains(&base) => {
                    chain.push(base);
                    on_chain.insert(base);
                }
                // A cycle: this one goes whole.
                Some(_) => {
                    planned[last] = Some((None, 0));
                    chain.pop();
                    break;
                }
                None => {
                    let keep = delta.filter(|_| thin);
                    planned[last] = Some((keep, 0));
                    chain.pop();
                    break;
                }
            }
        }
        // Back up the chain: each one a level above its base, or whole past the limit.
        while let Some(object) = chain.pop() {
            let delta = pack.deltas.get(&pack.objects[object].0);
            let base = delta.and_then(|d| index.get(&d.base)).copied();
            let depth = base
                .and_then(|b| planned[b])
                .map_or(0, |(_, depth)| depth + 1);
            planned[object] = Some(if depth > MAX_DEPTH {
                (None, 0)
            } else {
                (delta, depth)
            });
        }
    }
    let mut order: Vec<(usize, Option<&Delta>, usize)> = planned
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let (delta, depth) = p.unwrap_or((None, 0));
            (i, delta, depth)
        })
        .collect();
    order.sort_by_key(|(i, _, depth)| (*depth, *i));
    order.into_iter().map(|(i, delta, _)| (i, delta)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes_or_panic(&[n; 20])
    }

    fn pack(deltas: &[(u8, u8)], objects: &[u8]) -> Pack {
        Pack {
            objects: objects
                .iter()
                .map(|n| (id(*n), Kind::Blob, vec![*n]))
                .collect(),
            deltas: deltas
                .iter()
                .map(|(of, base)| {
                    (
                        id(*of),
                        Delta {
                            base: id(*base),
                            data: vec![],
                        },
                    )
                })
                .collect(),
        }
    }

    /// (object, its delta's base) in written order.
    fn planned(pack: &Pack, thin: bool) -> Vec<(u8, Option<u8>)> {
        plan(pack, thin)
            .into_iter()
            .map(|(i, d)| (pack.objects[i].2[0], d.map(|d| d.base.as_bytes()[0])))
            .collect()
    }

    #[test]
    fn bases_come_before_their_deltas() {
        // 3 from 2 from 1 from 9 (outside).
        let p = pack(&[(3, 2), (2, 1), (1, 9)], &[3, 2, 1]);
        assert_eq!(
            planned(&p, true),
            vec![(1, Some(9)), (2, Some(1)), (3, Some(2))]
        );
        // Not thin: 1 goes whole, the others stay deltas inside the pack.
        assert_eq!(
            planned(&p, false),
            vec![(1, None), (2, Some(1)), (3, Some(2))]
        );
    }

    #[test]
    fn a_cycle_is_broken_and_depth_is_bounded() {
        let p = pack(&[(1, 2), (2, 1)], &[1, 2]);
        let written = planned(&p, true);
        assert_eq!(written.len(), 2);
        assert_eq!(written.iter().filter(|(_, d)| d.is_none()).count(), 1);
        assert_eq!(written[0].1, None, "the one going whole comes first");
        let n = (MAX_DEPTH + 5) as u8;
        let chain: Vec<(u8, u8)> = (2..=n).map(|i| (i, i - 1)).collect();
        let objects: Vec<u8> = (1..=n).rev().collect();
        let written = planned(&pack(&chain, &objects), true);
        assert_eq!(written.len(), objects.len());
        assert!(written.iter().filter(|(_, d)| d.is_none()).count() >= 2);
        let mut seen = std::collections::HashSet::new();
        for (object, base) in written {
            if let Some(base) = base {
                assert!(seen.contains(&base), "{object} before its base {base}");
            }
            seen.insert(object);
        }
    }
}
