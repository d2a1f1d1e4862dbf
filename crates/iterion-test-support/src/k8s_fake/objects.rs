//! Object bookkeeping of the fake API server: metadata the server fills in (uid, resource version, RFC 3339
//! timestamps), label and field selectors, and the `Status` bodies of the usual refusals.

use serde_json::{Value, json};

use super::wire::status_body;

/// `2026-12-02T06:33:40Z` for the current time.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the epoch (UTC; the civil-from-days algorithm).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// A random-looking RFC 4122 style uid.
pub fn new_uid() -> String {
    let h = crate::conformance::unique_name();
    let hex = h.trim_start_matches("iterion-test-");
    let more = crate::conformance::unique_name();
    let more = more.trim_start_matches("iterion-test-");
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..15],
        &more[..3],
        &more[3..15]
    )
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// A parsed label selector (`k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated: all must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses `text`; `Err` for a set-based form the fake does not implement.
    pub fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part.contains(" in ") || part.contains(" notin ") || part.contains('(') {
                return Err(format!(
                    "label selector {part:?}: set-based requirements are not supported"
                ));
            }
            let r = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::Absent(k.trim().into())
            } else {
                Requirement::Exists(part.into())
            };
            out.push(r);
        }
        Ok(LabelSelector(out))
    }

    /// Whether `object`'s labels satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::Absent(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `metadata.name` and `metadata.namespace` equalities only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    name: Option<String>,
    namespace: Option<String>,
}

impl FieldSelector {
    /// Parses `text`; `Err` for a field the fake does not index.
    pub fn parse(text: &str) -> Result<FieldSelector, String> {
        let mut f = FieldSelector::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once("==")
                .or_else(|| part.split_once('='))
                .ok_or_else(|| format!("field selector {part:?}: only equalities are supported"))?;
            match k.trim() {
                "metadata.name" => f.name = Some(v.trim().into()),
                "metadata.namespace" => f.namespace = Some(v.trim().into()),
                other => return Err(format!("field label not supported: {other}")),
            }
        }
        Ok(f)
    }

    /// Whether `object` matches.
    pub fn matches(&self, object: &Value) -> bool {
        let m = &object["metadata"];
        self.name.as_deref().is_none_or(|n| m["name"].as_str() == Some(n))
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| m["namespace"].as_str() == Some(n))
    }
}

/// `404 NotFound` for `<plural> "<name>"`.
pub fn not_found(plural: &str, name: &str) -> Value {
    let mut s = status_body(404, "NotFound", &format!("{plural} \"{name}\" not found"));
    s["details"] = json!({"name": name, "kind": plural});
    s
}

/// `409 AlreadyExists` for `<plural> "<name>"`.
pub fn already_exists(plural: &str, name: &str) -> Value {
    let mut s = status_body(
        409,
        "AlreadyExists",
        &format!("{plural} \"{name}\" already exists"),
    );
    s["details"] = json!({"name": name, "kind": plural});
    s
}

/// A list object of `kind` (`PodList`, …) holding `items`.
pub fn list(kind: &str, api_version: &str, rv: u64, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": rv.to_string()},
           "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_764_657_220), "2025-12-02T06:33:40Z");
    }

    fn labelled(l: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "n", "labels": l}})
    }

    #[test]
    fn label_selectors() {
        let o = labelled(json!({"iterion.io/managed": "true", "a": "1"}));
        let check = |sel: &str, want: bool| {
            assert_eq!(LabelSelector::parse(sel).expect(sel).matches(&o), want, "{sel}")
        };
        check("iterion.io/managed=true", true);
        check("iterion.io/managed==true,a=1", true);
        check("a!=1", false);
        check("a,!b", true);
        check("b", false);
        check("", true);
        assert!(LabelSelector::parse("a in (1,2)").is_err());
    }

    #[test]
    fn field_selectors() {
        let o = labelled(json!({}));
        assert!(FieldSelector::parse("metadata.name=p").unwrap().matches(&o));
        assert!(!FieldSelector::parse("metadata.name=q").unwrap().matches(&o));
        assert!(
            FieldSelector::parse("metadata.namespace==n,metadata.name=p")
                .unwrap()
                .matches(&o)
        );
        assert!(FieldSelector::parse("status.phase=Running").is_err());
    }
}
