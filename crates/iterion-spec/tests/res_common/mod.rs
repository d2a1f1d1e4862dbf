//! Shared helpers of the `res_*` tests: compiled-model builders and default resolution inputs.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use iterion_spec::devcontainer::MemReader;
use iterion_spec::model::{
    BuildDecl, MapEntry, NetworkDecl, Node, NodeKind, SandboxDecl, SandboxScope, Span, Spanned, TextMap,
    Workflow, Worktree,
};
use iterion_spec::resolve::{ModeChoice, ResolveInputs};

pub fn s(v: &str) -> Spanned<String> {
    Spanned::new(
        v.to_owned(),
        Span {
            line: 1,
            col: 1,
            end_line: 1,
            end_col: 2,
            ..Span::default()
        },
    )
}

/// Builds a `sandbox:` declaration; `done()` derives its kind like `compile` does.
pub struct B(SandboxDecl);

impl B {
    pub fn wf() -> B {
        B(SandboxDecl::empty(Span::default(), SandboxScope::Workflow))
    }
    pub fn node() -> B {
        B(SandboxDecl::empty(Span::default(), SandboxScope::Node))
    }
    pub fn short(mut self, word: &str) -> B {
        self.0.short = true;
        self.0.mode = Some(s(word));
        self
    }
    pub fn mode(mut self, word: &str) -> B {
        self.0.mode = Some(s(word));
        self
    }
    pub fn image(mut self, v: &str) -> B {
        self.0.image = Some(s(v));
        self
    }
    pub fn build(mut self, dockerfile: Option<&str>, context: Option<&str>) -> B {
        self.0.build = Some(BuildDecl {
            dockerfile: dockerfile.map(s),
            context: context.map(s),
            ..BuildDecl::default()
        });
        self
    }
    pub fn user(mut self, v: &str) -> B {
        self.0.user = Some(s(v));
        self
    }
    pub fn ws(mut self, v: &str) -> B {
        self.0.workspace_folder = Some(s(v));
        self
    }
    pub fn host_state(mut self, v: &str) -> B {
        self.0.host_state = Some(s(v));
        self
    }
    pub fn runtime(mut self, v: &str) -> B {
        self.0.runtime = Some(s(v));
        self
    }
    pub fn post_create(mut self, v: &str) -> B {
        self.0.post_create = Some(s(v));
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> B {
        self.0
            .env
            .get_or_insert_with(TextMap::default)
            .entries
            .push(MapEntry {
                key: s(k),
                value: s(v),
            });
        self
    }
    pub fn mount(mut self, v: &str) -> B {
        self.0.mounts.get_or_insert_with(Vec::new).push(s(v));
        self
    }
    fn net(&mut self) -> &mut NetworkDecl {
        self.0.network.get_or_insert_with(NetworkDecl::default)
    }
    pub fn net_empty(mut self) -> B {
        self.net();
        self
    }
    pub fn net_mode(mut self, v: &str) -> B {
        self.net().mode = Some(s(v));
        self
    }
    pub fn preset(mut self, v: &str) -> B {
        self.net().preset = Some(s(v));
        self
    }
    pub fn rule(mut self, v: &str) -> B {
        self.net().rules.get_or_insert_with(Vec::new).push(s(v));
        self
    }
    pub fn inherit(mut self, v: &str) -> B {
        self.net().inherit = Some(s(v));
        self
    }
    pub fn done(mut self) -> SandboxDecl {
        self.0.kind = self.0.derive_kind();
        self.0
    }
}

/// A workflow `w` with the given sandbox and `(name, kind, sandbox)` nodes.
pub fn workflow(sandbox: Option<SandboxDecl>, nodes: Vec<(&str, NodeKind, Option<SandboxDecl>)>) -> Workflow {
    Workflow {
        file: "wf.bot".to_owned(),
        name: s("w"),
        entry: None,
        vars: Vec::new(),
        presets: Vec::new(),
        attachments: Vec::new(),
        mcp_servers: Vec::new(),
        prompts: Vec::new(),
        schemas: Vec::new(),
        cursors: Vec::new(),
        nodes: nodes
            .into_iter()
            .map(|(n, k, d)| {
                let mut node = Node::new(s(n), k);
                node.sandbox = d.map(Box::new);
                node
            })
            .collect(),
        edges: Vec::new(),
        default_backend: None,
        tool_policy: None,
        capabilities: None,
        interaction: None,
        mcp: None,
        compaction: None,
        budget: None,
        worktree: Worktree::None,
        worktree_span: None,
        sandbox,
        project_mcp_servers: Vec::new(),
    }
}

/// A workflow with only a workflow-level declaration.
pub fn wf(sandbox: Option<SandboxDecl>) -> Workflow {
    workflow(sandbox, Vec::new())
}

/// A repository at `/repo/proj` whose `.devcontainer/devcontainer.json` is `content`.
pub fn repo_with(content: &str) -> MemReader {
    MemReader::new().with_file("/repo/proj/.devcontainer/devcontainer.json", content)
}

/// The inputs of 01 §12.8: builtin `auto`, version `1.2.3`, repository root `/repo/proj` (without a devcontainer
/// unless the reader has one), workspace `/home/jo/src/app`, HOME=`/home/jo`.
pub fn inputs(reader: &MemReader) -> ResolveInputs<'_> {
    let mut i = ResolveInputs::new("/home/jo/src/app", reader);
    i.builtin_default_mode = ModeChoice::Auto;
    i.binary_version = Some("1.2.3".to_owned());
    i.repo_root = Some(PathBuf::from("/repo/proj"));
    i.env = BTreeMap::from([("HOME".to_owned(), "/home/jo".to_owned())]);
    i
}

pub fn set_env(i: &mut ResolveInputs<'_>, k: &str, v: &str) {
    i.env.insert(k.to_owned(), v.to_owned());
}
