//! `mode: llm` routers: one model call through the router's backend picks the route (or, with `multi: true`,
//! the routes to fan out to).
use std::time::Instant;

use iterion_spec::model::{Edge, Node};
use iterion_spec::template::{EnvContext, expand_env};
use serde_json::{Map, Value, json};

use super::fanout::Fan;
use super::{Engine, scope, with_deadlines};
use crate::events::{EdgeSelected, NodeFinished, NodeKind as EvKind, NodeStarted, RunFailed};
use crate::exec::agent::run_claude_code;
use crate::exec::check::node_backend;
use crate::exec::claw::run_claw;
use crate::exec::context::ExecOutcome;
use crate::exec::node::{CallShape, NodeEnv, NodeRun};
use crate::failure::FailureCode;

/// The model of a router that names none, unless `ITERION_DEFAULT_SUPERVISOR_MODEL` is set.
pub const DEFAULT_ROUTER_MODEL: &str = "anthropic/claude-sonnet-4-6";

/// The generated output schema of an `llm` router over `candidates`.
pub(crate) fn selection_schema(candidates: &[String], multi: bool) -> Value {
    if multi {
        json!({
            "type": "object",
            "properties": {
                "selected_routes": {"type": "array", "items": {"type": "string", "enum": candidates}, "minItems": 1},
                "reasoning": {"type": "string"}
            },
            "required": ["selected_routes", "reasoning"]
        })
    } else {
        json!({
            "type": "object",
            "properties": {
                "selected_route": {"type": "string", "enum": candidates},
                "reasoning": {"type": "string"}
            },
            "required": ["selected_route", "reasoning"]
        })
    }
}

/// The routing instruction appended to the router's system prompt.
pub(crate) fn routing_instruction(candidates: &[String]) -> String {
    format!(
        "\n\nYou are a routing decision maker. Based on the input context, select the most appropriate route(s) from the available options: [{}].\nRespond with your selection using the required output format.",
        candidates.join(" ")
    )
}

/// Checks a router's output against the generated schema: the routes it selected and its reasoning.
pub(crate) fn selection(
    id: &str,
    output: &Value,
    candidates: &[String],
    multi: bool,
) -> Result<(Vec<String>, String), String> {
    let Value::Object(o) = output else {
        return Err(format!("llm router '{id}': output invalid: not a JSON object"));
    };
    // backend metadata (`_backend`, `_session_id`, …) aside, a bare `text` is what a backend falls back to
    let mut keys = o.keys().filter(|k| !k.starts_with('_'));
    if keys.next().is_some_and(|k| k == "text") && keys.next().is_none() {
        return Err(format!(
            "llm router '{id}': backend returned unstructured text, cannot determine route selection"
        ));
    }
    let reasoning = match o.get("reasoning") {
        Some(Value::String(s)) => s.clone(),
        _ => {
            return Err(format!(
                "llm router '{id}': output invalid: 'reasoning' must be a string"
            ));
        }
    };
    let valid = |r: &str| -> Result<String, String> {
        if candidates.iter().any(|c| c == r) {
            Ok(r.to_string())
        } else {
            Err(format!(
                "llm router '{id}' selected '{r}' which is not a valid target (candidates: {})",
                candidates.join(", ")
            ))
        }
    };
    if multi {
        let Some(Value::Array(list)) = o.get("selected_routes") else {
            return Err(format!(
                "llm router '{id}' did not produce a valid selected_routes list"
            ));
        };
        if list.is_empty() {
            return Err(format!(
                "llm router '{id}' did not produce a valid selected_routes list"
            ));
        }
        let mut routes = Vec::new();
        for r in list {
            let Value::String(r) = r else {
                return Err(format!(
                    "llm router '{id}': output invalid: selected_routes holds a non-string"
                ));
            };
            routes.push(valid(r)?);
        }
        Ok((routes, reasoning))
    } else {
        match o.get("selected_route") {
            Some(Value::String(r)) if !r.is_empty() => Ok((vec![valid(r)?], reasoning)),
            _ => Err(format!(
                "llm router '{id}' did not produce a valid selected_route"
            )),
        }
    }
}

