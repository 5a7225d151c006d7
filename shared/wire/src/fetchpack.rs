//! The fetch side of git protocol v2 (gitprotocol-v2): `ls-refs` with `ref-prefix`, and `fetch`
//! with `want`, `have`, `shallow`, `deepen`, `filter` and `done`, its answer read section by
//! section (`shallow-info`, then `packfile` with side-band demultiplexing) and the pack written
//! into an object directory.
//!
//! This is what makes a cold read cost what the state costs (docs/DESIGN.md §9): the commit and
//! its trees come with `filter blob:none` at depth 1, and the one blob a read needs follows with a
//! `want` of its id. Nothing here knows about state files or locks, or about the cache's refs.
//!
//! Every answer is read through the transport's [`Limited`](super::limits::Limited) reader (see
//! [`ShallowSafe`]), so the size and time limits of the endpoint hold.

use std::io::{self, BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use gix::bstr::ByteSlice;
use gix::protocol::transport::client::blocking_io::{ExtendedBufRead, ReadlineBufRead, Transport};
use gix::protocol::transport::client::{MessageKind, TransportWithoutIO, WriteMode};
use gix::protocol::transport::packetline::PacketLineRef;
use gix::protocol::transport::{Protocol, Service};
use gix::ObjectId;

use super::error::WireError;
use super::pack::{write_pack, Pack};
use super::pktline;
use super::thin::{self, Have};
use super::transport::{classify, classify_client, connect, Endpoint, ShallowSafe};

/// The most refs an `ls-refs` answer may list: far more than a state repository has (one branch,
/// one lock branch per locked state); the byte limit of the answer holds too.
const MAX_LISTED_REFS: usize = 1_000_000;

/// A `delim-pkt`: separates a v2 command's capabilities from its arguments.
const DELIM: &[u8] = b"0001";

/// Why a v2 session could not be used; the caller falls back to protocol v0/v1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOffered {
    /// The server answered the request for protocol v2 with v0/v1.
    ProtocolV2,
    /// The server speaks v2 but its `fetch` does not offer this feature (e.g. `filter`, when
    /// `uploadpack.allowFilter` is off).
    Feature(&'static str),
}

impl std::fmt::Display for NotOffered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotOffered::ProtocolV2 => write!(f, "it does not speak git protocol v2"),
            NotOffered::Feature(name) => {
                write!(f, "its protocol-v2 fetch does not offer '{name}'")
            }
        }
    }
}

/// A remote's error sent on side-band 3, which ends the answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RemoteAborted(pub String);

/// One `fetch` request.
#[derive(Debug, Default, Clone)]
pub struct FetchRequest {
    /// Objects wanted (commits, or blobs by id).
    pub wants: Vec<ObjectId>,
    /// Commits the client has (with their trees).
    pub haves: Vec<ObjectId>,
    /// The client's shallow boundary (its `shallow` file): commits whose parents it lacks.
    pub shallow: Vec<ObjectId>,
    /// `deepen <n>`.
    pub deepen: Option<u32>,
    /// `filter <spec>` (e.g. `blob:none`); the server must offer `filter`.
    pub filter: Option<String>,
}

/// A change of the client's shallow boundary announced in `shallow-info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShallowUpdate {
    /// `shallow <id>`: the client now lacks the parents of `id`.
    Shallow(ObjectId),
    /// `unshallow <id>`: the client now has the parents of `id`.
    Unshallow(ObjectId),
}

/// What a `fetch` brought.
#[derive(Debug, Default)]
pub struct Fetched {
    /// The `shallow-info` section.
    pub shallow: Vec<ShallowUpdate>,
    /// Objects in the pack.
    pub objects: u32,
    /// The pack written, when it held objects.
    pub pack: Option<PathBuf>,
    /// Objects of a thin pack left out: their base was neither in the pack nor held here.
    pub left_out: usize,
}

