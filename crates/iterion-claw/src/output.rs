//! Output parsing of the final text, and the check of an object against the task's output schema.

use serde_json::{Map, Value};

/// The node output from the final text: the text itself when it is a JSON object, else a fenced `json` block
/// holding an object, else the outermost balanced `{…}` that parses; `None` when none applies.
pub fn parse_object(text: &str) -> Option<Map<String, Value>> {
    let as_obj = |s: &str| match serde_json::from_str::<Value>(s.trim()) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    };
    if let Some(m) = as_obj(text) {
        return Some(m);
    }
    if let Some(start) = text.find("```json") {
        let rest = &text[start + 7..];
        if let Some(end) = rest.find("```")
            && let Some(m) = as_obj(&rest[..end])
        {
            return Some(m);
        }
    }
    outermost_braces(text).and_then(as_obj)
}

/// The first `{` to its balanced `}` (string-aware), tried from each `{` in turn.
fn outermost_braces(text: &str) -> Option<&str> {
    for (start, _) in text.match_indices('{') {
        let (mut depth, mut in_str, mut esc) = (0i32, false, false);
        for (i, c) in text[start..].char_indices() {
            match c {
                _ if esc => esc = false,
                '\\' if in_str => esc = true,
                '"' => in_str = !in_str,
                '{' if !in_str => depth += 1,
                '}' if !in_str => {
                    depth -= 1;
                    if depth == 0 {
                        let cand = &text[start..start + i + 1];
                        if serde_json::from_str::<Value>(cand).is_ok() {
                            return Some(cand);
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// Whether `obj` satisfies the parts of `schema` that decide usability: every `required` property present, and
/// each present property of the declared JSON `type`.
pub fn conforms(obj: &Map<String, Value>, schema: &Value) -> bool {
    let required = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    if required.into_iter().any(|k| !obj.contains_key(k)) {
        return false;
    }
    let Some(props) = schema["properties"].as_object() else {
        return true;
    };
    props.iter().all(|(k, s)| match (obj.get(k), &s["type"]) {
        (Some(v), Value::String(t)) => has_type(v, t),
        (Some(v), Value::Array(ts)) => ts.iter().filter_map(Value::as_str).any(|t| has_type(v, t)),
        _ => true,
    })
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "null" => v.is_null(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parsing_rule() {
        assert_eq!(parse_object(r#" {"a": 1} "#).unwrap()["a"], json!(1));
        assert_eq!(
            parse_object("Here:\n```json\n{\"a\": 2}\n```\nbye").unwrap()["a"],
            json!(2)
        );
        assert_eq!(
            parse_object(r#"so {"a": "}{", "b": {"c": 3}} done"#).unwrap()["b"],
            json!({"c": 3})
        );
        assert_eq!(parse_object("{bad} then {\"a\": 4}").unwrap()["a"], json!(4));
        assert!(parse_object("[1, 2]").is_none());
        assert!(parse_object("no json").is_none());
    }

    #[test]
    fn schema_check() {
        let s = json!({"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}, "n": {"type": ["integer", "null"]}}});
        let m = |v: Value| v.as_object().unwrap().clone();
        assert!(conforms(&m(json!({"ok": true})), &s));
        assert!(conforms(&m(json!({"ok": true, "n": null})), &s));
        assert!(!conforms(&m(json!({"n": 1})), &s));
        assert!(!conforms(&m(json!({"ok": "yes"})), &s));
        assert!(!conforms(&m(json!({"ok": true, "n": 1.5})), &s));
    }
}
