//! What a human node takes as answers: the fields of its declared output schema, a typed value read from the
//! text a person typed, and the check of the answers a resume brings.
//!
//! A human node without an output schema takes any keys, kept as given (string answers stay strings). With
//! one, the answers must be exactly its fields: a text answer is read by the field's type (`true`/`false`,
//! numbers, a list, one of an enum), a typed answer must have the field's type, and an unknown or missing key
//! is refused with the keys the node takes.
use iterion_spec::model::{NodeKind, VarType, Workflow};
use serde::Serialize;
use serde_json::{Map, Value};

/// One answer a human node takes: a field of its output schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnswerField {
    /// The key.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub ty: VarType,
    /// The values a string field may take, when the schema lists them.
    #[serde(rename = "enum", skip_serializing_if = "Option::is_none")]
    pub enum_values: Option<Vec<String>>,
}

impl AnswerField {
    /// `approved (bool)`, `level (one of low, high)`.
    pub fn describe(&self) -> String {
        match &self.enum_values {
            Some(values) => format!("{} (one of {})", self.name, values.join(", ")),
            None => format!("{} ({})", self.name, self.ty.as_str()),
        }
    }

    /// What a person should type, for a prompt: `true/false`, `a number`, `a, b, c`.
    pub fn expected(&self) -> String {
        if let Some(values) = &self.enum_values {
            return values.join("/");
        }
        match self.ty {
            VarType::String => "text".into(),
            VarType::Bool => "true/false".into(),
            VarType::Int => "a whole number".into(),
            VarType::Float => "a number".into(),
            VarType::Json => "a JSON value".into(),
            VarType::StringList => "items separated by commas, or a JSON list".into(),
        }
    }

    /// The typed value of an answer given as text (typed at the terminal, or `--answer KEY=VALUE`).
    pub fn parse(&self, text: &str) -> Result<Value, String> {
        let t = text.trim();
        let bad = |what: &str| format!("'{}' takes {what}, not '{text}'", self.name);
        let v = match self.ty {
            VarType::String => Value::String(text.to_string()),
            VarType::Bool => match t.to_ascii_lowercase().as_str() {
                "true" | "yes" | "y" | "on" | "1" => Value::Bool(true),
                "false" | "no" | "n" | "off" | "0" => Value::Bool(false),
                _ => return Err(bad("true or false (yes/no)")),
            },
            VarType::Int => t
                .strip_prefix('+')
                .unwrap_or(t)
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| bad("a whole number"))?,
            VarType::Float => t
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| bad("a number"))?,
            VarType::Json => {
                serde_json::from_str(t).map_err(|e| format!("'{}' takes a JSON value: {e}", self.name))?
            }
            VarType::StringList => match serde_json::from_str::<Value>(t) {
                Ok(Value::Array(items)) => Value::Array(items),
                _ => Value::from(
                    t.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect::<Vec<_>>(),
                ),
            },
        };
        self.check(v)
    }

    /// A typed answer: of the field's type (a string is read as text), and one of the enum when there is one.
    pub fn check(&self, v: Value) -> Result<Value, String> {
        let v = match (self.ty, v) {
            (VarType::String, Value::String(s)) => Value::String(s),
            (VarType::Json, v) => v,
            (_, Value::String(s)) => return self.parse(&s),
            (VarType::Bool, Value::Bool(b)) => Value::Bool(b),
            (VarType::Int, Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n),
            (VarType::Float, Value::Number(n)) => Value::Number(n),
            (VarType::StringList, Value::Array(items)) if items.iter().all(Value::is_string) => {
                Value::Array(items)
            }
            (_, other) => {
                return Err(format!(
                    "'{}' takes {} ({}), not {other}",
                    self.name,
                    self.ty.as_str(),
                    self.expected()
                ));
            }
        };
        if let (Some(values), Value::String(s)) = (&self.enum_values, &v)
            && !values.contains(s)
        {
            return Err(format!(
                "'{}' takes one of {}, not '{s}'",
                self.name,
                values.join(", ")
            ));
        }
        Ok(v)
    }
}