/// An open upload-pack session in protocol v2, after the capability advertisement.
pub struct UploadPack {
    transport: ShallowSafe,
    endpoint: Endpoint,
    /// The features of the `fetch` command (`shallow`, `filter`, …).
    fetch_features: Vec<String>,
    ls_refs: bool,
    object_format: bool,
}

impl UploadPack {
    /// Connects asking for protocol v2 and reads the capability advertisement (with the
    /// caller's credentials: the authorization check of a read). `Ok(Err(..))` when the server
    /// answered with protocol v0/v1 or offers no `ls-refs`/`fetch`.
    pub fn connect(endpoint: &Endpoint) -> Result<Result<UploadPack, NotOffered>, WireError> {
        let mut transport = connect(endpoint, Protocol::V2)?;
        round_trip("upload-pack", "advertisement");
        let handshake = gix::protocol::handshake(
            &mut transport,
            Service::UploadPack,
            |_| Ok(None),
            Vec::new(),
            &mut gix::progress::Discard,
        )
        .map_err(|e| classify(endpoint, "reading the capabilities of", &e))?;
        if handshake.server_protocol_version != Protocol::V2 {
            return Ok(Err(NotOffered::ProtocolV2));
        }
        let capabilities = &handshake.capabilities;
        let Some(fetch) = capabilities.capability("fetch") else {
            return Ok(Err(NotOffered::Feature("fetch")));
        };
        let fetch_features = fetch
            .values()
            .map(|values| values.map(|v| v.to_str_lossy().into_owned()).collect())
            .unwrap_or_default();
        let ls_refs = capabilities.contains("ls-refs");
        let object_format = capabilities.contains("object-format");
        Ok(Ok(UploadPack {
            transport,
            endpoint: endpoint.clone(),
            fetch_features,
            ls_refs,
            object_format,
        }))
    }

    /// Whether the server's `fetch` offers `feature` (e.g. `filter`, `shallow`).
    pub fn offers(&self, feature: &str) -> bool {
        self.fetch_features.iter().any(|f| f == feature)
    }

    /// `ls-refs` without peeling, symrefs or unborn refs: every ref whose name starts with one
    /// of `prefixes`, with its id. The server may list more (a prefix is a hint): callers match
    /// names themselves.
    pub fn ls_refs(&mut self, prefixes: &[&str]) -> Result<Vec<(String, ObjectId)>, WireError> {
        if !self.ls_refs {
            return Err(WireError::Remote(format!(
                "{} speaks protocol v2 but offers no ls-refs",
                self.endpoint.display
            )));
        }
        let mut arguments = Vec::new();
        for prefix in prefixes {
            line(&mut arguments, format!("ref-prefix {prefix}\n").as_bytes())?;
        }
        let endpoint = self.endpoint.clone();
        let what = "listing the refs of";
        let mut reader = self.command("ls-refs", &arguments, what)?;
        let mut refs = Vec::new();
        while let Some(packet) = reader.readline() {
            let data = match packet_data(&endpoint, what, packet)? {
                Some(data) => data,
                None => break,
            };
            if refs.len() >= MAX_LISTED_REFS {
                return Err(malformed(
                    &endpoint,
                    "more refs than any state repository has",
                ));
            }
            let text = data.trim_end_with(|c| c == '\n');
            let mut fields = text.split_str(" ");
            let (Some(id), Some(name)) = (fields.next(), fields.next()) else {
                return Err(malformed(&endpoint, "an ls-refs line without a ref name"));
            };
            let id = ObjectId::from_hex(id)
                .map_err(|_| malformed(&endpoint, "an ls-refs line without an object id"))?;
            // `unborn` only appears when asked for; anything else after the name is an attribute.
            refs.push((name.to_str_lossy().into_owned(), id));
        }
        Ok(refs)
    }

