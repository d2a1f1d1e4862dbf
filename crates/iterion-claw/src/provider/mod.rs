//! Model providers: which wire format and endpoint a task's model uses, the provider-neutral conversation
//! types, and one HTTP client that sends a request (streaming or not) with bounded retries.
//!
//! Choice rule: the task's `provider_hint` if set, else the model prefix before `/` (removed from the model),
//! else `anthropic` for models starting with `claude`, else `openai`. `anthropic` speaks the Messages API,
//! `openai` and every name of [`COMPATIBLE`] speak Chat Completions.

mod anthropic;
mod http;
mod openai;
mod sse;

pub use http::{Client, Retry, RetryPolicy, trust_file_roots};

use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::BTreeMap;

/// The two wire formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Anthropic Messages API (`POST {base}/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`POST {base}/chat/completions`).
    OpenAi,
}

/// An OpenAI-compatible provider: its names (hint or model prefix), default base URL and key variable.
#[derive(Debug, Clone, Copy)]
pub struct Compatible {
    /// Names that select it, as `provider_hint` or model prefix.
    pub names: &'static [&'static str],
    /// Default base URL (the Chat Completions path is appended).
    pub base_url: &'static str,
    /// Variable of the env map holding the API key.
    pub key_var: &'static str,
}

/// OpenAI-compatible providers beyond `openai` itself.
pub const COMPATIBLE: &[Compatible] = &[
    Compatible {
        names: &["kimi", "moonshot"],
        base_url: "https://api.moonshot.ai/v1",
        key_var: "MOONSHOT_API_KEY",
    },
    Compatible {
        names: &["grok", "xai"],
        base_url: "https://api.x.ai/v1",
        key_var: "XAI_API_KEY",
    },
    Compatible {
        names: &["groq"],
        base_url: "https://api.groq.com/openai/v1",
        key_var: "GROQ_API_KEY",
    },
    Compatible {
        names: &["deepseek"],
        base_url: "https://api.deepseek.com/v1",
        key_var: "DEEPSEEK_API_KEY",
    },
    Compatible {
        names: &["mistral"],
        base_url: "https://api.mistral.ai/v1",
        key_var: "MISTRAL_API_KEY",
    },
];

/// Default Anthropic endpoint (`ANTHROPIC_BASE_URL` overrides it).
pub const ANTHROPIC_DEFAULT_BASE: &str = "https://api.anthropic.com";
/// Default OpenAI endpoint (`OPENAI_BASE_URL` overrides it).
pub const OPENAI_DEFAULT_BASE: &str = "https://api.openai.com/v1";

/// A resolved provider: everything needed to address it.
#[derive(Clone, PartialEq, Eq)]
pub struct Provider {
    /// The provider's name (`anthropic`, `openai`, `groq`, …).
    pub name: String,
    /// Its wire format.
    pub wire: Wire,
    /// The model id sent, provider prefix removed.
    pub model: String,
    /// Base URL without trailing `/`.
    pub base_url: String,
    /// API key (never printed by `Debug`).
    pub api_key: String,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("wire", &self.wire)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// The provider name and the model id sent, by the choice rule (no env needed).
pub fn choose(hint: &str, model: &str) -> (String, String) {
    let hint = hint.trim();
    if !hint.is_empty() {
        let stripped = model
            .split_once('/')
            .filter(|(p, _)| p.eq_ignore_ascii_case(hint))
            .map_or(model, |(_, m)| m);
        return (hint.to_ascii_lowercase(), stripped.to_string());
    }
    if let Some((prefix, rest)) = model.split_once('/')
        && known(prefix)
    {
        return (prefix.to_ascii_lowercase(), rest.to_string());
    }
    if model.starts_with("claude") {
        ("anthropic".into(), model.to_string())
    } else {
        ("openai".into(), model.to_string())
    }
}

/// Whether `name` (a provider hint or model prefix, any case) is a provider the runner speaks: `anthropic`,
/// `openai` or a name of [`COMPATIBLE`].
pub fn supported(name: &str) -> bool {
    known(name)
}

fn known(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "anthropic" || n == "openai" || COMPATIBLE.iter().any(|c| c.names.contains(&n.as_str()))
}

/// Where a named provider is addressed: wire, base URL variable (when it can be overridden), default base URL
/// and key variable.
fn endpoint(name: &str) -> (Wire, Option<&'static str>, &'static str, &'static str) {
    match name {
        "anthropic" => (
            Wire::Anthropic,
            Some("ANTHROPIC_BASE_URL"),
            ANTHROPIC_DEFAULT_BASE,
            "ANTHROPIC_API_KEY",
        ),
        other => match COMPATIBLE.iter().find(|c| c.names.contains(&other)) {
            Some(c) => (Wire::OpenAi, None, c.base_url, c.key_var),
            // `openai`, or an unknown name: an OpenAI-compatible endpoint configured through the OpenAI
            // variables
            None => (
                Wire::OpenAi,
                Some("OPENAI_BASE_URL"),
                OPENAI_DEFAULT_BASE,
                "OPENAI_API_KEY",
            ),
        },
    }
}

/// The variables of the env map that [`resolve`] reads for this hint and model: the chosen provider's key
/// variable and, where it has one, its base URL variable. The launcher hands the runner these and no other
/// provider variable.
pub fn env_vars(hint: &str, model: &str) -> Vec<&'static str> {
    let (name, _) = choose(hint, model);
    let (_, base_var, _, key_var) = endpoint(&name);
    base_var.into_iter().chain([key_var]).collect()
}

