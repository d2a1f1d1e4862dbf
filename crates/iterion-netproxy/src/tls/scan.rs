//! Finding placeholders and secret values and replacing values in bytes: whole buffers and streams.
//!
//! Streams keep a window of the longest needle minus one byte, so a needle split across reads is still found
//! and never partly emitted.

/// What a needle found in traffic stands for: the placeholder or the real value of a binding (its index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hit {
    /// The binding's placeholder.
    Placeholder(usize),
    /// The binding's real value.
    Value(usize),
}

impl Hit {
    /// The index of the binding.
    pub(crate) fn binding(self) -> usize {
        match self {
            Hit::Placeholder(i) | Hit::Value(i) => i,
        }
    }
}

/// The byte strings searched for, borrowed from the inspector (so secret values are not copied). `Debug` shows
/// what the needles stand for, never their bytes.
#[derive(Clone, Default)]
pub(crate) struct Needles<'a> {
    list: Vec<(&'a [u8], Hit)>,
}

impl std::fmt::Debug for Needles<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.list.iter().map(|(_, h)| h)).finish()
    }
}

impl<'a> Needles<'a> {
    /// Search for these needles (empty ones are ignored).
    pub(crate) fn new(list: Vec<(&'a [u8], Hit)>) -> Self {
        Self {
            list: list.into_iter().filter(|(n, _)| !n.is_empty()).collect(),
        }
    }

    /// The length of the longest needle.
    fn max_len(&self) -> usize {
        self.list.iter().map(|(n, _)| n.len()).max().unwrap_or(0)
    }

    /// Every needle in `hay`, as (offset, hit), in order and not overlapping; at one offset the longest needle
    /// wins.
    pub(crate) fn find_all(&self, hay: &[u8]) -> Vec<(usize, Hit)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < hay.len() {
            let best = self
                .list
                .iter()
                .filter_map(|(n, h)| find(&hay[i..], n).map(|p| (p, n.len(), *h)))
                .min_by_key(|&(p, len, _)| (p, usize::MAX - len));
            let Some((p, len, hit)) = best else { break };
            out.push((i + p, hit));
            i += p + len;
        }
        out
    }

    /// The hits in `hay`, in order.
    pub(crate) fn hits(&self, hay: &[u8]) -> Vec<Hit> {
        self.find_all(hay).into_iter().map(|(_, h)| h).collect()
    }

    /// Whether `t` is a proper prefix of some needle.
    fn could_start(&self, t: &[u8]) -> bool {
        self.list
            .iter()
            .any(|(n, _)| n.len() > t.len() && n.starts_with(t))
    }
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

/// A streaming detector: feed chunks, get back the bytes that are safe to pass on.
///
/// Only a tail that could still become a needle is held back, so ordinary traffic never waits; the caller may
/// [`Detector::flush`] even that tail after a pause. Released bytes are remembered (the longest needle minus one
/// byte), so a needle straddling released bytes is still recognised when its last byte arrives: the other side
/// never receives a complete needle. `Debug` shows no bytes (the held tail may be most of a secret value).
#[derive(Default)]
pub(crate) struct Detector<'a> {
    needles: Needles<'a>,
    max: usize,
    history: Vec<u8>,
    held: Vec<u8>,
}

impl std::fmt::Debug for Detector<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("needles", &self.needles)
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Detector<'a> {
    /// A detector of these needles.
    pub(crate) fn new(needles: Needles<'a>) -> Self {
        let max = needles.max_len();
        Self {
            needles,
            max,
            history: Vec::new(),
            held: Vec::new(),
        }
    }

    /// Scan `chunk`. `Err(hit)`: a needle was completed; its last byte was not released. `Ok(bytes)`: the bytes
    /// that can be passed on now.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<Vec<u8>, Hit> {
        let h = self.history.len();
        let mut window = Vec::with_capacity(h + self.held.len() + chunk.len());
        window.extend_from_slice(&self.history);
        window.extend_from_slice(&self.held);
        window.extend_from_slice(chunk);
        if let Some((_, hit)) = self.needles.find_all(&window).first() {
            return Err(*hit);
        }
        let fresh = window.len() - h;
        let keep = (1..=fresh.min(self.max.saturating_sub(1)))
            .rev()
            .find(|&k| self.needles.could_start(&window[window.len() - k..]))
            .unwrap_or(0);
        self.held = window[window.len() - keep..].to_vec();
        let released = window[h..window.len() - keep].to_vec();
        self.remember(&window[..window.len() - keep]);
        Ok(released)
    }

    fn remember(&mut self, sent: &[u8]) {
        let keep = sent.len().min(self.max.saturating_sub(1));
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
/// The pairs are borrowed, so secret values are not copied (and `Debug` shows their number only).
pub(crate) struct Replacer<'a> {
    pairs: &'a [(&'a [u8], &'a [u8])],
    max: usize,
    carry: Vec<u8>,
    /// Replacements made so far.
    pub(crate) replaced: usize,
}

