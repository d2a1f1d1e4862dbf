//! Value formats of 01 §8.10 and the mount parser requirements of 03 §10.1–10.2.

use iterion_spec::values::{
    VarPolicy, parse_mount, parse_mount_with, split_csv_record, validate_build_path, validate_env_entry,
    validate_image, validate_user, validate_workspace_folder,
};

/// `Ok(canonical text)` or `Err(reason)`.
fn check_mount(input: &str, expect: Result<&str, &str>) {
    let got = parse_mount(input).map(|m| m.to_string());
    assert_eq!(got.as_deref().map_err(String::as_str), expect, "mount {input:?}");
}

#[test]
fn mounts() {
    // S18: refused at compile time (C102) and in devcontainer.json (D012).
    check_mount(
        "type=bind,source=/a,target=rel",
        Err("target 'rel' must be an absolute path"),
    );
    check_mount(
        "-v /a:/b",
        Err("must not start with '-' (write type=…,source=…,target=…)"),
    );
    check_mount(
        "type=volume,source=x,target=/y,volume-opt=o=bind",
        Err("volume-opt o=bind would turn the volume into a host bind"),
    );
    // S19.
    check_mount(
        "type=BIND,src=/a,dst=/b,ro",
        Ok("type=bind,source=/a,target=/b,readonly"),
    );
    check_mount(
        "type=bind,\"source=/a,b\",target=/c",
        Ok("type=bind,\"source=/a,b\",target=/c"),
    );
    // Keys and aliases.
    check_mount(
        "TYPE=bind,Source=/a,destination=/b",
        Ok("type=bind,source=/a,target=/b"),
    );
    check_mount(
        "type=bind,source=/a,target=/b,readonly=false",
        Ok("type=bind,source=/a,target=/b"),
    );
    check_mount(
        "type=bind,source=/a,target=/b,ro=1",
        Ok("type=bind,source=/a,target=/b,readonly"),
    );
    check_mount(
        "type=bind,source=/a,target=/b,ro=yes",
        Err("invalid value for 'ro' (want true, false, 1 or 0)"),
    );
    check_mount(
        "type=bind,source=/a,target=/b,consistency=cached",
        Ok("type=bind,source=/a,target=/b"),
    );
    check_mount(
        "type=bind,source=/a,target=/b,bind-propagation=rprivate",
        Ok("type=bind,source=/a,target=/b,bind-propagation=rprivate"),
    );
    check_mount(
        "type=bind,source=/a,target=/b,bind-propagation=shared",
        Err("bind-propagation 'shared' is not allowed (want private or rprivate)"),
    );
    // 03 §10.1: duplicates (aliases count), whitespace, quotes, control characters, unknown keys.
    check_mount(
        "type=bind,source=/a,src=/b,target=/c",
        Err("duplicate key 'source'"),
    );
    check_mount(
        "type=bind,target=/a,dst=/b,source=/c",
        Err("duplicate key 'target'"),
    );
    check_mount(
        "type=bind,source=/a,ro,readonly,target=/c",
        Err("duplicate key 'readonly'"),
    );
    check_mount(
        "type=bind, source=/a,target=/b",
        Err("whitespace around field ' source=/a'"),
    );
    check_mount(
        "type=bind,source=/a ,target=/b",
        Err("whitespace around field 'source=/a '"),
    );
    check_mount(
        "type=bind,source=/a\"b,target=/c",
        Err("a '\"' inside an unquoted field"),
    );
    check_mount(
        "type=bind,\"source=/a\"x,target=/c",
        Err("a closing quote must be followed by ',' or the end"),
    );
    check_mount(
        "type=bind,\"source=/a,target=/c",
        Err("unterminated quoted field"),
    );
    check_mount(
        "type=bind,\"source=/a\"\"b\",target=/c",
        Ok("type=bind,\"source=/a\"\"b\",target=/c"),
    );
    check_mount(
        "type=bind,source=/a\tb,target=/c",
        Err("contains a control character"),
    );
    check_mount(
        "type=bind,source=/a,target=/c,colour=red",
        Err("unknown key 'colour'"),
    );
    check_mount("type=bind,source=/a,target=/c,", Err("empty field"));
    check_mount("type=bind,source,target=/c", Err("key 'source' needs a value"));
    check_mount("", Err("empty mount"));
    // Missing pieces and type rules.
    check_mount("type=bind,source=/a", Err("missing target"));
    check_mount("type=bind,target=/a", Err("a bind mount needs a source"));
    check_mount(
        "type=npipe,source=/a,target=/b",
        Err("unknown mount type 'npipe' (want bind, volume or tmpfs)"),
    );
    check_mount(
        "source=/tmp/x,target=/x",
        Err("volume source must be a name; did you mean type=bind?"),
    );
    check_mount("source=cache,target=/x", Ok("type=volume,source=cache,target=/x"));
    check_mount("type=volume,target=/x", Ok("type=volume,target=/x"));
    check_mount("type=volume,source=-x,target=/x", Err("invalid volume name '-x'"));
    check_mount(
        "type=volume,source=v,target=/x,volume-opt=device=/dev/sda",
        Err("volume-opt 'device' would turn the volume into a host mount"),
    );
    check_mount(
        "type=volume,source=v,target=/x,volume-opt=type=none",
        Err("volume-opt 'type' would turn the volume into a host mount"),
    );
    check_mount(
        "type=volume,source=v,target=/x,\"volume-opt=o=size=1,rbind\"",
        Err("volume-opt o=bind would turn the volume into a host bind"),
    );
    check_mount(
        "type=volume,source=v,target=/x,volume-driver=nfs",
        Err("volume-driver 'nfs' is not allowed (only local)"),
    );
    check_mount(
        "type=volume,source=v,target=/x,volume-subpath=../up",
        Err("volume-subpath '../up' leaves its base directory"),
    );
    check_mount(
        "type=volume,source=v,target=/x,volume-subpath=a/b,volume-nocopy,volume-driver=local",
        Ok("type=volume,source=v,target=/x,volume-driver=local,volume-subpath=a/b,volume-nocopy"),
    );
    check_mount(
        "type=volume,source=v,target=/x,bind-propagation=private",
        Err("option 'bind-propagation' does not apply to a volume mount"),
    );
    check_mount(
        "type=tmpfs,target=/t,tmpfs-size=64m,tmpfs-mode=1777",
        Ok("type=tmpfs,target=/t,tmpfs-size=67108864,tmpfs-mode=1777"),
    );
    check_mount(
        "type=tmpfs,target=/t,tmpfs-mode=2777",
        Err("invalid tmpfs-mode '2777' (want octal permission bits up to 1777)"),
    );
    check_mount(
        "type=tmpfs,target=/t,tmpfs-size=lots",
        Err("invalid tmpfs-size 'lots' (want bytes with an optional k, m or g suffix)"),
    );
    check_mount(
        "type=tmpfs,source=/a,target=/t",
        Err("a tmpfs mount has no source"),
    );
    check_mount(
        "type=bind,source=/a,target=/b,tmpfs-size=1",
        Err("option 'tmpfs-size' does not apply to a bind mount"),
    );
}

