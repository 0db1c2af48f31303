//! Sharded handle tables: sessions and objects are found without a process-wide lock.
//!
//! A handle's shard is `handle % SHARDS`; each shard has its own `RwLock` and sits on its own
//! cache line, so threads working on different sessions never touch the same lock word.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, RwLock};

/// Hasher for handles: handles are small sequential integers handed out by the token, not
/// attacker-chosen keys, so a multiplicative mix is enough (and much cheaper than SipHash).
#[derive(Default)]
pub struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Map<T> = HashMap<u64, Arc<T>, BuildHasherDefault<HandleHasher>>;

const SHARDS: usize = 64;

#[repr(align(128))]
struct Shard<T> {
    map: RwLock<Map<T>>,
}

/// A concurrent map from PKCS#11 handles to shared values.
pub struct HandleTable<T> {
    shards: Box<[Shard<T>]>,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        let shards = (0..SHARDS)
            .map(|_| Shard {
                map: RwLock::new(Map::default()),
            })
            .collect();
        HandleTable { shards }
    }
}

impl<T> HandleTable<T> {
    fn shard(&self, h: u64) -> &Shard<T> {
        &self.shards[(h as usize) % SHARDS]
    }
    /// The value under `h`.
    pub fn get(&self, h: u64) -> Option<Arc<T>> {
        self.shard(h)
            .map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&h)
            .cloned()
    }
    /// Whether something is stored under `h` (no reference count touched).
    pub fn contains(&self, h: u64) -> bool {
        self.shard(h)
            .map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&h)
    }
    /// Stores `v` under `h`, returning what was there.
    pub fn insert(&self, h: u64, v: Arc<T>) -> Option<Arc<T>> {
        self.shard(h)
            .map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(h, v)
    }
    /// Removes `h`.
    pub fn remove(&self, h: u64) -> Option<Arc<T>> {
        self.shard(h)
            .map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&h)
    }
    /// Every value for which `keep` is true (a snapshot).
    pub fn filter(&self, mut keep: impl FnMut(&T) -> bool) -> Vec<Arc<T>> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let m = s.map.read().unwrap_or_else(|e| e.into_inner());
            out.extend(m.values().filter(|v| keep(v)).cloned());
        }
        out
    }
    /// Removes every value for which `drop_it` is true; returns them.
    pub fn remove_where(&self, mut drop_it: impl FnMut(&T) -> bool) -> Vec<Arc<T>> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let mut m = s.map.write().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<u64> = m
                .iter()
                .filter(|(_, v)| drop_it(v))
                .map(|(k, _)| *k)
                .collect();
            for k in keys {
                if let Some(v) = m.remove(&k) {
                    out.push(v);
                }
            }
        }
        out
    }
}
