//! Finding placeholders and replacing values in bytes: whole buffers and streams (spec §14.5, §14.7).
//!
//! Streams keep a window of the longest needle minus one byte, so a needle split across reads is still found
//! and never partly emitted.

use crate::secret::PLACEHOLDER_PREFIX;
use std::collections::HashMap;

/// Length of a placeholder: the prefix and 32 hex characters.
pub(crate) const PLACEHOLDER_LEN: usize = PLACEHOLDER_PREFIX.len() + 32;

/// Every known placeholder in `hay`, as (offset, binding index), in order. Placeholder-shaped strings that are
/// not known (another run's) are ignored.
pub(crate) fn find_placeholders(hay: &[u8], known: &HashMap<String, usize>) -> Vec<(usize, usize)> {
    let prefix = PLACEHOLDER_PREFIX.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + PLACEHOLDER_LEN <= hay.len() {
        let Some(p) = find(&hay[i..], prefix) else { break };
        let at = i + p;
        if at + PLACEHOLDER_LEN > hay.len() {
            break;
        }
        let suffix = &hay[at + prefix.len()..at + PLACEHOLDER_LEN];
        if let Some(idx) = std::str::from_utf8(suffix).ok().and_then(|s| known.get(s)) {
            out.push((at, *idx));
            i = at + PLACEHOLDER_LEN;
        } else {
            i = at + 1;
        }
    }
    out
}

/// The first position of `needle` in `hay`.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    let first = needle[0];
    let last = hay.len() - needle.len();
    let mut i = 0;
    while i <= last {
        match hay[i..=last].iter().position(|&b| b == first) {
            None => return None,
            Some(p) => {
                i += p;
                if &hay[i..i + needle.len()] == needle {
                    return Some(i);
                }
                i += 1;
            }
        }
    }
    None
}

/// Replace every occurrence of each `(needle, replacement)` pair in `hay`, scanning left to right (the first
/// pair matching at a position wins). Returns the new bytes and the number of replacements per pair.
pub(crate) fn replace_all(hay: &[u8], pairs: &[(&[u8], &[u8])]) -> (Vec<u8>, Vec<usize>) {
    let mut counts = vec![0; pairs.len()];
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    'outer: while i < hay.len() {
        for (k, (needle, repl)) in pairs.iter().enumerate() {
            if !needle.is_empty() && hay[i..].starts_with(needle) {
                out.extend_from_slice(repl);
                counts[k] += 1;
                i += needle.len();
                continue 'outer;
            }
        }
        out.push(hay[i]);
        i += 1;
    }
    (out, counts)
}