#[test]
fn mounts_before_expansion_skip_path_checks_on_variables() {
    let lenient = |t: &str| parse_mount_with(t, VarPolicy::Unexpanded).map(|m| m.to_string());
    assert_eq!(
        lenient("type=bind,source=${localEnv:HOME}/.m2,target=${containerWorkspaceFolder}/m2"),
        Ok("type=bind,source=${localEnv:HOME}/.m2,target=${containerWorkspaceFolder}/m2".to_owned())
    );
    assert_eq!(
        lenient("type=bind,source=/a,target=rel"),
        Err("target 'rel' must be an absolute path".to_owned())
    );
    assert!(parse_mount("type=bind,source=/a,target=${containerWorkspaceFolder}/m2").is_err());
}

#[test]
fn mount_json_shape() {
    let m = parse_mount("type=BIND,src=/a,dst=/b,ro").unwrap();
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        r#"{"type":"bind","source":"/a","target":"/b","readonly":true}"#
    );
    let back: iterion_spec::values::Mount =
        serde_json::from_str(r#"{"type":"bind","source":"/a","target":"/b","readonly":true}"#).unwrap();
    assert_eq!(back, m);
}

#[test]
fn csv_records() {
    assert_eq!(split_csv_record("a,\"b,c\",d").unwrap(), ["a", "b,c", "d"]);
    assert_eq!(split_csv_record("\"\"").unwrap(), [""]);
    assert_eq!(split_csv_record("a,").unwrap(), ["a", ""]);
}

