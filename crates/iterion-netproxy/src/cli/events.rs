//! `serve --events`: proxy events as JSON lines on a dedicated thread.

use super::common::context;
use crate::ProxyEvent;
use std::io::Write;
use std::time::Duration;

/// What the event writer receives: an event, or the end of the stream (written everything before it).
pub(super) enum EventLine {
    Event(Box<ProxyEvent>),
    Done,
}

/// How long the exit waits for the event writer (a consumer that stopped reading `--events -` cannot hold the
/// process).
pub(super) const EVENTS_FLUSH: Duration = Duration::from_secs(5);

/// Write events as JSON lines (`type`, `ts`, then the fields) on a dedicated thread, until [`EventLine::Done`].
pub(super) fn start_event_writer(
    target: &str,
    rx: std::sync::mpsc::Receiver<EventLine>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let mut sink: Box<dyn Write + Send> = if target == "-" {
        Box::new(std::io::stdout())
    } else {
        Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(target)
                .map_err(|e| context(format_args!("cannot open events file {target}"), &e))?,
        )
    };
    Ok(std::thread::spawn(move || {
        while let Ok(EventLine::Event(ev)) = rx.recv() {
            let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(&*ev) else {
                continue;
            };
            let mut line = serde_json::Map::new();
            if let Some(t) = fields.get("type") {
                line.insert("type".into(), t.clone());
            }
            line.insert("ts".into(), serde_json::Value::String(rfc3339_now()));
            for (k, v) in fields {
                if k != "type" {
                    line.insert(k, v);
                }
            }
            if writeln!(sink, "{}", serde_json::Value::Object(line))
                .and_then(|()| sink.flush())
                .is_err()
            {
                break;
            }
        }
    }))
}

/// The current time as RFC 3339 UTC with milliseconds.
fn rfc3339_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        let ts = rfc3339_now();
        assert_eq!(
            (ts.len(), &ts[4..5], &ts[10..11], &ts[23..]),
            (24, "-", "T", "Z"),
            "{ts}"
        );
    }
}
