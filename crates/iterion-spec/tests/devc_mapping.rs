//! 01 §12.6 (devcontainer mapping; repository root `/repo/proj`, file in `.devcontainer/`) and §7.3 details.

mod devc_common;

use devc_common::{codes, load_bytes, summary};

/// `expect` is the mapped summary (`-` when resolution fails); `diags` the `CODE@line:col` list.
fn check(content: &str, expect: &str, diags: &[&str]) {
    let out = load_bytes(content.as_bytes());
    assert_eq!(
        codes(&out),
        diags,
        "diagnostics of {content}: {:#?}",
        out.diagnostics
    );
    assert_eq!(summary(&out.spec), expect, "summary of {content}");
}

#[test]
fn mapping_vectors() {
    check(
        r#"{"image":"node:22","remoteUser":"node","containerUser":"root"}"#,
        "image=node:22 user=node",
        &[],
    ); // M1
    check(
        r#"{"image":"x","containerUser":"1000"}"#,
        "image=x user=1000",
        &[],
    ); // M2
    check(
        r#"{"image":"x","remoteEnv":{"A":"r","B":"r","C":null},"containerEnv":{"B":"c"}}"#,
        "image=x env={A=r,B=c}",
        &[],
    ); // M3
    check(
        r#"{"image":"x","postCreateCommand":["npm","ci"]}"#,
        r#"image=x post=["npm ci"]"#,
        &[],
    ); // M4
    check(
        r#"{"image":"x","onCreateCommand":"a","postCreateCommand":{"x":"b","w":["c","d e"]},"postStartCommand":"f"}"#,
        r#"image=x post=["a", "c 'd e'", "b", "f"]"#,
        &[],
    ); // M5
    check(
        r#"{"build":{"dockerfile":"Dockerfile"}}"#,
        "build=/repo/proj/.devcontainer/Dockerfile|/repo/proj/.devcontainer|-",
        &[],
    ); // M6
    check(
        r#"{"build":{"dockerfile":"Dockerfile","context":".."}}"#,
        "build=/repo/proj/.devcontainer/Dockerfile|/repo/proj|-",
        &[],
    ); // M7
    check(r#"{"build":{"dockerfile":"../../x"}}"#, "-", &["D011@1:24"]); // M8
    check(
        r#"{"build":{"dockerfile":"Dockerfile","target":"dev"}}"#,
        "build=/repo/proj/.devcontainer/Dockerfile|/repo/proj/.devcontainer|dev",
        &[],
    ); // M9
    check(
        r#"{"image":"x","runArgs":["-v","/opt/tools:/opt/tools:ro","-e","FOO=1","--init"]}"#,
        "image=x env={FOO=1} mounts=[type=bind,source=/opt/tools,target=/opt/tools,readonly]",
        &["D007@1:70"],
    ); // M10
    check(
        r#"{"image":"x","runArgs":["--privileged=true"]}"#,
        "-",
        &["D006@1:25"],
    ); // M11
    check(r#"{"image":"x","privileged": true}"#, "-", &["D006@1:14"]); // M11
    check(r#"{"image":"x","capAdd":["SYS_ADMIN"]}"#, "-", &["D006@1:14"]); // M11
    check(
        r#"{"image":"x","mounts":[{"type":"bind","source":"${localEnv:HOME}/.cache","target":"/cache"}]}"#,
        "image=x mounts=[type=bind,source=/home/jo/.cache,target=/cache]",
        &[],
    ); // M12
    check(
        r#"{"image":"x","features": {"ghcr.io/devcontainers/features/go:1": {}}}"#,
        "image=x",
        &["D009@1:14"],
    ); // M13
    check(
        r#"{"image":"x","workspaceFolder":"${localWorkspaceFolder}"}"#,
        "image=x ws=/repo/proj",
        &[],
    ); // M16
    check(
        r#"{"image":"x","workspaceFolder":"${localWorkspaceFolderBasename}"}"#,
        "-",
        &["D008@1:32"],
    ); // M17
}

#[test]
fn more_fields() {
    // Validation after expansion (§7.5).
    check(r#"{}"#, "-", &["D003@1:1"]);
    check(r#"{"image":"x","build":{"dockerfile":"D"}}"#, "-", &["D004@1:22"]);
    check(r#"{"build":{"context":"."}}"#, "-", &["D005@1:10"]);
    check(
        r#"{"build":{"dockerfile":"D","context":"../.."}}"#,
        "-",
        &["D011@1:38"],
    );
    check(
        r#"{"image":"x","workspaceFolder":"/w/${containerWorkspaceFolder}"}"#,
        "-",
        &["D008@1:32"],
    );
    check(
        r#"{"image":"x","mounts":["type=bind,source=/a,target=rel"]}"#,
        "-",
        &["D012@1:24"],
    );
    check(
        r#"{"image":"x","mounts":[{"source":"/a","target":"/b"}]}"#,
        "-",
        &["D012@1:24"],
    );
    check(
        r#"{"image":"x","mounts":[{"type":"bind","source":"/a","target":"/b","consistency":"x"}]}"#,
        "-",
        &["D012@1:67"],
    );
    check(r#"{"image":"x","containerEnv":{"1A":"v"}}"#, "-", &["D013@1:30"]);
    check(
        r#"{"image":"x","containerEnv":{"A":"a\nb"}}"#,
        "-",
        &["D013@1:30"],
    );
    check(r#"{"image":"x","containerEnv":{"A":3}}"#, "-", &["D002@1:34"]);
    check(r#"{"image":"x","remoteUser":"-u root"}"#, "-", &["C101@1:27"]);
    // Ignored fields.
    check(
        r#"{"image":"x","initializeCommand":"rm -rf ~","postAttachCommand":"a","workspaceMount":"m"}"#,
        "image=x",
        &["D009@1:14", "D009@1:45", "D009@1:69"],
    );
    check(
        r#"{"image":"x","build":{"dockerfile":"D","options":["--x"]},"name":"n","forwardPorts":[1],"$schema":"s"}"#,
        "-",
        &["D004@1:22", "D009@1:40"],
    );
    check(r#"{"image":"x","features":{}}"#, "image=x", &[]);
    check(
        r#"{"image":"x","capAdd":[],"securityOpt":[],"privileged":false}"#,
        "image=x",
        &[],
    );
    check(
        r#"{"image":"x","securityOpt":["seccomp=unconfined"]}"#,
        "-",
        &["D006@1:14"],
    );
    // runArgs forms.
    check(
        r#"{"image":"x","runArgs":["--mount","type=volume,source=v,target=/v","--env=B=2","--volume=/a:/b"]}"#,
        "image=x env={B=2} mounts=[type=volume,source=v,target=/v ; type=bind,source=/a,target=/b]",
        &[],
    );
    check(
        r#"{"image":"x","runArgs":["--cap-add","NET_ADMIN","--pid=host","--device","/dev/kvm","--privileged"]}"#,
        "-",
        &["D006@1:25", "D006@1:49", "D006@1:62", "D006@1:84"],
    );
    check(r#"{"image":"x","runArgs":["-v","/a:/b:z"]}"#, "-", &["D012@1:25"]);
    check(
        r#"{"image":"x","containerEnv":{"A":"c"},"runArgs":["-e","A=r"]}"#,
        "image=x env={A=r}",
        &[],
    );
    // Lifecycle forms: quoting, trimming, empty snippets dropped.
    check(
        r#"{"image":"x","postCreateCommand":["echo","it's",""," "]}"#,
        r#"image=x post=["echo 'it'\\''s' '' ' '"]"#,
        &[],
    );
    check(
        r#"{"image":"x","postCreateCommand":"  ","postStartCommand":" make \n"}"#,
        r#"image=x post=["make"]"#,
        &[],
    );
    check(r#"{"image":"x","postCreateCommand":3}"#, "-", &["D002@1:34"]);
    check(
        r#"{"image":"x","postCreateCommand":{"a":1}}"#,
        "-",
        &["D002@1:39"],
    );
    // Variables.
    check(
        r#"{"image":"${localEnv:AWS_SECRET_ACCESS_KEY:x}"}"#,
        "image=x",
        &["D010@1:10"],
    );
    check(
        r#"{"image":"x","containerEnv":{"ID":"${devcontainerId}"}}"#,
        "image=x env={ID=${devcontainerId}}",
        &["D009@1:35"],
    );
    check(
        r#"{"image":"x","containerEnv":{"P":"${containerWorkspaceFolder}/bin"}}"#,
        "image=x env={P=/job/bin}",
        &[],
    );
    check(
        r#"{"image":"x","workspaceFolder":"/w","containerEnv":{"P":"${containerWorkspaceFolderBasename}"}}"#,
        "image=x ws=/w env={P=w}",
        &[],
    );
    check(
        r#"{"image":"x","remoteUser":"${localEnv:USER}"}"#,
        "-",
        &["C101@1:27"],
    );
}

#[test]
fn root_level_devcontainer_json_builds_relative_to_the_root() {
    use iterion_spec::devcontainer::{LoadContext, MemReader, load};
    let reader = MemReader::new().with_file(
        "/repo/proj/.devcontainer.json",
        r#"{"build":{"dockerfile":"ci/Dockerfile"}}"#,
    );
    let env = devc_common::env_home();
    let out = load(&LoadContext {
        repo_root: std::path::Path::new("/repo/proj"),
        env: &env,
        host_workspace: "/job",
        reader: &reader,
    });
    assert_eq!(summary(&out.spec), "build=/repo/proj/ci/Dockerfile|/repo/proj|-");
    let spec = out.spec.unwrap();
    assert_eq!(spec.source.path, ".devcontainer.json");
    assert_eq!(spec.source.sha256.len(), 64);
}

/// A reader whose `/repo/proj/.devcontainer/link` is a symlink to `/etc`.
struct SymlinkReader(iterion_spec::devcontainer::MemReader);

impl iterion_spec::devcontainer::SourceReader for SymlinkReader {
    fn read(&self, path: &std::path::Path) -> iterion_spec::devcontainer::FileRead {
        self.0.read(path)
    }
    fn canonicalize(&self, path: &std::path::Path) -> Option<std::path::PathBuf> {
        let p = path.to_string_lossy();
        Some(std::path::PathBuf::from(
            p.replace("/repo/proj/.devcontainer/link", "/etc"),
        ))
    }
}

#[test]
fn build_paths_are_checked_after_resolving_symlinks() {
    use iterion_spec::devcontainer::{LoadContext, MemReader, load};
    let reader = SymlinkReader(
        MemReader::new().with_file(devc_common::MAIN, r#"{"build":{"dockerfile":"link/Dockerfile"}}"#),
    );
    let env = devc_common::env_home();
    let out = load(&LoadContext {
        repo_root: std::path::Path::new(devc_common::ROOT),
        env: &env,
        host_workspace: "/job",
        reader: &reader,
    });
    assert_eq!(codes(&out), ["D011@1:24"]);
    assert_eq!(
        out.diagnostics[0].message,
        "build dockerfile 'link/Dockerfile' resolves outside the repository"
    );
}
