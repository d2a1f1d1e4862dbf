//! The exec script (07 §9): the exec API puts the command in the request URL, which API-server audit logs
//! record, so argv and environment values travel in a script written over stdin to the pod's memory-backed
//! exec directory, and the URL only ever names that script.

use crate::manifest::EXEC_DIR;
use crate::spec_check::Refusal;

/// POSIX single quoting: `'…'`, each `'` written as `'\''`.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Path of the script of exec `id`.
pub fn script_path(id: &str) -> String {
    format!("{EXEC_DIR}/{id}.sh")
}

/// Path of the pid file of exec `id`.
pub fn pid_path(id: &str) -> String {
    format!("{EXEC_DIR}/{id}.pid")
}

/// Exit code of the first exec when the script did not arrive whole (the caller writes it again).
pub const PUT_INCOMPLETE: i32 = 75;

/// The command of the first exec: writes its stdin to the script path, readable by the pod user only, then
/// checks that all `$2` bytes arrived (with `wc` when the image has it, else that the file is not empty) and
/// exits [`PUT_INCOMPLETE`] otherwise. A kubelet may end a short exec's stdin before the bytes sent with it reach
/// the process: the script is then empty, and running it would report success for a command that never ran.
pub const PUT_COMMAND: &str = "umask 077 && cat > \"$1\" || exit; n=$(wc -c < \"$1\" 2>/dev/null); \
if [ -n \"$n\" ]; then [ $n -eq \"$2\" ]; else [ -s \"$1\" ]; fi || { rm -f \"$1\"; exit 75; }";

/// The argv of the first exec for a script of `len` bytes (see [`PUT_COMMAND`]).
pub fn put_argv(id: &str, len: usize) -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        PUT_COMMAND.into(),
        "iterion-put".into(),
        script_path(id),
        len.to_string(),
    ]
}

/// The argv of the second exec: runs the script.
pub fn run_argv(id: &str) -> Vec<String> {
    vec!["/bin/sh".into(), script_path(id)]
}

/// The script of exec `id`: records the shell's pid (which `exec env …` keeps for the command, so the kill
/// sequence signals it), deletes itself, enters `workdir` (exit 126 when it cannot) and runs `argv` with
/// `env`. A value holding a newline is refused: environment values never contain one, and argv values with
/// one would not survive the audit-free path unchanged through every shell.
pub fn script(id: &str, workdir: &str, env: &[(String, String)], argv: &[String]) -> Result<String, Refusal> {
    let newline = |what: &str| Refusal {
        message: format!("kubernetes: {what} contains a newline, which an exec cannot carry"),
    };
    if workdir.contains('\n') {
        return Err(newline("the working directory"));
    }
    let mut words = Vec::with_capacity(env.len() + argv.len());
    for (k, v) in env {
        if k.contains('\n') || v.contains('\n') || k.contains('=') || k.is_empty() {
            return Err(newline(&format!(
                "environment variable '{}'",
                k.replace('\n', "\\n")
            )));
        }
        words.push(quote(&format!("{k}={v}")));
    }
    for a in argv {
        if a.contains('\n') {
            return Err(newline("an argument"));
        }
        words.push(quote(a));
    }
    let cannot = quote(&format!("iterion: cannot enter {workdir}"));
    Ok(format!(
        "echo $$ > {pid}\nrm -f {sh}\ncd {wd} || {{ echo {cannot} >&2; exit 126; }}\nexec env {words}\n",
        pid = quote(&pid_path(id)),
        sh = quote(&script_path(id)),
        wd = quote(workdir),
        words = words.join(" "),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_line(env: &[(&str, &str)], argv: &[&str]) -> String {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let s = script("e1", "/ws", &env, &argv).expect("script");
        s.lines().last().expect("a line").to_string()
    }

    #[test]
    fn quoting_vectors() {
        assert_eq!(last_line(&[], &["echo", "it's"]), r"exec env 'echo' 'it'\''s'");
        assert_eq!(
            last_line(&[("A", "x y")], &["sh", "-c", "echo $A"]),
            "exec env 'A=x y' 'sh' '-c' 'echo $A'"
        );
        assert_eq!(last_line(&[("EMPTY", "")], &["true"]), "exec env 'EMPTY=' 'true'");
        let s = script("e1", "/work space", &[], &["true".into()]).unwrap();
        assert!(
            s.contains("cd '/work space' || { echo 'iterion: cannot enter /work space' >&2; exit 126; }"),
            "{s}"
        );
        let e = script("e1", "/ws", &[("A".into(), "x\ny".into())], &["true".into()]).unwrap_err();
        assert!(e.message.contains("newline"), "{e}");
        assert!(script("e1", "/ws", &[], &["a\nb".into()]).is_err());
    }

    /// The quoting survives a real POSIX shell: the command line the script ends with, run by `/bin/sh`,
    /// gives the command exactly the argv and environment values it was built from.
    #[test]
    fn a_shell_reads_back_the_exact_values() {
        let tricky = ["it's", "$HOME", "a b", "\\n", "`id`", "\"q\"", ""];
        let mut argv: Vec<String> = vec!["printf".into(), "<%s>".into()];
        argv.extend(tricky.iter().map(|s| s.to_string()));
        let env = vec![("TRICKY".to_string(), "x'y $(id) \"z\"".to_string())];
        let line = |argv: &[String]| {
            let s = script("e1", "/", &env, argv).unwrap();
            s.lines().last().unwrap().to_string()
        };
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(line(&argv))
            .output()
            .unwrap();
        let expect: String = tricky.iter().map(|t| format!("<{t}>")).collect();
        assert_eq!(String::from_utf8_lossy(&out.stdout), expect);
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(line(&["env".to_string()]))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.lines().any(|l| l == "TRICKY=x'y $(id) \"z\""), "{text}");
    }

    #[test]
    fn the_script_records_its_pid_and_removes_itself() {
        let s = script("abc", "/ws", &[], &["true".into()]).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "echo $$ > '/run/iterion/exec/abc.pid'");
        assert_eq!(lines[1], "rm -f '/run/iterion/exec/abc.sh'");
        assert_eq!(put_argv("abc", 7)[4], "/run/iterion/exec/abc.sh");
        assert_eq!(put_argv("abc", 7)[5], "7");
        assert_eq!(run_argv("abc"), ["/bin/sh", "/run/iterion/exec/abc.sh"]);
    }
}
