//! Durations as the workflow language writes them (`90s`, `1h30m`, `1.5h`, `250ms`): the one parser, for
//! `budget.max_duration`, the `ITERION_SANDBOX_*_TIMEOUT` bounds and `--timeout`.
//!
//! The grammar is Go's: one or more `<number><unit>`, where a number is decimal digits with an optional
//! fraction (`1.5`, `.5`, `1.`) and a unit is `ns`, `us`, `µs`, `ms`, `s`, `m` or `h`. Nothing else is
//! accepted: no sign, no exponent, no spaces between the parts, no bare number.
//!
//! Two strictness levels:
//! - [`parse`]: the language (`budget.max_duration`): zero is a duration, the text is taken as written.
//! - [`parse_positive`]: a bound (a timer): surrounding spaces are ignored, zero is refused, and so is a
//!   duration that does not fit in a `u64` of nanoseconds (about 584 years).
//!
//! ```
//! use std::time::Duration;
//! use iterion_spec::duration::{parse, parse_positive};
//! assert_eq!(parse("1h30m"), Some(Duration::from_secs(5400)));
//! assert_eq!(parse("0s"), Some(Duration::ZERO));
//! assert_eq!(parse_positive(" 0s "), None);
//! assert_eq!(parse_positive(" 250ms "), Some(Duration::from_millis(250)));
//! assert_eq!(parse("90 minutes"), None);
//! ```

use std::time::Duration;

/// The units, with their length in nanoseconds.
const UNITS: [(&str, f64); 7] = [
    ("ns", 1.0),
    ("us", 1e3),
    ("µs", 1e3),
    ("ms", 1e6),
    ("s", 1e9),
    ("m", 60e9),
    ("h", 3600e9),
];

/// The largest total accepted, in nanoseconds (exclusive).
const MAX_NANOS: f64 = 1e30;

/// Parses a duration of the language; `None` when the text is not one. Zero is accepted. A duration longer
/// than [`Duration::MAX`] (but under 10^30 ns) is accepted and saturates.
pub fn parse(s: &str) -> Option<Duration> {
    parse_nanos(s).map(duration_of_nanos)
}

/// Parses a bound: `s` trimmed, then [`parse`]; `None` also for zero and for a duration over `u64::MAX`
/// nanoseconds.
pub fn parse_positive(s: &str) -> Option<Duration> {
    let nanos = u64::try_from(parse_nanos(s.trim())?).ok()?;
    (nanos > 0).then(|| Duration::from_nanos(nanos))
}

/// [`parse`] in whole nanoseconds, exact (the model keeps `budget.max_duration` this way): the sum of the
/// parts computed in `f64` nanoseconds, truncated.
pub(crate) fn parse_nanos(s: &str) -> Option<u128> {
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        if n == 0 {
            return None;
        }
        let num: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        // longest unit first so that "ms" is not read as "m"
        let (unit, mult) = UNITS
            .iter()
            .filter(|(u, _)| rest.starts_with(u))
            .max_by_key(|(u, _)| u.len())?;
        rest = &rest[unit.len()..];
        total += num * mult;
    }
    (total.is_finite() && total < MAX_NANOS).then_some(total as u128)
}

/// Whole nanoseconds as a [`Duration`], saturating at [`Duration::MAX`].
fn duration_of_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SEC) {
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: u128 = 1;
    const S: u128 = 1_000_000_000;

    fn check(s: &str, expect: Option<u128>) {
        assert_eq!(parse_nanos(s), expect, "parse_nanos {s:?}");
        let d = expect.map(duration_of_nanos);
        assert_eq!(parse(s), d, "parse {s:?}");
    }

    #[test]
    fn forms() {
        check("90s", Some(90 * S));
        check("30m", Some(1800 * S));
        check("1h30m", Some(5400 * S));
        check("1.5h", Some(5400 * S));
        check("250ms", Some(250_000_000 * NS));
        check("10µs", Some(10_000 * NS));
        check("10us", Some(10_000 * NS));
        check("7ns", Some(7 * NS));
        check(".5s", Some(S / 2));
        check("1.s", Some(S));
        check("1h1m1s1ms1us1ns", Some(3661 * S + 1_001_001));
        check("2m2m", Some(240 * S));
        check("0s", Some(0));
        check("0.0000000001ns", Some(0));
    }

    #[test]
    fn refused() {
        for s in [
            "",
            "5",
            "m",
            "s5",
            "90 minutes",
            "1h 30m",
            " 1s",
            "1s ",
            "-1s",
            "+1s",
            "1e3s",
            "1.2.3s",
            ".s",
            "1d",
            "1H",
            "1sec",
            "5x",
        ] {
            check(s, None);
        }
    }

    #[test]
    fn limits() {
        // the language accepts up to 10^30 ns; past Duration::MAX the Duration saturates
        let huge = "1000000000000000000000s"; // 10^21 s = 10^30 ns, not below the limit
        check(huge, None);
        let big = "100000000000000000000s"; // 10^20 s
        assert!(parse_nanos(big).is_some_and(|n| n > Duration::MAX.as_nanos()));
        assert_eq!(parse(big), Some(Duration::MAX));
        assert_eq!(parse_positive(big), None);
    }

    #[test]
    fn positive() {
        let check = |s: &str, expect: Option<Duration>| assert_eq!(parse_positive(s), expect, "{s:?}");
        check("90s", Some(Duration::from_secs(90)));
        check("  10m\t", Some(Duration::from_secs(600)));
        check("1ns", Some(Duration::from_nanos(1)));
        check("0s", None);
        check("0.1ns", None);
        check("", None);
        check("   ", None);
        check("5", None);
        // u64::MAX ns is 18446744073.709551615 s: 5124095h fits, 5124096h does not
        check("5124095h", Some(Duration::from_secs(5_124_095 * 3600)));
        check("5124096h", None);
    }
}
