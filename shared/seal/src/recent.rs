//! The documents this process sealed lately, with their plaintext: opening one of them again (the
//! state guard of the next write, a read after a write) is a comparison of bytes instead of a
//! decryption of every value.
//!
//! An entry answers only for the place it was sealed for and only for exactly the bytes the
//! sealer produced, so it opens nothing a full open would refuse: another place's document, a
//! changed byte, or a document sealed elsewhere all take the full way. Entries live as long as
//! unwrapped data keys do (`data_key_cache_seconds`; zero keeps nothing), within a byte budget.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gitstate_core::Place;

/// The most entries kept, whatever their size.
const MAX_ENTRIES: usize = 64;

/// One sealed document and the plaintext it holds.
struct Entry {
    at: Place,
    sealed: Bytes,
    plain: Bytes,
    since: Instant,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.sealed.len() + self.plain.len()
    }
}

/// A bounded, time-limited memory of what this process sealed (newest first).
pub struct RecentlySealed {
    ttl: Duration,
    max_bytes: usize,
    entries: Mutex<VecDeque<Entry>>,
}

impl RecentlySealed {
    /// Entries live `ttl` after sealing; together they hold at most `max_bytes` (sealed and
    /// plaintext counted).
    pub fn new(ttl: Duration, max_bytes: usize) -> RecentlySealed {
        RecentlySealed {
            ttl,
            max_bytes,
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// Remembers that `sealed` (bound to `at`) holds `plain`. A pair larger than the whole
    /// budget is not kept.
    pub fn remember(&self, at: &Place, sealed: &Bytes, plain: &Bytes) {
        let size = sealed.len() + plain.len();
        if self.ttl.is_zero() || size > self.max_bytes {
            return;
        }
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        let ttl = self.ttl;
        entries.retain(|e| e.since.elapsed() < ttl);
        entries.push_front(Entry {
            at: at.clone(),
            sealed: sealed.clone(),
            plain: plain.clone(),
            since: Instant::now(),
        });
        let mut total: usize = entries.iter().map(Entry::bytes).sum();
        while total > self.max_bytes || entries.len() > MAX_ENTRIES {
            match entries.pop_back() {
                Some(oldest) => total -= oldest.bytes(),
                None => break,
            }
        }
    }

    /// The plaintext of `stored` at `at`, when it is byte for byte a document this process
    /// sealed for `at` within the time to live.
    pub fn recall(&self, at: &Place, stored: &[u8]) -> Option<Bytes> {
        // The candidates (same place, same length) are taken under the lock; the bytes are
        // compared outside it, so concurrent reads do not queue behind a large comparison.
        let candidates: Vec<(Bytes, Bytes)> = {
            let entries = self.entries.lock().ok()?;
            entries
                .iter()
                .filter(|e| {
                    e.since.elapsed() < self.ttl && e.at == *at && e.sealed.len() == stored.len()
                })
                .map(|e| (e.sealed.clone(), e.plain.clone()))
                .collect()
        };
        candidates
            .into_iter()
            .find(|(sealed, _)| sealed[..] == *stored)
            .map(|(_, plain)| plain)
    }

    /// How many documents are held now (expired ones included until the next one is sealed).
    pub fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gitstate_core::StatePath;

    fn place(repository: &str, path: &str) -> Place {
        Place::new(
            repository,
            &StatePath::parse(path).expect("a valid state path"),
        )
    }

    #[test]
    fn only_the_same_bytes_at_the_same_place_are_recalled() {
        let recent = RecentlySealed::new(Duration::from_secs(60), 1 << 20);
        let at = place("default", "prod.tfstate");
        let sealed = Bytes::from_static(b"{\"sops\":1}");
        let plain = Bytes::from_static(b"{\"serial\":1}");
        recent.remember(&at, &sealed, &plain);
        assert_eq!(recent.recall(&at, &sealed), Some(plain));
        // Another place (the document copied there), another repository, a changed byte.
        assert_eq!(
            recent.recall(&place("default", "dev.tfstate"), &sealed),
            None
        );
        assert_eq!(
            recent.recall(&place("other", "prod.tfstate"), &sealed),
            None
        );
        assert_eq!(recent.recall(&at, b"{\"sops\":2}"), None);
    }

    #[test]
    fn entries_expire_and_the_budget_is_kept() {
        let at = place("default", "prod.tfstate");
        let short = RecentlySealed::new(Duration::from_millis(30), 1 << 20);
        let sealed = Bytes::from_static(b"sealed");
        short.remember(&at, &sealed, &Bytes::from_static(b"plain"));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(short.recall(&at, &sealed), None);

        // 10 + 10 bytes per entry, 45 bytes of budget: two entries fit, the oldest goes.
        let small = RecentlySealed::new(Duration::from_secs(60), 45);
        for i in 0..3u8 {
            let sealed = Bytes::from(vec![i; 10]);
            small.remember(&at, &sealed, &Bytes::from(vec![i; 10]));
        }
        assert_eq!(small.len(), 2);
        assert_eq!(small.recall(&at, &[0; 10]), None);
        assert_eq!(small.recall(&at, &[2; 10]).as_deref(), Some(&[2u8; 10][..]));
        // Larger than the whole budget: not kept.
        small.remember(&at, &Bytes::from(vec![9; 40]), &Bytes::from(vec![9; 40]));
        assert_eq!(small.recall(&at, &[9; 40]), None);

        let off = RecentlySealed::new(Duration::ZERO, 1 << 20);
        off.remember(&at, &sealed, &Bytes::from_static(b"plain"));
        assert!(off.is_empty());
    }
}
