//! Unwrapped data keys kept in memory for a bounded time, so warm requests call no KMS.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gitstate_sops::{DataKeyCache, Zeroizing};

/// When a data key was unwrapped, and the key (zeroed when it leaves the memory).
type Remembered = (Instant, Zeroizing<Vec<u8>>);

/// A bounded, time-limited memory of data keys by fingerprint of their wrapped entries.
pub struct DataKeyMemory {
    ttl: Duration,
    capacity: usize,
    keys: Mutex<HashMap<[u8; 32], Remembered>>,
}

impl DataKeyMemory {
    /// Keys live `ttl` after they were unwrapped; at most `capacity` are held.
    pub fn new(ttl: Duration, capacity: usize) -> DataKeyMemory {
        DataKeyMemory {
            ttl,
            capacity: capacity.max(1),
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// How many keys are held now (expired ones included until the next insertion).
    pub fn len(&self) -> usize {
        self.keys.lock().map_or(0, |k| k.len())
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DataKeyCache for DataKeyMemory {
    fn get(&self, fingerprint: &[u8; 32]) -> Option<Zeroizing<Vec<u8>>> {
        if self.ttl.is_zero() {
            return None;
        }
        let keys = self.keys.lock().ok()?;
        let (at, key) = keys.get(fingerprint)?;
        (at.elapsed() < self.ttl).then(|| key.clone())
    }

    fn put(&self, fingerprint: [u8; 32], data_key: Zeroizing<Vec<u8>>) {
        if self.ttl.is_zero() {
            return;
        }
        let Ok(mut keys) = self.keys.lock() else {
            return;
        };
        // Expired keys leave (and are zeroed) at the next insertion, not only when full.
        let ttl = self.ttl;
        keys.retain(|_, (at, _)| at.elapsed() < ttl);
        if keys.len() >= self.capacity {
            if let Some(oldest) = keys.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| *k) {
                keys.remove(&oldest);
            }
        }
        keys.insert(fingerprint, (Instant::now(), data_key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_expire_and_capacity_is_bounded() {
        let memory = DataKeyMemory::new(Duration::from_millis(50), 2);
        memory.put([1; 32], Zeroizing::new(vec![1]));
        memory.put([2; 32], Zeroizing::new(vec![2]));
        memory.put([3; 32], Zeroizing::new(vec![3]));
        assert_eq!(memory.len(), 2);
        assert_eq!(memory.get(&[3; 32]).as_deref(), Some(&vec![3]));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(memory.get(&[3; 32]), None);
        let off = DataKeyMemory::new(Duration::ZERO, 2);
        off.put([1; 32], Zeroizing::new(vec![1]));
        assert_eq!(off.get(&[1; 32]), None);
    }
}