/// The answers human node `node_id` takes: the fields of its output schema, in declaration order; empty when
/// it is not a human node or declares no output schema (then any keys are taken as given).
pub fn answer_fields(workflow: &Workflow, node_id: &str) -> Vec<AnswerField> {
    let Some(node) = workflow.node(node_id).filter(|n| n.kind == NodeKind::Human) else {
        return Vec::new();
    };
    let Some(schema) = node.output.as_ref().and_then(|o| workflow.schema(&o.value)) else {
        return Vec::new();
    };
    schema
        .fields
        .iter()
        .map(|f| AnswerField {
            name: f.name.value.clone(),
            ty: f.ty,
            enum_values: f.enum_values.clone(),
        })
        .collect()
}

/// The answers checked against `fields` and typed (see the module); unchanged when `fields` is empty. The
/// error names every key that is wrong and the keys the node takes.
pub fn check_answers(
    fields: &[AnswerField],
    answers: Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    if fields.is_empty() {
        return Ok(answers);
    }
    let takes = || {
        fields
            .iter()
            .map(AnswerField::describe)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let missing: Vec<&str> = fields
        .iter()
        .filter(|f| !answers.contains_key(&f.name))
        .map(|f| f.name.as_str())
        .collect();
    let mut problems = Vec::new();
    let mut out = Map::new();
    for (k, v) in answers {
        match fields.iter().find(|f| f.name == k) {
            Some(f) => match f.check(v) {
                Ok(v) => {
                    out.insert(k, v);
                }
                Err(e) => problems.push(e),
            },
            None => problems.push(format!("'{k}' is not an answer this node takes")),
        }
    }
    if !missing.is_empty() {
        problems.push(format!("no answer for {}", missing.join(", ")));
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(format!("{}; the node takes {}", problems.join("; "), takes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(name: &str, ty: VarType) -> AnswerField {
        AnswerField {
            name: name.into(),
            ty,
            enum_values: None,
        }
    }

    fn fields() -> Vec<AnswerField> {
        vec![
            field("approved", VarType::Bool),
            field("note", VarType::String),
            field("score", VarType::Int),
            AnswerField {
                name: "level".into(),
                ty: VarType::String,
                enum_values: Some(vec!["low".into(), "high".into()]),
            },
        ]
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn text_answers_are_read_by_their_type() {
        let f = fields();
        assert_eq!(f[0].parse("yes"), Ok(json!(true)));
        assert_eq!(f[0].parse(" False "), Ok(json!(false)));
        assert!(f[0].parse("maybe").unwrap_err().contains("true or false"));
        assert_eq!(f[1].parse("true"), Ok(json!("true")));
        assert_eq!(f[2].parse("+42"), Ok(json!(42)));
        assert!(f[2].parse("4.2").is_err());
        assert_eq!(f[3].parse("high"), Ok(json!("high")));
        assert!(f[3].parse("medium").unwrap_err().contains("one of low, high"));
        let list = field("files", VarType::StringList);
        assert_eq!(list.parse("a, b,,c"), Ok(json!(["a", "b", "c"])));
        assert_eq!(list.parse(r#"["x y"]"#), Ok(json!(["x y"])));
        let float = field("f", VarType::Float);
        assert_eq!(float.parse("0.5"), Ok(json!(0.5)));
        assert!(float.parse("inf").is_err());
        let j = field("j", VarType::Json);
        assert_eq!(j.parse(r#"{"a":1}"#), Ok(json!({"a": 1})));
        assert!(j.parse("{").is_err());
    }

    #[test]
    fn resume_answers_are_typed_and_checked_against_the_schema() {
        let ok = check_answers(
            &fields(),
            map(json!({"approved": "true", "note": "fine", "score": 3, "level": "low"})),
        )
        .unwrap();
        assert_eq!(
            Value::Object(ok),
            json!({"approved": true, "note": "fine", "score": 3, "level": "low"})
        );
        let e = check_answers(
            &fields(),
            map(json!({"approved": "yes please", "extra": 1, "score": true})),
        )
        .unwrap_err();
        assert!(e.contains("'approved' takes true or false"), "{e}");
        assert!(e.contains("'extra' is not an answer this node takes"), "{e}");
        assert!(e.contains("'score' takes int"), "{e}");
        assert!(e.contains("no answer for note, level"), "{e}");
        assert!(e.contains("the node takes approved (bool), note (string)"), "{e}");
    }

    #[test]
    fn without_a_schema_answers_are_kept_as_given() {
        let a = map(json!({"anything": "true", "n": 1}));
        assert_eq!(check_answers(&[], a.clone()), Ok(a));
    }
}
