//! §6 event data and §10.3 `--sandbox-env` vectors.

use iterion_envdeny::{
    DenyClass, EnvLayers, RecordedSandboxEnv, Reserved, SandboxEnvDenied, merge, operator_layer,
    parse_sandbox_env, resume_sandbox_env,
};

#[test]
fn event_example_of_section_6() {
    let mut l = EnvLayers::new();
    l.repo
        .container_env
        .insert("ANTHROPIC_BASE_URL".into(), "https://evil.example".into());
    l.repo.remote_env.insert("PATH".into(), Some("/evil".into()));
    l.workflow.insert("https_proxy".into(), "http://corp:3128".into());
    let r = Reserved::none().with_proxy("http://run:t@127.0.0.1:3128");
    let merged = merge(&l, &r).unwrap();
    let ev = SandboxEnvDenied::from_report("run", &merged.report).unwrap();
    insta::assert_json_snapshot!(ev);
    assert_eq!(
        ev.log_line(),
        "sandbox: removed 2 repository env var(s) (ANTHROPIC_BASE_URL, PATH) and overrode 1 (https_proxy); see sandbox_env_denied"
    );
    let json = serde_json::to_string(&ev).unwrap();
    assert!(!json.contains("evil") && !json.contains("corp"), "{json}");
}

#[test]
fn no_event_for_an_empty_report() {
    assert_eq!(SandboxEnvDenied::from_report("run", &[]), None);
}

fn env(name: &str) -> Option<String> {
    match name {
        "OPENAI_API_KEY" => Some("sk-x".into()),
        _ => None,
    }
}

fn check(args: &[&str], proxy: bool, expect: &str) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let got = match parse_sandbox_env(&DenyClass::builtin(), &args, env, proxy) {
        Ok(entries) => {
            let layer = operator_layer(&entries);
            let rec: Vec<String> = entries
                .iter()
                .map(|e| serde_json::to_string(&e.recorded()).unwrap())
                .collect();
            format!("layer {layer:?} record {}", rec.join(","))
        }
        Err(e) => format!("error: {e}"),
    };
    assert_eq!(got, expect, "{args:?}");
}

#[test]
fn vectors_10_3() {
    check(
        &["OPENAI_API_KEY"],
        false,
        r#"layer {"OPENAI_API_KEY": "sk-x"} record {"form":"copy","name":"OPENAI_API_KEY"}"#,
    );
    check(
        &["OPENAI_ORG"],
        false,
        "error: --sandbox-env: OPENAI_ORG is not set in the environment",
    );
    check(
        &["OPENAI_API_KEY=sk-x"],
        false,
        "error: --sandbox-env: 'OPENAI_API_KEY' looks like a secret (prefix:OPENAI_); export it and pass \
'--sandbox-env OPENAI_API_KEY' so its value never appears on a command line",
    );
    check(
        &["NODE_ENV=test"],
        false,
        r#"layer {"NODE_ENV": "test"} record {"form":"value","name":"NODE_ENV","value":"test"}"#,
    );
    check(
        &["9X=1"],
        false,
        "error: invalid environment variable name '9X' in operator layer",
    );
    check(
        &["HTTPS_PROXY=http://corp:3128"],
        true,
        "error: 'HTTPS_PROXY' is controlled by iterion while the egress proxy is active",
    );
    check(
        &["NODE_ENV=a", "NODE_ENV=b"],
        false,
        r#"layer {"NODE_ENV": "b"} record {"form":"value","name":"NODE_ENV","value":"b"}"#,
    );
}

#[test]
fn secret_value_never_in_error_or_debug() {
    let args = vec!["OPENAI_API_KEY=sk-x".to_string()];
    let e = parse_sandbox_env(&DenyClass::builtin(), &args, env, false).unwrap_err();
    assert!(!e.to_string().contains("sk-x"));
    let ok = parse_sandbox_env(&DenyClass::builtin(), &["OPENAI_API_KEY".to_string()], env, false).unwrap();
    assert!(!format!("{ok:?}").contains("sk-x"));
}

#[test]
fn resume_rereads_copy_entries() {
    let rec = vec![
        RecordedSandboxEnv::Copy {
            name: "OPENAI_API_KEY".into(),
        },
        RecordedSandboxEnv::Value {
            name: "NODE_ENV".into(),
            value: "test".into(),
        },
    ];
    let entries = resume_sandbox_env(&rec, env).unwrap();
    assert_eq!(entries[0].value(), "sk-x");
    assert_eq!(entries[1].value(), "test");
    let e = resume_sandbox_env(&rec, |_| None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--sandbox-env: OPENAI_API_KEY is not set in the environment"
    );
}
