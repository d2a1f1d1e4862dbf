//! The entry points: compile a parsed file, or lex, parse and compile text in one call.

use super::compiler::Compiler;
use crate::ast::Ast;
use crate::diag::Diagnostic;
use crate::model::Workflow;

/// Compiles a parsed file. Returns the compiled workflow (only the first `workflow` of a file is compiled,
/// `C007`; none gives `C006`) and every compile diagnostic, sorted by position.
///
/// The tree is consumed: its declarations move into the model instead of being copied (call
/// [`crate::parse`] again, or clone the tree first, to keep it).
///
/// The model is returned even when diagnostics contain errors (best effort, for tooling); a caller that runs
/// the workflow must first check `diag::has_errors`.
pub fn compile(ast: Ast, file: &str) -> (Vec<Workflow>, Vec<Diagnostic>) {
    let mut c = Compiler::new(file);
    let wf = c.run(ast);
    let mut diags = c.into_diagnostics();
    if let Some(w) = &wf {
        diags.extend(crate::host_commands::check(w, file));
    }
    crate::diag::sort(&mut diags);
    (wf.into_iter().collect(), diags)
}

/// Everything [`check`] found: the compiled workflows and every diagnostic. The syntax tree is consumed by
/// [`compile`]; [`crate::parse`] returns it.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The compiled workflows (at most one; see [`compile`]). Empty when the file has no workflow.
    pub workflows: Vec<Workflow>,
    /// Lexical, syntactic and compile diagnostics, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    /// Whether any diagnostic is an error (the workflow must not run).
    pub fn has_errors(&self) -> bool {
        crate::diag::has_errors(&self.diagnostics)
    }
}

/// Lexes, parses and compiles source text. Compilation is skipped when lexing or parsing found an
/// error (the tree would be incomplete); the diagnostics then hold only `E…` codes.
pub fn check(src: &str, file: &str) -> Checked {
    check_bytes(src.as_bytes(), file)
}

/// As [`check`], on raw file bytes (size and UTF-8 checked first, `E007`).
pub fn check_bytes(bytes: &[u8], file: &str) -> Checked {
    let (ast, mut diagnostics) = crate::parser::parse_bytes(bytes, file);
    let mut workflows = Vec::new();
    if !crate::diag::has_errors(&diagnostics) {
        let (w, d) = compile(ast, file);
        workflows = w;
        diagnostics.extend(d);
        crate::diag::sort(&mut diagnostics);
    }
    Checked {
        workflows,
        diagnostics,
    }
}