impl<'a> Engine<'a> {
    /// `mode: llm`: no checkpoint at the router and no loop accounting on the edge it takes; any failure leaves
    /// the run resumable at the router.
    #[allow(clippy::result_large_err)]
    pub(super) async fn llm_router(&mut self, node: &'a Node) -> Result<String, ExecOutcome> {
        let id = node.name.value.clone();
        let wf = self.wf;
        let edges: Vec<&'a Edge> = wf.edges.iter().filter(|e| e.from.value == id).collect();
        let candidates: Vec<String> = edges.iter().map(|e| e.to.value.clone()).collect();
        let multi = node.multi == Some(true);
        let iteration = self.next_iteration(&id);
        let sandbox = match self.ctx.sandboxes.sandbox_for(&id).await {
            Ok(s) => s,
            Err(u) => {
                let mut f = RunFailed::new(u.code, u.error).node(id.clone());
                f.phase = u.phase;
                f.hint = u.hint;
                return Err(self.failed(f, &id, None));
            }
        };
        let mut ev = NodeStarted::new(id.clone(), EvKind::Router, iteration, sandbox.placement);
        ev.mode = Some("llm".into());
        self.emit(ev);
        // the input gains `_route_candidates` (readable as {{input._route_candidates}}); without a `user`
        // prompt the model gets the input as JSON without its `_` keys, the candidates being in the instruction
        let mut input = self.build_input(&id);
        if let Value::Object(m) = &mut input {
            m.insert("_route_candidates".into(), json!(candidates));
        }
        let cleaned: Map<String, Value> = input
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !k.starts_with('_'))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let cleaned = Value::Object(cleaned);
        if let Some(out) = self.check_budget(&id, None) {
            return Err(out);
        }
        let t0 = Instant::now();
        let success = self
            .route_call(node, &sandbox, &candidates, multi, (&input, &cleaned))
            .await?;
        if let Some(t) = success.tokens {
            self.st.usage.tokens = self.st.usage.tokens.saturating_add(t);
        }
        if let Some(c) = success.cost_usd {
            self.st.usage.cost_usd += c;
        }
        let (routes, reasoning) = match selection(&id, &success.output, &candidates, multi) {
            Ok(r) => r,
            Err(msg) => return Err(self.fail_code(FailureCode::ExecutionFailed, msg, &id)),
        };
        self.st.outputs.insert(id.clone(), success.output.clone());
        self.st
            .history
            .entry(id.clone())
            .or_default()
            .push(success.output.clone());
        let mut fin = NodeFinished::new(id.clone(), success.output.clone(), super::ms(t0.elapsed()));
        fin.tokens = success.tokens;
        fin.cost_usd = success.cost_usd;
        fin.reasoning = Some(reasoning);
        if multi {
            fin.selected_routes = Some(routes.clone());
        } else {
            fin.selected_route = routes.first().cloned();
        }
        self.emit(fin);
        self.budget_warnings();
        if multi {
            let fan: Vec<&'a Edge> = edges
                .into_iter()
                .filter(|e| routes.contains(&e.to.value))
                .collect();
            return self
                .fan_out(
                    &id,
                    Fan {
                        edges: fan,
                        tolerant: false,
                    },
                )
                .await;
        }
        let to = routes.into_iter().next().unwrap_or_default();
        self.emit(EdgeSelected {
            from: id,
            to: to.clone(),
            condition: None,
            negated: None,
            expression: None,
            loop_name: None,
            iteration: None,
            round_robin_index: None,
        });
        Ok(to)
    }

    /// The router's model call through its backend, with the routing instruction and the selection schema.
    #[allow(clippy::result_large_err)]
    async fn route_call(
        &mut self,
        node: &'a Node,
        sandbox: &crate::exec::context::NodeSandbox,
        candidates: &[String],
        multi: bool,
        (input, cleaned): (&Value, &Value),
    ) -> Result<crate::exec::node::NodeSuccess, ExecOutcome> {
        let id = node.name.value.clone();
        let wf = self.wf;
        let (backend, _) = node_backend(wf, node, &self.ctx.host_env);
        let lookup = |n: &str| self.ctx.host_env.get(n).cloned();
        let default_model = self
            .ctx
            .host_env
            .get("ITERION_DEFAULT_SUPERVISOR_MODEL")
            .map(|m| expand_env(m, EnvContext::NodeField, &lookup))
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| DEFAULT_ROUTER_MODEL.to_string());
        let default_model = match backend.as_str() {
            // the claude CLI takes model names without the provider prefix
            "claude_code" => Some(
                default_model
                    .strip_prefix("anthropic/")
                    .unwrap_or(&default_model)
                    .to_string(),
            ),
            // codex speaks only OpenAI models: its own default unless the supervisor model is one
            "codex" => default_model.strip_prefix("openai/").map(str::to_string),
            _ => Some(default_model),
        };
        let shape = CallShape {
            system_suffix: Some(routing_instruction(candidates)),
            output_schema: Some(selection_schema(candidates, multi)),
            user_fallback: Some(serde_json::to_string(cleaned).unwrap_or_default()),
            model: default_model,
            readonly: true,
            resume_session: None,
            drop_session: None,
            replay_session: false,
        };
        self.ctx.sandboxes.step_starting(&id).await;
        let cancel = self.ctx.cancel.child_token();
        let env = NodeEnv {
            run_id: &self.ctx.run_id,
            node_id: &id,
            sandbox,
            exec_env: self.ctx.sandboxes.exec_env(&id),
            host_env: &self.ctx.host_env,
            sink: &*self.ctx.sink,
            cancel: cancel.clone(),
            warned_env: &self.warned_env,
        };
        let loops = self.st.loops();
        let sc = scope(&self.st, input, &loops, self.ctx, &id);
        let (result, stop) = {
            let fut = async {
                match backend.as_str() {
                    "claude_code" => run_claude_code(&env, wf, node, &sc, &shape).await,
                    "codex" => crate::exec::codex::run_codex(&env, wf, node, &sc, &shape).await,
                    _ => run_claw(&env, wf, node, &sc, &shape).await,
                }
            };
            with_deadlines(fut, &cancel, self.budget_deadline, self.timeout_deadline).await
        };
        self.ctx.sandboxes.node_ended(&id, sandbox).await;
        self.st.usage.iterations += 1;
        match (result, stop) {
            (NodeRun::Ok(s), _) => Ok(s),
            (_, Some(super::Stop::Deadline(super::DeadlineKind::Budget))) => {
                Err(self.budget_exceeded_duration(&id, None))
            }
            (_, Some(super::Stop::Deadline(super::DeadlineKind::Timeout))) => Err(self.timed_out(&id, None)),
            (NodeRun::Cancelled, _) | (_, Some(super::Stop::Cancelled)) => Err(ExecOutcome::Cancelled {
                checkpoint: self.st.checkpoint(&id, None),
            }),
            (NodeRun::Err(e), None) => Err(self.fail_code(e.code, e.message, &id)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_are_checked_against_the_candidates() {
        let c = vec!["x".to_string(), "y".to_string()];
        let ok = selection("r", &json!({"selected_route": "y", "reasoning": "r"}), &c, false).unwrap();
        assert_eq!(ok, (vec!["y".to_string()], "r".to_string()));
        let e = selection("r", &json!({"selected_route": "z", "reasoning": ""}), &c, false).unwrap_err();
        assert!(
            e.contains("selected 'z' which is not a valid target (candidates: x, y)"),
            "{e}"
        );
        let e = selection(
            "r",
            &json!({"text": "pick y", "_backend": "claude_code"}),
            &c,
            false,
        )
        .unwrap_err();
        assert!(e.contains("unstructured text"), "{e}");
        let e = selection("r", &json!({"selected_route": "y"}), &c, false).unwrap_err();
        assert!(e.contains("output invalid"), "{e}");
        let m = selection(
            "r",
            &json!({"selected_routes": ["x", "y"], "reasoning": ""}),
            &c,
            true,
        )
        .unwrap();
        assert_eq!(m.0, ["x", "y"]);
        assert!(selection("r", &json!({"selected_routes": [], "reasoning": ""}), &c, true).is_err());
        assert_eq!(
            routing_instruction(&c),
            "\n\nYou are a routing decision maker. Based on the input context, select the most appropriate route(s) from the available options: [x y].\nRespond with your selection using the required output format."
        );
    }
}