    /// Sends `request` (with `done`: no negotiation rounds) and writes the pack the server
    /// answers with into `pack_dir` (an object database's `pack` directory).
    ///
    /// With `have` (the objects the client holds) the request asks for a thin pack: deltas
    /// against objects of the `have` commits rather than whole objects (what makes a moved tip
    /// cost what changed, DESIGN §9.5). The pack written is then whole: the objects resolved
    /// against the pack and `have`, without those whose base is missing ([`thin::resolve`]).
    pub fn fetch(
        &mut self,
        request: &FetchRequest,
        pack_dir: &Path,
        have: Option<Have<'_>>,
    ) -> Result<Fetched, WireError> {
        if request.wants.is_empty() {
            return Ok(Fetched::default());
        }
        for (asked, feature, what) in [
            (request.deepen.is_some(), "shallow", "shallow"),
            (request.filter.is_some(), "filter", "filtered"),
        ] {
            if asked && !self.offers(feature) {
                return Err(WireError::Remote(format!(
                    "{} does not offer {what} fetches",
                    self.endpoint.display
                )));
            }
        }
        let arguments = fetch_arguments(request, have.is_some())?;

        let endpoint = self.endpoint.clone();
        let what = "fetching from";
        let mut reader = self.command("fetch", &arguments, what)?;
        let mut fetched = Fetched {
            shallow: read_sections(&mut *reader, &endpoint)?,
            ..Fetched::default()
        };
        let mut pack = SideBand::new(&mut *reader);
        let aborted = |pack: &mut SideBand<'_, _>| {
            pack.remote_error.take().map(|sentence| {
                WireError::Remote(endpoint.scrub(&format!(
                    "{} aborted the fetch: {sentence}",
                    endpoint.display
                )))
            })
        };
        let outcome = match have {
            None => index_pack(&mut pack, pack_dir),
            Some(have) => {
                let mut bytes = Vec::new();
                if let Err(e) = pack.read_to_end(&mut bytes) {
                    return Err(aborted(&mut pack)
                        .unwrap_or_else(|| classify_client(&endpoint, what, e.into())));
                }
                let resolved = thin::resolve(&bytes, have, super::limits::max_object_bytes())
                    .map_err(|e| {
                        WireError::Remote(format!(
                            "{} sent a pack that cannot be read: {e}",
                            endpoint.display
                        ))
                    })?;
                fetched.left_out = resolved.left_out;
                let whole = write_pack(&Pack::from(resolved.objects), false)
                    .map_err(WireError::Internal)?;
                index_pack(&mut &whole[..], pack_dir)
            }
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                if let Some(error) = aborted(&mut pack) {
                    return Err(error);
                }
                return Err(classify(&endpoint, what, &e));
            }
        };
        // The server ends the answer with a flush; read it so a stream connection can take the
        // next command.
        pack.drain()
            .map_err(|e| classify_client(&endpoint, what, e.into()))?;
        if let Some(keep) = &outcome.keep_path {
            // gix leaves a `.keep` file until refs point into the pack; the cache never gcs.
            let _ = std::fs::remove_file(keep);
        }
        fetched.objects = outcome.index.num_objects;
        fetched.pack = outcome.data_path;
        Ok(fetched)
    }

    /// True when every command is a request of its own (HTTP): the session can be kept and
    /// used again later without a new capability advertisement.
    pub fn is_stateless(&self) -> bool {
        !self
            .transport
            .connection_persists_across_multiple_requests()
    }

    /// Ends the session politely (a flush on stream connections; nothing over HTTP).
    pub fn finish(mut self) {
        if self
            .transport
            .connection_persists_across_multiple_requests()
        {
            let _ = gix::protocol::indicate_end_of_interaction(&mut self.transport, false);
        }
    }

    /// Sends `command=<name>` with `arguments` (pkt-lines) and returns the reader of the answer.
    fn command(
        &mut self,
        name: &'static str,
        arguments: &[u8],
        what: &str,
    ) -> Result<Box<dyn ExtendedBufRead<'_> + Unpin + '_>, WireError> {
        let mut request = Vec::new();
        line(&mut request, format!("command={name}\n").as_bytes())?;
        line(
            &mut request,
            concat!("agent=gitstate/", env!("CARGO_PKG_VERSION"), "\n").as_bytes(),
        )?;
        if self.object_format {
            line(&mut request, b"object-format=sha1\n")?;
        }
        request.extend_from_slice(DELIM);
        request.extend_from_slice(arguments);
        request.extend_from_slice(pktline::FLUSH);
        let endpoint = self.endpoint.clone();
        round_trip("upload-pack", name);
        let writer = self
            .transport
            .request(WriteMode::Binary, MessageKind::Flush, false)
            .map_err(|e| classify_client(&endpoint, what, e))?;
        let (mut raw, mut reader) = writer.into_parts();
        raw.write_all(&request)
            .and_then(|_| raw.flush())
            .map_err(|e| classify_client(&endpoint, what, e.into()))?;
        // Ends the HTTP request body.
        drop(raw);
        reader.reset(Protocol::V2);
        Ok(reader)
    }
}

