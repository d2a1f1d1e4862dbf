//! 01 §12.7 variable expansion (HOME=`/home/jo`, repository root `/repo/proj`, workspace folder `/job`).

use std::collections::BTreeMap;

use iterion_spec::devcontainer::{ExpandContext, VarWarning, check_vars, expand_local_vars};

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Expands `input` with `env` (root `/repo/proj` unless `root` is false) and checks text and warnings.
fn check_with(vars: &[(&str, &str)], root: bool, input: &str, expect: &str, warnings: &[VarWarning]) {
    let e = env(vars);
    let ctx = ExpandContext {
        env: &e,
        local_workspace_folder: root.then_some("/repo/proj"),
        container_workspace_folder: Some("/job"),
    };
    let got = expand_local_vars(input, &ctx);
    assert_eq!(got.text, expect, "expansion of {input:?}");
    assert_eq!(got.warnings, warnings, "warnings of {input:?}");
}

fn check(input: &str, expect: &str) {
    check_with(&[("HOME", "/home/jo")], true, input, expect, &[]);
}

fn not_allowed(name: &str) -> VarWarning {
    VarWarning::NotAllowlisted {
        name: name.to_owned(),
    }
}

#[test]
fn expansion_vectors() {
    check("${localEnv:HOME}/.claude", "/home/jo/.claude"); // X1
    // X2: MISSING is also outside the allowlist, so it warns; an allowlisted unset name does not.
    let missing = [not_allowed("MISSING")];
    check_with(&[], true, "${localEnv:MISSING}", "", &missing); // X2
    check_with(&[], true, "${localEnv:MISSING:fallback}", "fallback", &missing); // X2
    check_with(&[], true, "${localEnv:MISSING:/abs/x:y}", "/abs/x:y", &missing); // X2
    check_with(&[], true, "${localEnv:TZ:/abs/x:y}", "/abs/x:y", &[]); // X2
    check_with(
        &[("AWS_SECRET_ACCESS_KEY", "hunter2")],
        true,
        "${localEnv:AWS_SECRET_ACCESS_KEY:x}",
        "x",
        &[not_allowed("AWS_SECRET_ACCESS_KEY")],
    ); // X3
    check_with(
        &[("LC_ALL", "C.UTF-8")],
        true,
        "${localEnv:LC_ALL}",
        "C.UTF-8",
        &[],
    ); // X4
    check("${localWorkspaceFolder}/sub", "/repo/proj/sub"); // X5
    check("${localWorkspaceFolderBasename}", "proj"); // X5
    check_with(
        &[],
        false,
        "${localWorkspaceFolder}",
        "${localWorkspaceFolder}",
        &[],
    ); // X6
    check("${containerEnv:PATH}", "${containerEnv:PATH}"); // X7
    check("${containerWorkspaceFolder}/bin", "/job/bin"); // X7
    check("${env:HOME}", "/home/jo"); // X8
    check_with(
        &[("HOME", "${localEnv:USER}")],
        true,
        "${localEnv:HOME}",
        "${localEnv:USER}",
        &[],
    ); // X9
    check("${localEnv:}", "${localEnv:}"); // X10
    check("${localEnv:1X}", "${localEnv:1X}"); // X10
    check_with(&[("HOME", "")], true, "${localEnv:HOME:d}", "", &[]); // X11
    check("a ${localEnv:HOME} b ${localEnv:HOME}", "a /home/jo b /home/jo"); // X12
}

#[test]
fn other_forms() {
    check("${containerWorkspaceFolderBasename}", "job");
    check("${env:XDG_CACHE_HOME:dflt}", "dflt");
    check("${localEnv:HOME", "${localEnv:HOME");
    check("$HOME ${", "$HOME ${");
    check("${localEnv:HOME:a}b}", "/home/job}");
    check_with(
        &[],
        true,
        "${devcontainerId}",
        "${devcontainerId}",
        &[VarWarning::DevcontainerId],
    );
    check_with(
        &[],
        true,
        "${foo}",
        "${foo}",
        &[VarWarning::Unsupported {
            text: "${foo}".to_owned(),
        }],
    );
    check_with(
        &[("SECRET", "v")],
        true,
        "${env:SECRET}",
        "",
        &[not_allowed("SECRET")],
    );
}

#[test]
fn container_folder_unknown_is_kept_and_flagged() {
    let e = env(&[]);
    let ctx = ExpandContext {
        env: &e,
        local_workspace_folder: None,
        container_workspace_folder: None,
    };
    let got = expand_local_vars("${containerWorkspaceFolder}/x", &ctx);
    assert_eq!(got.text, "${containerWorkspaceFolder}/x");
    assert!(got.container_folder_unresolved);
}

#[test]
fn compile_time_checks() {
    // S22.
    assert_eq!(
        check_vars("${localEnv:AWS_SECRET_ACCESS_KEY}"),
        [not_allowed("AWS_SECRET_ACCESS_KEY")]
    );
    assert_eq!(check_vars("${devcontainerId}"), [VarWarning::DevcontainerId]);
    assert_eq!(check_vars("${localEnv:HOME}/x ${localWorkspaceFolder}"), []);
    assert_eq!(
        not_allowed("AWS_SECRET_ACCESS_KEY").message(),
        "localEnv:AWS_SECRET_ACCESS_KEY is not on the allowlist and expands as unset"
    );
    assert_eq!(
        VarWarning::DevcontainerId.message(),
        "sandbox variable '${devcontainerId}' is not supported and is kept verbatim"
    );
}
