//! `iterion-spec`: the workflow language, `devcontainer.json` and sandbox resolution.
//!
//! Layer L0: pure functions over text and injected inputs. This crate does no I/O of its own beyond reading
//! the files it is asked to parse through a small reader trait, never reads the process environment
//! and never touches the network.
//!
//! ```
//! use iterion_spec::diag::{Diagnostic, Severity};
//! let d = Diagnostic::error("E001", "wf.bot", 3, 5, "unexpected token");
//! assert_eq!(d.severity, Severity::Error);
//! assert_eq!(d.render_header(), "wf.bot:3:5: error[E001]: unexpected token");
//! ```
//!
//! Checking a workflow file (lex, parse, compile) in one call; `iterion validate` prints
//! [`model::Workflow::summary`] for each compiled workflow:
//!
//! ```
//! let src = "tool hello:\n  command: \"echo hi\"\n  sandbox: none\n\nworkflow greet:\n  entry: hello\n  sandbox: auto\n  hello -> done\n";
//! let checked = iterion_spec::check(src, "greet.bot");
//! assert!(!checked.has_errors());
//! assert_eq!(checked.diagnostics[0].render_header(),
//!     "greet.bot:3:3: warning[C128]: sandbox: none disables isolation for node 'hello'; prefer sandbox: auto");
//! let summary = checked.workflows[0].summary();
//! assert_eq!(summary.entry, Some("hello"));
//! assert_eq!(serde_json::to_string(&summary.sandbox).unwrap(), r#"{"mode":"auto"}"#);
//! assert_eq!(summary.nodes[0].sandbox_kind.map(|k| k.as_str()), Some("off"));
//! ```
//!
//! # Module order
//!
//! A module uses only modules listed before it (no import cycles between files; `cargo xtask tidy`
//! checks it):
//!
//! 1. leaves: `model`, `diag`, `template`, `values`, `duration`, `suggest`, `devcontainer::jsonc`,
//!    `devcontainer::vars` (the variable grammar and the `localEnv` allowlist, which the compiler checks too);
//! 2. `span` (positions inside string values), `ast`, `lexer`, `shell`, `resolved`;
//! 3. `expr`, `parser`, `host_commands`;
//! 4. `compile` (its own files are ordered in its module documentation);
//! 5. `source` (the bounded reader; `check_file` compiles what it reads);
//! 6. `devcontainer` (reads through `source`);
//! 7. `resolve`.
#![deny(missing_docs)]

pub mod ast;
pub mod compile;
pub mod devcontainer;
pub mod diag;
pub mod duration;
pub mod expr;
pub mod host_commands;
pub mod lexer;
pub mod model;
pub mod parser;
pub mod resolve;
pub mod resolved;
pub mod script;
pub mod shell;
pub mod source;
mod span;
pub mod suggest;
pub mod template;
pub mod values;

pub use compile::{Checked, check, check_bytes, check_project, compile};
pub use expr::parse_expression;
pub use lexer::lex;
pub use parser::parse;
pub use template::parse_template;