impl std::fmt::Debug for Replacer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replacer")
            .field("pairs", &self.pairs.len())
            .field("replaced", &self.replaced)
            .finish_non_exhaustive()
    }
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
    const V: &str = "ghp_realvalue";

    fn needles() -> Needles<'static> {
        Needles::new(vec![
            (P.as_bytes(), Hit::Placeholder(0)),
            (V.as_bytes(), Hit::Value(0)),
        ])
    }

    fn check_find(hay: &str, expect: &[(usize, Hit)]) {
        assert_eq!(needles().find_all(hay.as_bytes()), expect, "{hay}");
    }

    #[test]
    fn finds_known_needles_only() {
        use Hit::{Placeholder, Value};
        check_find(P, &[(0, Placeholder(0))]);
        check_find(&format!("Bearer {P}"), &[(7, Placeholder(0))]);
        check_find(&format!("{P}{P}"), &[(0, Placeholder(0)), (43, Placeholder(0))]);
        check_find("iterion-ph-ffffffffffffffffffffffffffffffff", &[]);
        check_find(&P[..42], &[]);
        check_find(&format!("iterion-ph-{P}"), &[(11, Placeholder(0))]);
        check_find(
            &format!("token={V}&p={P}"),
            &[(6, Value(0)), (22, Placeholder(0))],
        );
        check_find(&V[..12], &[]);
    }

    #[test]
    fn detector_finds_a_needle_split_across_chunks() {
        for (text, hit, start) in [
            (format!("xxxxxxxx{P}yyyy"), Hit::Placeholder(0), "iterion-ph-0"),
            (format!("xxxxxxxx{V}yyyy"), Hit::Value(0), "ghp_"),
        ] {
            for split in 0..text.len() {
                let mut d = Detector::new(needles());
                let a = d.feed(&text.as_bytes()[..split]);
                let b = a.clone().and_then(|_| d.feed(&text.as_bytes()[split..]));
                assert_eq!(b, Err(hit), "split {split}");
                // Nothing of the needle was released before it was recognised.
                if let Ok(released) = a {
                    assert!(
                        !String::from_utf8_lossy(&released).contains(start),
                        "split {split}"
                    );
                }
            }
        }
        let mut d = Detector::new(needles());
        // Ordinary bytes are released at once; only a possible needle start is held back.
        assert_eq!(
            d.feed(b"GET / HTTP/1.1\r\n\r\n"),
            Ok(b"GET / HTTP/1.1\r\n\r\n".to_vec())
        );
        assert!(!d.holding());
        let mut out = d.feed(b"hello iterion-ph-").unwrap_or_default();
        assert_eq!(out, b"hello ");
        assert!(d.holding());
        out.extend(d.feed(b"zz").unwrap_or_default());
        out.extend(d.flush());
        assert_eq!(out, b"hello iterion-ph-zz");
        // A needle whose start was flushed after a pause is still recognised when it completes.
        let mut d = Detector::new(needles());
        assert_eq!(d.feed(b"x iterion-ph-0123"), Ok(b"x ".to_vec()));
        assert_eq!(d.flush(), b"iterion-ph-0123");
        assert_eq!(d.feed(&P.as_bytes()[15..]), Err(Hit::Placeholder(0)));
        let mut d = Detector::new(needles());
        assert_eq!(d.feed(b"a ghp_real"), Ok(b"a ".to_vec()));
        assert_eq!(d.flush(), b"ghp_real");
        assert_eq!(d.feed(b"value"), Err(Hit::Value(0)));
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