/// Writes the pack read from `pack` (whole, not thin) and its index into `pack_dir`.
fn index_pack(
    pack: &mut dyn BufRead,
    pack_dir: &Path,
) -> Result<gix_pack::bundle::write::Outcome, gix::Error> {
    gix_pack::Bundle::write_to_directory(
        pack,
        Some(pack_dir),
        &mut gix::progress::Discard,
        &AtomicBool::new(false),
        None::<gix::objs::find::Never>,
        gix::hash::Kind::Sha1,
        gix_pack::bundle::write::Options {
            thread_limit: Some(1),
            // Zip bombs: the same bound gix's own fetch gets from the cache's configuration.
            alloc_limit_bytes: usize::try_from(super::limits::max_object_bytes()).ok(),
            ..Default::default()
        },
    )
}

/// Counts one request to a git server (see [`crate::metrics::GIT_ROUND_TRIPS`]).
pub fn round_trip(service: &'static str, step: impl Into<metrics::SharedString>) {
    metrics::counter!(
        crate::metrics::GIT_ROUND_TRIPS,
        "service" => service,
        "step" => step.into(),
        "operation" => crate::metrics::operation()
    )
    .increment(1);
}

/// Appends one pkt-line.
fn line(out: &mut Vec<u8>, data: &[u8]) -> Result<(), WireError> {
    pktline::encode(data, out).map_err(WireError::Internal)
}

fn malformed(endpoint: &Endpoint, what: &str) -> WireError {
    WireError::Remote(format!(
        "{} sent a malformed protocol-v2 answer: {what}",
        endpoint.display
    ))
}

/// The payload of a data packet; `None` at a flush or delimiter (the end of a section); an
/// error line (`ERR …`) becomes the remote's error.
fn packet_data<'a>(
    endpoint: &Endpoint,
    what: &str,
    packet: io::Result<gix::error::Result<PacketLineRef<'a>>>,
) -> Result<Option<&'a [u8]>, WireError> {
    let packet = packet
        .map_err(|e| classify_client(endpoint, what, e.into()))?
        .map_err(|e| malformed(endpoint, &e.to_string()))?;
    match packet {
        PacketLineRef::Data(data) => {
            if let Some(message) = data.strip_prefix(b"ERR ") {
                return Err(WireError::Remote(endpoint.scrub(&format!(
                    "{what} {}: {}",
                    endpoint.display,
                    message.to_str_lossy().trim()
                ))));
            }
            Ok(Some(data))
        }
        _ => Ok(None),
    }
}

