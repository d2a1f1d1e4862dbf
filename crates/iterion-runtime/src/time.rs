//! Timestamps of `run.json` and `events.jsonl`: RFC 3339 in UTC.
use std::time::{SystemTime, UNIX_EPOCH};

/// Formats a time as RFC 3339 in UTC with `Z`, up to 9 fractional digits, trailing zeros of the fraction
/// removed (`2026-01-14T09:31:07.52Z`, `2026-01-14T09:31:07Z`). Times before 1970 are clamped to the epoch,
/// times past 9999-12-30T22:00Z (the end of the range of `jiff::Timestamp`) to that end.
pub fn format_timestamp(t: SystemTime) -> String {
    let t = jiff::Timestamp::try_from(t.max(UNIX_EPOCH)).unwrap_or(jiff::Timestamp::MAX);
    t.to_string()
}

/// The current time in the format of [`format_timestamp`].
pub fn now_timestamp() -> String {
    format_timestamp(SystemTime::now())
}

/// Parses an RFC 3339 time (any offset) as written in `run.json` and `events.jsonl`; `None` when invalid.
pub fn parse_timestamp(s: &str) -> Option<SystemTime> {
    let t: jiff::Timestamp = s.parse().ok()?;
    Some(SystemTime::from(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    fn check_ts(secs: u64, nanos: u32, expect: &str) {
        assert_eq!(format_timestamp(at(secs, nanos)), expect);
    }

    #[test]
    fn timestamps() {
        // ST7: 2026-01-14T09:31:07 UTC is 1768383067.
        check_ts(1_768_383_067, 520_000_000, "2026-01-14T09:31:07.52Z");
        check_ts(1_768_383_067, 0, "2026-01-14T09:31:07Z");
        check_ts(1_768_383_067, 1, "2026-01-14T09:31:07.000000001Z");
        check_ts(1_768_383_067, 123_456_789, "2026-01-14T09:31:07.123456789Z");
        check_ts(0, 0, "1970-01-01T00:00:00Z");
        check_ts(951_782_400, 0, "2000-02-29T00:00:00Z");
        check_ts(4_107_542_399, 0, "2100-02-28T23:59:59Z");
    }

    #[test]
    fn wire_format_is_pinned() {
        // The stored format: no offset other than `Z`, the fraction only as long as it needs to be.
        check_ts(1_768_383_067, 100_000_000, "2026-01-14T09:31:07.1Z");
        check_ts(1_768_383_067, 10_000, "2026-01-14T09:31:07.00001Z");
        check_ts(1_768_383_067, 999_999_999, "2026-01-14T09:31:07.999999999Z");
        check_ts(86_399, 0, "1970-01-01T23:59:59Z");
        check_ts(253_402_128_000, 0, "9999-12-30T00:00:00Z");
        assert_eq!(
            format_timestamp(UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn timestamps_parse_back() {
        for (secs, nanos) in [(1_768_383_067u64, 520_000_000u32), (0, 0), (1_768_383_067, 1)] {
            let t = at(secs, nanos);
            assert_eq!(parse_timestamp(&format_timestamp(t)), Some(t));
        }
        assert_eq!(
            parse_timestamp("2026-01-14T10:31:07+01:00"),
            Some(at(1_768_383_067, 0))
        );
        assert_eq!(parse_timestamp("yesterday"), None);
    }
}
