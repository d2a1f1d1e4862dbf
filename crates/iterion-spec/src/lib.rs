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
#![deny(missing_docs)]

pub mod ast;
pub mod devcontainer;
pub mod diag;
pub mod expr;
pub mod lexer;
pub mod model;
pub mod parser;
pub mod resolved;
pub mod template;
pub mod values;
