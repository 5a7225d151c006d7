//! Writing a version-2 pack of whole (undeltified) objects for a push, at zlib level 1: a state
//! of 1 MiB compresses in half the time of the default level for a pack about 7 % larger (the
//! server inflates it either way; docs/BENCHMARKS.md, 2026-11-24).

use gix::objs::Kind;
use gix::ObjectId;
use gix_pack::data::output;

/// Encodes `objects` as a pack (header, zlib-compressed entries, trailing checksum).
pub fn write_pack(objects: &[(ObjectId, Kind, Vec<u8>)]) -> Result<Vec<u8>, String> {
    let entries = objects
        .iter()
        .map(|(id, kind, data)| {
            let count = output::Count::from_data(*id, None);
            let object = gix::objs::Data::new(data, *kind, gix::hash::Kind::Sha1);
            output::Entry::from_data(&count, &object, gix::zlib::Compression::BEST_SPEED)
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
