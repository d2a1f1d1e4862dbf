//! "Did you mean …?": the closest known word to a misspelt one (optimal string alignment distance, so a swap
//! of two neighbours counts once), when it is close enough to be the likely intent.

/// The candidate closest to `word`, when its distance is at most 2 and at most a third of `word`'s length
/// (rounded up), so `sandbx` → `sandbox` and `don` → `done`; a word under 3 characters suggests nothing. Ties
/// go to the first.
pub fn closest<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let len = word.chars().count();
    if len < 3 {
        return None;
    }
    let limit = 2.min(len.div_ceil(3));
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| (distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal string alignment distance over characters.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(word: &str, candidates: &[&str], expect: Option<&str>) {
        assert_eq!(closest(word, candidates.iter().copied()), expect, "{word}");
    }

    #[test]
    fn close_words_are_suggested_and_far_ones_are_not() {
        let props = ["sandbox", "network", "worktree", "entry", "model"];
        check("sandbx", &props, Some("sandbox"));
        check("netwrok", &props, Some("network"));
        check("worktre", &props, Some("worktree"));
        check("entry", &props, None);
        check("banana", &props, None);
        check("mdl", &props, None);
        check("don", &["done", "fail", "review"], Some("done"));
        check("ab", &["ac"], None);
        check("", &["a"], None);
    }
}