/// The lines of a `shallow-info` section, up to its delimiter.
fn read_shallow_info<R: ReadlineBufRead + ?Sized>(
    reader: &mut R,
    endpoint: &Endpoint,
) -> Result<Vec<ShallowUpdate>, WireError> {
    let mut updates = Vec::new();
    while let Some(packet) = reader.readline() {
        let Some(data) = packet_data(endpoint, "fetching from", packet)? else {
            break;
        };
        let text = data.trim_end_with(|c| c == '\n');
        let update = if let Some(id) = text.strip_prefix(b"shallow ") {
            ObjectId::from_hex(id).ok().map(ShallowUpdate::Shallow)
        } else if let Some(id) = text.strip_prefix(b"unshallow ") {
            ObjectId::from_hex(id).ok().map(ShallowUpdate::Unshallow)
        } else {
            None
        };
        match update {
            Some(update) => updates.push(update),
            None => return Err(malformed(endpoint, "a shallow-info line")),
        }
    }
    Ok(updates)
}

/// The pack inside side-band-64k packets: band 1 is pack data, band 2 progress (logged at
/// debug), band 3 the remote's error, which ends the answer with that sentence.
struct SideBand<'r, R: ReadlineBufRead + ?Sized> {
    reader: &'r mut R,
    buf: Vec<u8>,
    pos: usize,
    done: bool,
    remote_error: Option<String>,
}

impl<'r, R: ReadlineBufRead + ?Sized> SideBand<'r, R> {
    fn new(reader: &'r mut R) -> Self {
        SideBand {
            reader,
            buf: Vec::new(),
            pos: 0,
            done: false,
            remote_error: None,
        }
    }

    /// Reads to the end of the answer (after the pack: nothing but progress is expected).
    fn drain(&mut self) -> io::Result<()> {
        let mut sink = [0u8; 4096];
        while self.read(&mut sink)? > 0 {}
        Ok(())
    }
}

impl<R: ReadlineBufRead + ?Sized> BufRead for SideBand<'_, R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos >= self.buf.len() && !self.done {
            let Some(packet) = self.reader.readline() else {
                self.done = true;
                break;
            };
            let packet = packet?.map_err(io::Error::other)?;
            let PacketLineRef::Data(data) = packet else {
                self.done = true;
                break;
            };
            match data.split_first() {
                Some((1, rest)) => {
                    self.buf.clear();
                    self.buf.extend_from_slice(rest);
                    self.pos = 0;
                }
                Some((2, rest)) => {
                    tracing::debug!(progress = %rest.to_str_lossy().trim(), "git server");
                }
                Some((3, rest)) => {
                    let sentence = rest.to_str_lossy().trim().to_owned();
                    self.remote_error = Some(sentence.clone());
                    self.done = true;
                    return Err(io::Error::other(RemoteAborted(sentence)));
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a pack packet without a side-band number",
                    ))
                }
            }
        }
        Ok(&self.buf[self.pos.min(self.buf.len())..])
    }

    fn consume(&mut self, amt: usize) {
        self.pos = (self.pos + amt).min(self.buf.len());
    }
}

impl<R: ReadlineBufRead + ?Sized> Read for SideBand<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// Reads a `fetch` answer's sections up to `packfile`: the `shallow-info` updates, others
/// skipped (`wanted-refs`, `packfile-uris`; `acknowledgments` does not come after `done`).
fn read_sections(
    reader: &mut (dyn ExtendedBufRead<'_> + Unpin + '_),
    endpoint: &Endpoint,
) -> Result<Vec<ShallowUpdate>, WireError> {
    let what = "fetching from";
    let mut shallow = Vec::new();
    loop {
        let header = match reader.readline() {
            Some(packet) => match packet_data(endpoint, what, packet)? {
                Some(data) => data
                    .trim_end_with(|c| c == '\n')
                    .to_str_lossy()
                    .into_owned(),
                None => return Err(malformed(endpoint, "a fetch answer without a pack")),
            },
            None => return Err(malformed(endpoint, "a fetch answer without a pack")),
        };
        match header.as_str() {
            "packfile" => break,
            "shallow-info" => {
                shallow = read_shallow_info(&mut *reader, endpoint)?;
            }
            other => {
                // Skip a section we did not ask for (e.g. `acknowledgments`).
                tracing::debug!(section = other, "skipping a fetch answer section");
                while let Some(packet) = reader.readline() {
                    if packet_data(endpoint, what, packet)?.is_none() {
                        break;
                    }
                }
            }
        }
        // Past the section's delimiter.
        reader.reset(Protocol::V2);
    }
    Ok(shallow)
}

