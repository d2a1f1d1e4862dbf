//! `--sandbox-build-secret id=NAME,env=VAR` and `id=NAME,src=PATH`: secrets the operator gives to image builds
//! (`RUN --mount=type=secret,id=NAME`). Only the command line names them, so a repository can never ask for a
//! host secret. An env value is read from the launch environment now; a file is checked readable now and read
//! by the driver when it builds. Values are never printed: errors name the secret id, the variable or the path.

use iterion_driver::{BuildSecret, BuildSecretSource, SecretBytes};
use std::collections::BTreeMap;
use std::path::Path;

/// Parses one flag value.
pub fn parse(spec: &str, env: &BTreeMap<String, String>, cwd: &Path) -> Result<BuildSecret, String> {
    let bad = |why: &str| {
        format!("--sandbox-build-secret '{spec}': {why} (want id=NAME,env=VAR or id=NAME,src=PATH)")
    };
    let mut id = None;
    let mut source = None;
    for part in spec.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad(&format!("'{part}' is not key=value")))?;
        match k.trim() {
            "id" => id = Some(v.trim().to_owned()),
            "env" | "src" | "source" if source.is_some() => return Err(bad("give one of env= and src=")),
            "env" => source = Some(("env", v.trim().to_owned())),
            "src" | "source" => source = Some(("src", v.to_owned())),
            other => return Err(bad(&format!("unknown key '{other}'"))),
        }
    }
    let id = id
        .filter(|i| !i.is_empty())
        .ok_or_else(|| bad("id= is missing"))?;
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(bad("the id may hold letters, digits, '-', '_' and '.' only"));
    }
    let source = match source {
        None => return Err(bad("env= or src= is missing")),
        Some(("env", var)) => {
            let value = env.get(&var).ok_or_else(|| {
                format!("--sandbox-build-secret id={id}: the environment variable {var} is not set")
            })?;
            BuildSecretSource::Env {
                var,
                value: SecretBytes::new(value.clone().into_bytes()),
            }
        }
        Some((_, path)) => {
            let p = cwd.join(&path);
            let readable = std::fs::metadata(&p).map_err(|e| e.to_string()).and_then(|m| {
                if m.is_file() {
                    std::fs::File::open(&p).map(|_| ()).map_err(|e| e.to_string())
                } else {
                    Err("not a regular file".to_owned())
                }
            });
            if let Err(e) = readable {
                return Err(format!(
                    "--sandbox-build-secret id={id}: cannot read {}: {e}",
                    p.display()
                ));
            }
            BuildSecretSource::File(p)
        }
    };
    Ok(BuildSecret { id, source })
}

/// Parses every flag value; an id given twice is an error.
pub fn parse_all(
    specs: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> Result<Vec<BuildSecret>, String> {
    let mut out: Vec<BuildSecret> = Vec::new();
    for s in specs {
        let secret = parse(s, env, cwd)?;
        if out.iter().any(|o| o.id == secret.id) {
            return Err(format!(
                "--sandbox-build-secret: the id {} is given twice",
                secret.id
            ));
        }
        out.push(secret);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_fail_clearly() {
        let env: BTreeMap<String, String> = [("TOK".to_owned(), "s3cr3t".to_owned())].into();
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("f"), "x").expect("write");
        let s = parse("id=npm,env=TOK", &env, d.path()).expect("env");
        assert_eq!(s.id, "npm");
        assert!(
            matches!(&s.source, BuildSecretSource::Env { var, value } if var == "TOK" && value.expose() == b"s3cr3t")
        );
        assert!(!format!("{s:?}").contains("s3cr3t"));
        let f = parse("id=key,src=f", &env, d.path()).expect("file");
        assert_eq!(f.source, BuildSecretSource::File(d.path().join("f")));
        for (spec, want) in [
            ("id=a,env=NOPE", "NOPE is not set"),
            ("id=a,src=missing", "cannot read"),
            ("id=a,src=.", "not a regular file"),
            ("env=TOK", "id= is missing"),
            ("id=a", "env= or src= is missing"),
            ("id=a,env=TOK,src=f", "give one of"),
            ("id=a b,env=TOK", "letters, digits"),
            ("id=a,colour=red", "unknown key"),
        ] {
            let e = parse(spec, &env, d.path()).expect_err(spec);
            assert!(e.contains(want) && !e.contains("s3cr3t"), "{spec}: {e}");
        }
        let twice = parse_all(&["id=a,env=TOK".into(), "id=a,src=f".into()], &env, d.path());
        assert!(twice.expect_err("twice").contains("given twice"));
    }
}