/// Every variable any provider reads (keys and base URLs), whatever the task: what the runner keeps from its
/// tools.
pub fn all_env_vars() -> Vec<&'static str> {
    let mut vars = vec![
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ];
    vars.extend(COMPATIBLE.iter().map(|c| c.key_var));
    vars
}

/// Resolves the provider of a task from its hint and model, taking base URLs and keys from `env`.
pub fn resolve(hint: &str, model: &str, env: &BTreeMap<String, String>) -> Result<Provider> {
    let (name, model) = choose(hint, model);
    let get = |k: &str| env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let (wire, base_var, default_base, key_var) = endpoint(&name);
    let base = base_var.and_then(get).unwrap_or(default_base);
    let api_key = get(key_var)
        .ok_or_else(|| Error::MissingKey {
            provider: name.clone(),
            variable: key_var.into(),
        })?
        .to_string();
    Ok(Provider {
        name,
        wire,
        model,
        base_url: base.trim_end_matches('/').to_string(),
        api_key,
    })
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: Value,
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallReq {
    /// The provider's call id, echoed in the result.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed arguments (an object; `{}` when the model sent none).
    pub input: Value,
}

/// The result of one tool call, sent back to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultMsg {
    /// The call id it answers.
    pub id: String,
    /// Result text.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A user message.
    User(String),
    /// A model turn: text and tool calls.
    Assistant {
        /// The text of the turn.
        text: String,
        /// Tool calls it requested.
        tool_calls: Vec<ToolCallReq>,
    },
    /// Results of the previous turn's tool calls.
    ToolResults(Vec<ToolResultMsg>),
}

/// A model request, provider-neutral.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Request {
    /// System prompt (may be empty).
    pub system: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
    /// Output limit per call (0: the default of [`DEFAULT_MAX_TOKENS`]).
    pub max_tokens: u64,
    /// Whether to stream the answer (SSE).
    pub stream: bool,
    /// The task's `reasoning_effort`, sent as is to Chat Completions when set (the Messages API has no such
    /// field; it is not sent there).
    pub reasoning_effort: String,
}

/// Output limit when the task sets none (the Messages API requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Stop {
    /// It ended its turn.
    #[default]
    EndTurn,
    /// It wants tool results.
    ToolUse,
    /// The output limit was reached.
    MaxTokens,
    /// Another provider-specific reason.
    Other(String),
}

/// Token usage of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// One model answer, provider-neutral; streaming and non-streaming calls produce the same `Turn`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Turn {
    /// Concatenated text.
    pub text: String,
    /// Requested tool calls, in order.
    pub tool_calls: Vec<ToolCallReq>,
    /// Why it stopped.
    pub stop: Stop,
    /// Token usage.
    pub usage: Usage,
}

