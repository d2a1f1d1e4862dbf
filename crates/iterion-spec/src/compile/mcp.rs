//! MCP servers: transport and command (`C025`), the OAuth block (`C038`), and a Playwright server that needs
//! a browser image in the sandbox (`C060`).

use super::compiler::Compiler;
use crate::model::{McpServer, McpTransport, SandboxKind, Workflow};

/// Whether an MCP server runs the Playwright MCP package (`C060`).
fn is_playwright_mcp(m: &McpServer) -> bool {
    let Some(cmd) = m.command.as_deref() else {
        return false;
    };
    cmd.contains("playwright-mcp")
        || cmd.contains("playwright_mcp")
        || (cmd == "npx" && m.args.iter().any(|a| a.contains("@playwright/mcp")))
}

impl Compiler<'_> {
    /// `C060`: a Playwright MCP server (a command naming `playwright-mcp` / `playwright_mcp`, or exactly `npx`
    /// with an `@playwright/mcp` argument) under an active workflow sandbox (auto or inline) whose image name
    /// contains neither `sandbox-browser` nor `sandbox-full-browser` (no image at all counts as no browser):
    /// the browser would be missing inside the sandbox and the server would fail at its first call.
    pub(super) fn browser_image(&mut self, w: &Workflow) {
        let Some(d) = w
            .sandbox
            .as_ref()
            .filter(|d| matches!(d.derive_kind(), SandboxKind::Auto | SandboxKind::Inline))
        else {
            return;
        };
        let image = d.image.as_ref().map_or("", |i| i.value.as_str());
        let lower = image.to_ascii_lowercase();
        if lower.contains("sandbox-browser") || lower.contains("sandbox-full-browser") {
            return;
        }
        for m in w.mcp_servers.iter().filter(|m| is_playwright_mcp(m)) {
            let i = self.err(
                "C060",
                m.name.span,
                format!("mcp_server '{}' needs a browser sandbox image", m.name.value),
            );
            let what = if image.is_empty() {
                "the sandbox has no browser image".to_string()
            } else {
                format!("the sandbox image '{image}' has no browser")
            };
            self.hint(
                i,
                &format!("{what}; use an image whose name contains sandbox-browser or sandbox-full-browser"),
            );
        }
    }

    pub(super) fn mcp_server(&mut self, m: &McpServer) {
        let name = &m.name.value;
        let problem = match m.transport {
            None => Some("transport is required (stdio, http or sse)".to_string()),
            Some(McpTransport::Stdio) if m.command.is_none() => {
                Some("stdio transport needs a command".into())
            }
            Some(McpTransport::Stdio) if m.url.is_some() => {
                Some("stdio transport does not take a url".into())
            }
            Some(McpTransport::Http | McpTransport::Sse) if m.url.is_none() => {
                Some("http and sse transports need a url".into())
            }
            Some(McpTransport::Http | McpTransport::Sse) if m.command.is_some() || !m.args.is_empty() => {
                Some("http and sse transports do not take command or args".into())
            }
            _ => None,
        };
        if let Some(p) = problem {
            self.err("C025", m.name.span, format!("mcp_server '{name}': {p}"));
        }
        self.mcp_auth(m);
    }

    /// `C038`, when an `auth` block is present: `type` is required and must be `oauth2`; then `auth_url` and
    /// `token_url` are required absolute http(s) URLs with a host, `revoke_url` one when set, and `client_id`
    /// is required.
    fn mcp_auth(&mut self, m: &McpServer) {
        if m.auth.is_empty() && m.auth_scopes.is_empty() {
            return;
        }
        let name = &m.name.value;
        let get = |k: &str| m.auth.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
        match get("type") {
            None | Some("") => {
                self.err(
                    "C038",
                    m.name.span,
                    format!("mcp_server '{name}': auth block missing 'type'"),
                );
                return;
            }
            Some("oauth2") => {}
            Some(t) => {
                self.err(
                    "C038",
                    m.name.span,
                    format!("mcp_server '{name}': unsupported auth type '{t}' (only \"oauth2\")"),
                );
                return;
            }
        }
        let is_url = |u: &str| {
            ["http://", "https://"].iter().any(|p| {
                u.get(..p.len()).is_some_and(|x| x.eq_ignore_ascii_case(p))
                    && u[p.len()..]
                        .split(['/', '?', '#'])
                        .next()
                        .is_some_and(|h| !h.is_empty())
            })
        };
        for (key, required) in [("auth_url", true), ("token_url", true), ("revoke_url", false)] {
            match get(key).filter(|v| !v.is_empty()) {
                None if required => {
                    self.err(
                        "C038",
                        m.name.span,
                        format!("mcp_server '{name}': oauth2 auth needs {key}"),
                    );
                }
                Some(u) if !is_url(u) => {
                    self.err(
                        "C038",
                        m.name.span,
                        format!("mcp_server '{name}': {key} '{u}' is not an absolute http(s) URL"),
                    );
                }
                _ => {}
            }
        }
        if get("client_id").is_none_or(str::is_empty) {
            self.err(
                "C038",
                m.name.span,
                format!("mcp_server '{name}': oauth2 auth needs client_id"),
            );
        }
    }
}
