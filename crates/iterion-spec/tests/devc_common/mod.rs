//! Shared helpers of the `devc_*` tests: an in-memory repository at `/repo/proj`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use iterion_spec::devcontainer::{DevcontainerSpec, LoadContext, LoadOutcome, MemReader, load};

pub const ROOT: &str = "/repo/proj";
pub const MAIN: &str = "/repo/proj/.devcontainer/devcontainer.json";

pub fn env_home() -> BTreeMap<String, String> {
    BTreeMap::from([("HOME".to_owned(), "/home/jo".to_owned())])
}

/// Loads `content` as `.devcontainer/devcontainer.json` of `/repo/proj` (HOME=/home/jo, workspace `/job`).
pub fn load_bytes(content: &[u8]) -> LoadOutcome {
    let reader = MemReader::new().with_file(MAIN, content.to_vec());
    let env = env_home();
    load(&LoadContext {
        repo_root: Path::new(ROOT),
        env: &env,
        host_workspace: "/job",
        reader: &reader,
    })
}

/// `CODE@line:col` for every diagnostic.
pub fn codes(out: &LoadOutcome) -> Vec<String> {
    out.diagnostics
        .iter()
        .map(|d| format!("{}@{}:{}", d.code, d.line, d.col))
        .collect()
}

/// A one-line summary of the mapped fields that are set.
pub fn summary(spec: &Option<DevcontainerSpec>) -> String {
    let Some(s) = spec else { return "-".to_owned() };
    let mut out = Vec::new();
    if let Some(i) = &s.image {
        out.push(format!("image={i}"));
    }
    if let Some(b) = &s.build {
        let t = b.target.as_deref().unwrap_or("-");
        out.push(format!("build={}|{}|{t}", b.dockerfile, b.context));
        if !b.args.is_empty() {
            out.push(format!("args={:?}", b.args));
        }
    }
    if let Some(u) = &s.user {
        out.push(format!("user={u}"));
    }
    if let Some(w) = &s.workspace_folder {
        out.push(format!("ws={w}"));
    }
    if !s.post_create.is_empty() {
        out.push(format!("post={:?}", s.post_create));
    }
    if !s.env.is_empty() {
        let kv: Vec<String> = s.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push(format!("env={{{}}}", kv.join(",")));
    }
    if !s.mounts.is_empty() {
        let m: Vec<String> = s.mounts.iter().map(ToString::to_string).collect();
        out.push(format!("mounts=[{}]", m.join(" ; ")));
    }
    out.join(" ")
}