fn check_user(input: &str, ok: bool) {
    assert_eq!(validate_user(input).is_ok(), ok, "user {input:?}");
}

#[test]
fn users() {
    // S17.
    check_user("-u root", false);
    check_user("node", true);
    check_user("1000:1000", true);
    check_user("1000 : 1000", false);
    check_user("", false);
    check_user("_svc.x-1:grp", true);
    check_user("a:", false);
    check_user("a:b:c", false);
    check_user("root\n", false);
}

fn check_env(name: &str, value: &str, expect: Result<(), &str>) {
    assert_eq!(
        validate_env_entry(name, value),
        expect.map_err(str::to_owned),
        "env {name:?}"
    );
}

#[test]
fn env_entries() {
    check_env("CI", "true", Ok(()));
    check_env("_A1", "", Ok(()));
    check_env("1A", "x", Err("the name must match [A-Za-z_][A-Za-z0-9_]*"));
    check_env("A-B", "x", Err("the name must match [A-Za-z_][A-Za-z0-9_]*"));
    check_env("", "x", Err("the name must match [A-Za-z_][A-Za-z0-9_]*"));
    // S20: a block scalar value holds LF.
    check_env("X", "a\nb", Err("the value contains a line break"));
    check_env("X", "a\rb", Err("the value contains a line break"));
    check_env("X", "a\0b", Err("the value contains a NUL character"));
}

fn check_build(input: &str, expect: Result<&str, &str>) {
    let got = validate_build_path(input);
    assert_eq!(
        got.as_deref().map_err(String::as_str),
        expect,
        "build path {input:?}"
    );
}

#[test]
fn build_paths() {
    // S21.
    check_build("../Dockerfile", Err("leaves the base directory"));
    check_build("/abs/Dockerfile", Err("must be a relative path"));
    check_build("ci/Dockerfile", Ok("ci/Dockerfile"));
    check_build("./ci//x/../Dockerfile", Ok("ci/Dockerfile"));
    check_build(".", Ok("."));
    check_build("a/../..", Err("leaves the base directory"));
    check_build("-f", Err("must not start with '-'"));
    check_build("", Err("empty path"));
}

#[test]
fn workspace_folders_and_images() {
    // S16 (before expansion `workspace` is relative).
    assert_eq!(
        validate_workspace_folder("workspace"),
        Err("must be an absolute path".to_owned())
    );
    assert_eq!(validate_workspace_folder("/workspace"), Ok(()));
    assert_eq!(
        validate_workspace_folder("/a,b"),
        Err("must not contain ','".to_owned())
    );
    assert_eq!(
        validate_workspace_folder("/a\nb"),
        Err("contains a control character".to_owned())
    );
    assert_eq!(validate_image("alpine:3.20"), Ok(()));
    assert_eq!(validate_image("reg//x"), Ok(()));
    assert_eq!(validate_image("-x"), Err("must not start with '-'".to_owned()));
    assert_eq!(
        validate_image("a b"),
        Err("contains whitespace or a control character".to_owned())
    );
}