/// The pkt-lines of a `fetch` command for `request`, ending with `done` (no negotiation);
/// `thin`: a thin pack is welcome.
fn fetch_arguments(request: &FetchRequest, thin: bool) -> Result<Vec<u8>, WireError> {
    let mut arguments = Vec::new();
    line(&mut arguments, b"no-progress\n")?;
    line(&mut arguments, b"ofs-delta\n")?;
    if thin {
        line(&mut arguments, b"thin-pack\n")?;
    }
    for id in &request.shallow {
        line(&mut arguments, format!("shallow {id}\n").as_bytes())?;
    }
    if let Some(depth) = request.deepen {
        line(&mut arguments, format!("deepen {depth}\n").as_bytes())?;
    }
    if let Some(filter) = &request.filter {
        line(&mut arguments, format!("filter {filter}\n").as_bytes())?;
    }
    for id in &request.wants {
        line(&mut arguments, format!("want {id}\n").as_bytes())?;
    }
    for id in &request.haves {
        line(&mut arguments, format!("have {id}\n").as_bytes())?;
    }
    line(&mut arguments, b"done\n")?;
    Ok(arguments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gix::protocol::transport::packetline::blocking_io::{StreamingPeekableIter, WithSidebands};

    /// `packets` as side-band pkt-lines (band, payload), then a flush.
    fn wire(packets: &[(u8, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (band, payload) in packets {
            let mut data = vec![*band];
            data.extend_from_slice(payload);
            pktline::encode(&data, &mut out).unwrap();
        }
        out.extend_from_slice(pktline::FLUSH);
        out
    }

    fn demux(bytes: &[u8]) -> (io::Result<Vec<u8>>, Option<String>) {
        let mut lines = StreamingPeekableIter::new(bytes, &[PacketLineRef::Flush], false);
        let mut reader = WithSidebands::new(&mut lines);
        let mut pack = SideBand::new(&mut reader);
        let mut out = Vec::new();
        let result = pack.read_to_end(&mut out).map(|_| out);
        (result, pack.remote_error.take())
    }

    #[test]
    fn band_one_is_the_pack_and_band_two_is_only_progress() {
        let bytes = wire(&[
            (2, b"Counting objects\n"),
            (1, b"PACK"),
            (2, b"done\n"),
            (1, b"rest"),
        ]);
        let (pack, error) = demux(&bytes);
        assert_eq!(pack.unwrap(), b"PACKrest");
        assert_eq!(error, None);
    }

    #[test]
    fn band_three_ends_the_answer_with_the_servers_sentence() {
        let bytes = wire(&[(1, b"PA"), (3, b"upload-pack: out of memory\n"), (1, b"CK")]);
        let (pack, error) = demux(&bytes);
        let e = pack.unwrap_err();
        assert!(e.to_string().contains("out of memory"), "{e}");
        assert_eq!(error.as_deref(), Some("upload-pack: out of memory"));
    }

    proptest::proptest! {
        /// Whatever a (hostile) server sends as the packfile section, demultiplexing gives bytes
        /// or an error, never a panic.
        #[test]
        fn any_answer_demuxes_or_fails(
            parts in proptest::collection::vec((0u8..5, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)), 0..8),
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let mut bytes = wire(&parts.iter().map(|(b, p)| (*b, p.as_slice())).collect::<Vec<_>>());
            let _ = demux(&bytes);
            let _ = demux(&raw);
            bytes.extend_from_slice(&raw);
            let _ = demux(&bytes);
        }
    }

    #[test]
    fn a_packet_without_a_band_is_refused() {
        let (pack, _) = demux(&wire(&[(9, b"x")]));
        assert_eq!(pack.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
