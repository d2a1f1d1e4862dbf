//! Capabilities: their names (`C080`, `C081`) and board capabilities under an active sandbox (`C082`).

use super::compiler::Compiler;
use crate::model::{SandboxDecl, SandboxKind, Workflow};

/// Whether a capability belongs to the board domain (`board`, `board.…`), which lives on the host.
fn is_board_capability(c: &str) -> bool {
    c.strip_prefix("board")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The capabilities the runtime knows (01 §4, `capabilities`); others draw `C080`.
const KNOWN_CAPABILITIES: &[&str] = &[
    "board.read",
    "board.create",
    "board.move",
    "board.assign",
    "board.label",
    "board.close",
    "board.comment",
    "watch.subscribe",
    "watch.unsubscribe",
];

/// Lowercase `domain` or `domain.action`: each part a lowercase letter then letters, digits or `_`.
fn is_capability_shape(c: &str) -> bool {
    let part = |p: &str| {
        let mut b = p.bytes();
        b.next().is_some_and(|f| f.is_ascii_lowercase())
            && b.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == b'_')
    };
    match c.split_once('.') {
        None => part(c),
        Some((d, a)) => part(d) && part(a),
    }
}

impl Compiler<'_> {
    /// `C082`: a board capability cannot reach the board from inside the sandbox. Applies to the capabilities
    /// of every node when the workflow block declares an active sandbox (mode auto or inline, 01 §6.4).
    pub(super) fn board_capabilities(&mut self, w: &Workflow) {
        let active = |d: &SandboxDecl| matches!(d.derive_kind(), SandboxKind::Auto | SandboxKind::Inline);
        if !w.sandbox.as_ref().is_some_and(active) {
            return;
        }
        let nodes = w.nodes.iter().filter_map(|n| n.capabilities.as_ref());
        for c in nodes.flatten() {
            if is_board_capability(&c.value) {
                self.warn(
                    "C082",
                    c.span,
                    format!(
                        "capability '{}' is not reachable from inside the sandbox",
                        c.value
                    ),
                );
            }
        }
    }

    /// `C081` (error) for a capability that is not lowercase `domain` or `domain.action` (letters, digits and
    /// underscores, each part starting with a letter); `C080` (warning) for a well-formed name outside the
    /// built-in registry (the registry is open: the name is passed through to the executor).
    pub(super) fn capability_names(&mut self, w: &Workflow) {
        let nodes = w.nodes.iter().filter_map(|n| n.capabilities.as_ref());
        for c in w.capabilities.iter().chain(nodes).flatten() {
            if c.value.is_empty() {
                continue;
            }
            if !is_capability_shape(&c.value) {
                let i = self.err("C081", c.span, format!("malformed capability '{}'", c.value));
                self.hint(
                    i,
                    "a capability is lowercase 'domain' or 'domain.action' (letters, digits, '_'), e.g. board.read",
                );
            } else if !KNOWN_CAPABILITIES.contains(&c.value.as_str()) {
                let i = self.warn("C080", c.span, format!("unknown capability '{}'", c.value));
                self.hint(
                    i,
                    &format!("known capabilities: {}", KNOWN_CAPABILITIES.join(", ")),
                );
            }
        }
    }
}