/// The conversation as a session snapshot: a JSON array of `{role, content: [blocks…]}` messages.
pub fn snapshot(system: &str, messages: &[Message]) -> Value {
    let msgs: Vec<Value> = messages.iter().map(anthropic::message).collect();
    serde_json::json!({"system": system, "messages": msgs})
}

/// Parses a tool call's argument text; empty text is `{}`.
pub(crate) fn parse_arguments(provider: &str, text: &str) -> Result<Value> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text).map_err(|e| Error::Malformed {
        provider: provider.into(),
        message: format!("tool call arguments are not JSON: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_provider_reads_only_its_own_variables() {
        let check = |hint: &str, model: &str, expect: &[&str]| {
            let vars = env_vars(hint, model);
            assert_eq!(vars, expect, "{hint:?} {model:?}");
            // what resolve reads is exactly that: with only those set it resolves, with every other
            // provider variable set and those missing it does not
            let only: BTreeMap<String, String> =
                vars.iter().map(|v| (v.to_string(), "http://x".into())).collect();
            resolve(hint, model, &only).expect("resolves from its own variables");
            let others: BTreeMap<String, String> = all_env_vars()
                .into_iter()
                .filter(|v| !vars.contains(v))
                .map(|v| (v.to_string(), "http://x".into()))
                .collect();
            assert!(resolve(hint, model, &others).is_err(), "{hint:?} {model:?}");
            assert!(vars.iter().all(|v| all_env_vars().contains(v)));
        };
        check("", "claude-x", &["ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"]);
        check("", "gpt-5", &["OPENAI_BASE_URL", "OPENAI_API_KEY"]);
        check("", "groq/llama", &["GROQ_API_KEY"]);
        check("kimi", "k2", &["MOONSHOT_API_KEY"]);
        check("somewhere", "m", &["OPENAI_BASE_URL", "OPENAI_API_KEY"]);
    }

    #[test]
    fn choice_rule() {
        assert_eq!(
            choose("", "claude-sonnet-4"),
            ("anthropic".into(), "claude-sonnet-4".into())
        );
        assert_eq!(choose("", "gpt-5"), ("openai".into(), "gpt-5".into()));
        assert_eq!(
            choose("", "anthropic/claude-x"),
            ("anthropic".into(), "claude-x".into())
        );
        assert_eq!(
            choose("", "openai/claude-like"),
            ("openai".into(), "claude-like".into())
        );
        assert_eq!(choose("openai", "claude-x"), ("openai".into(), "claude-x".into()));
        assert_eq!(
            choose("anthropic", "anthropic/claude-x"),
            ("anthropic".into(), "claude-x".into())
        );
        assert_eq!(choose("", "groq/llama-3"), ("groq".into(), "llama-3".into()));
        // an unknown prefix is part of the model id
        assert_eq!(
            choose("", "meta-llama/Llama-3"),
            ("openai".into(), "meta-llama/Llama-3".into())
        );
    }

    #[test]
    fn resolve_uses_env_map() {
        let p = resolve(
            "",
            "claude-x",
            &env(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", "http://h:1/")]),
        )
        .unwrap();
        assert_eq!(
            (p.wire, p.base_url.as_str(), p.api_key.as_str()),
            (Wire::Anthropic, "http://h:1", "k")
        );
        let p = resolve("", "gpt-5", &env(&[("OPENAI_API_KEY", "o")])).unwrap();
        assert_eq!(p.base_url, OPENAI_DEFAULT_BASE);
        let p = resolve("", "deepseek/deepseek-chat", &env(&[("DEEPSEEK_API_KEY", "d")])).unwrap();
        assert_eq!(
            (p.wire, p.base_url.as_str(), p.model.as_str()),
            (Wire::OpenAi, "https://api.deepseek.com/v1", "deepseek-chat")
        );
        let p = resolve("moonshot", "kimi-k2", &env(&[("MOONSHOT_API_KEY", "m")])).unwrap();
        assert_eq!(p.base_url, "https://api.moonshot.ai/v1");
        let e = resolve("", "gpt-5", &env(&[("OPENAI_API_KEY", " ")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no API key for provider 'openai': set OPENAI_API_KEY"
        );
        assert!(!format!("{p:?}").contains("api_key"));
    }
}