/// Whether `t` is a proper prefix of some placeholder (`iterion-ph-` and lower-case hex).
fn could_start_placeholder(t: &[u8]) -> bool {
    let prefix = PLACEHOLDER_PREFIX.as_bytes();
    if t.len() <= prefix.len() {
        return prefix.starts_with(t);
    }
    t.len() < PLACEHOLDER_LEN
        && t.starts_with(prefix)
        && t[prefix.len()..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// A streaming placeholder detector: feed chunks, get back the bytes that are safe to pass on.
///
/// Only a tail that could still become a placeholder is held back, so ordinary traffic never waits; the caller
/// may [`Detector::flush`] even that tail after a pause. Released bytes are remembered (one placeholder length),
/// so a placeholder straddling released bytes is still recognised when its last byte arrives: the upstream
/// never receives a complete placeholder.
#[derive(Debug, Default)]
pub(crate) struct Detector {
    history: Vec<u8>,
    held: Vec<u8>,
}

impl Detector {
    /// Scan `chunk`. `Err(binding)`: a known placeholder was completed; its last byte was not released.
    /// `Ok(bytes)`: the bytes that can be passed on now.
    pub(crate) fn feed(&mut self, chunk: &[u8], known: &HashMap<String, usize>) -> Result<Vec<u8>, usize> {
        let h = self.history.len();
        let mut window = Vec::with_capacity(h + self.held.len() + chunk.len());
        window.extend_from_slice(&self.history);
        window.extend_from_slice(&self.held);
        window.extend_from_slice(chunk);
        if let Some((_, idx)) = find_placeholders(&window, known).first() {
            return Err(*idx);
        }
        let fresh = window.len() - h;
        let keep = (1..=fresh.min(PLACEHOLDER_LEN - 1))
            .rev()
            .find(|&k| could_start_placeholder(&window[window.len() - k..]))
            .unwrap_or(0);
        self.held = window[window.len() - keep..].to_vec();
        let released = window[h..window.len() - keep].to_vec();
        self.remember(&window[..window.len() - keep]);
        Ok(released)
    }

    fn remember(&mut self, sent: &[u8]) {
        let keep = sent.len().min(PLACEHOLDER_LEN - 1);
        self.history = sent[sent.len() - keep..].to_vec();
    }

    /// Release the held-back tail (after a pause, or at the end of the stream).
    pub(crate) fn flush(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        let mut sent = std::mem::take(&mut self.history);
        sent.extend_from_slice(&held);
        self.remember(&sent);
        held
    }

    /// Whether bytes are held back.
    pub(crate) fn holding(&self) -> bool {
        !self.held.is_empty()
    }
}

/// A streaming replacer (response scrubbing): every needle is replaced by its replacement even across chunks.
/// The pairs are borrowed, so secret values are not copied.
#[derive(Debug)]
pub(crate) struct Replacer<'a> {
    pairs: &'a [(&'a [u8], &'a [u8])],
    max: usize,
    carry: Vec<u8>,
    /// Replacements made so far.
    pub(crate) replaced: usize,
}

impl<'a> Replacer<'a> {
    pub(crate) fn new(pairs: &'a [(&'a [u8], &'a [u8])]) -> Self {
        let max = pairs.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        Self {
            pairs,
            max,
            carry: Vec::new(),
            replaced: 0,
        }
    }

    /// Process `chunk`; returns the bytes that are final. A tail that could still start a needle is held back.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut window = std::mem::take(&mut self.carry);
        window.extend_from_slice(chunk);
        let (out, rest) = self.process(&window, false);
        self.carry = rest;
        out
    }

    /// The held-back tail, replaced.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let window = std::mem::take(&mut self.carry);
        self.process(&window, true).0
    }

    fn process(&mut self, w: &[u8], last: bool) -> (Vec<u8>, Vec<u8>) {
        let mut out = Vec::with_capacity(w.len());
        // Hold back only the longest tail that is a proper prefix of a needle, so streams never stall.
        let held = if last {
            0
        } else {
            (1..=w.len().min(self.max.saturating_sub(1)))
                .rev()
                .find(|&k| {
                    let tail = &w[w.len() - k..];
                    self.pairs.iter().any(|(n, _)| n.len() > k && n.starts_with(tail))
                })
                .unwrap_or(0)
        };
        let stable = w.len() - held;
        let mut i = 0;
        'outer: while i < stable {
            for (needle, repl) in self.pairs {
                if !needle.is_empty() && w[i..].starts_with(needle) {
                    out.extend_from_slice(repl);
                    self.replaced += 1;
                    i += needle.len();
                    continue 'outer;
                }
            }
            out.push(w[i]);
            i += 1;
        }
        (out, w[i.min(w.len())..].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "iterion-ph-0123456789abcdef0123456789abcdef";

    fn known() -> HashMap<String, usize> {
        HashMap::from([(P[PLACEHOLDER_PREFIX.len()..].to_owned(), 0)])
    }

    fn check_find(hay: &str, expect: &[(usize, usize)]) {
        assert_eq!(find_placeholders(hay.as_bytes(), &known()), expect, "{hay}");
    }

    #[test]
    fn finds_known_placeholders_only() {
        check_find(P, &[(0, 0)]);
        check_find(&format!("Bearer {P}"), &[(7, 0)]);
        check_find(&format!("{P}{P}"), &[(0, 0), (43, 0)]);
        check_find("iterion-ph-ffffffffffffffffffffffffffffffff", &[]);
        check_find(&P[..42], &[]);
        check_find(&format!("iterion-ph-{P}"), &[(11, 0)]);
    }

    #[test]
    fn detector_finds_a_placeholder_split_across_chunks() {
        let text = format!("xxxxxxxx{P}yyyy");
        for split in 0..text.len() {
            let mut d = Detector::default();
            let a = d.feed(&text.as_bytes()[..split], &known());
            let b = a
                .clone()
                .and_then(|_| d.feed(&text.as_bytes()[split..], &known()));
            assert_eq!(b, Err(0), "split {split}");
            // Nothing of the placeholder was released before it was recognised.
            if let Ok(released) = a {
                assert!(
                    !String::from_utf8_lossy(&released).contains("iterion-ph-0"),
                    "split {split}"
                );
            }
        }
        let mut d = Detector::default();
        // Ordinary bytes are released at once; only a possible placeholder start is held back.
        assert_eq!(
            d.feed(b"GET / HTTP/1.1\r\n\r\n", &known()),
            Ok(b"GET / HTTP/1.1\r\n\r\n".to_vec())
        );
        assert!(!d.holding());
        let mut out = d.feed(b"hello iterion-ph-", &known()).unwrap_or_default();
        assert_eq!(out, b"hello ");
        assert!(d.holding());
        out.extend(d.feed(b"zz", &known()).unwrap_or_default());
        out.extend(d.flush());
        assert_eq!(out, b"hello iterion-ph-zz");
        // A placeholder whose start was flushed after a pause is still recognised when it completes.
        let mut d = Detector::default();
        assert_eq!(d.feed(b"x iterion-ph-0123", &known()), Ok(b"x ".to_vec()));
        assert_eq!(d.flush(), b"iterion-ph-0123");
        assert_eq!(d.feed(&P.as_bytes()[15..], &known()), Err(0));
    }

    #[test]
    fn replacer_replaces_across_chunks() {
        let text = b"a ghp_realvalue b ghp_realvalue";
        for split in 0..text.len() {
            let pairs = [(b"ghp_realvalue".as_slice(), P.as_bytes())];
            let mut r = Replacer::new(&pairs);
            let mut out = r.feed(&text[..split]);
            out.extend(r.feed(&text[split..]));
            out.extend(r.finish());
            assert_eq!(
                String::from_utf8_lossy(&out),
                format!("a {P} b {P}"),
                "split {split}"
            );
            assert_eq!(r.replaced, 2);
        }
    }

    #[test]
    fn replace_all_counts() {
        let (out, counts) = replace_all(
            format!("{P}/{P}").as_bytes(),
            &[(P.as_bytes(), b"ghp_realvalue".as_slice())],
        );
        assert_eq!(out, b"ghp_realvalue/ghp_realvalue");
        assert_eq!(counts, vec![2]);
    }
}
