//! The hasher of the compiler's name lookups.
//!
//! Its output only places names in hash-map buckets: it is never stored, printed or compared across runs,
//! so it is free to change. It is not a digest (content hashes use `sha2`); it is here because the default
//! SipHash costs about a tenth of the compile time on the front-end benchmark.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A small non-cryptographic hasher for name lookups (inputs are the user's own names; collisions only cost
/// time, and the maps are rebuilt per compile).
#[derive(Default)]
pub(super) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    fn write_u8(&mut self, b: u8) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A hash map keyed through [`FxHasher`].
pub(super) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(bytes: &[u8]) -> u64 {
        let mut h = FxHasher::default();
        h.write(bytes);
        h.finish()
    }

    #[test]
    fn names_spread() {
        // the maps only need distinct names to land apart; a constant hash would make every lookup linear
        let names = [
            "a",
            "b",
            "ab",
            "ba",
            "node_1",
            "node_2",
            "a_much_longer_node_name_over_8_bytes",
        ];
        let hashes: std::collections::BTreeSet<u64> = names.iter().map(|n| hash(n.as_bytes())).collect();
        assert_eq!(hashes.len(), names.len());
        assert_eq!(hash(b"node_1"), hash(b"node_1"));
        let mut m: FxMap<&str, u32> = FxMap::default();
        m.insert("x", 1);
        assert_eq!(m.get("x"), Some(&1));
    }
}
