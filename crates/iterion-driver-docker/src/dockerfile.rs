//! What a Dockerfile makes the engine fetch by itself, checked before a build that has no network.
//!
//! A build's `RUN` steps run in containers the engine creates, so `networkmode=none` cuts them off. Two fetches
//! are done by the engine itself, on the host's network, whatever the build's network mode: the download of a
//! remote `ADD` source, and the pull of a base image (`FROM`, `COPY --from=<image>`) that is not present
//! locally. [`offline_plan`] refuses the first kind with the line that asks for it and returns the images of the
//! second kind, which the caller checks are present (and whose own `ONBUILD` triggers it checks with
//! [`check_trigger`]).
//!
//! The parser follows the classic builder's rules: the `escape` parser directive, line continuations, comment
//! and blank lines inside continuations, flags before the arguments, the JSON and the whitespace forms, and
//! `$VAR` / `${VAR}` / `${VAR:-word}` / `${VAR:+word}` substitution from `ARG` and `ENV`. Whatever it cannot
//! resolve before the build (a variable whose value is unknown, a flag it does not know) is refused, never
//! guessed.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// One instruction: its keyword (upper case), its arguments (continuations joined) and its first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// 1-based line of the keyword.
    pub line: usize,
    /// The keyword in upper case (`FROM`, `ADD`, …).
    pub keyword: String,
    /// Everything after the keyword, continuations joined, trimmed.
    pub args: String,
}

/// Why a build is refused before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 1-based line of the instruction.
    pub line: usize,
    /// A sentence naming the instruction and what to do.
    pub reason: String,
}

/// An image the build would pull if it were absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalImage {
    /// 1-based line of the `FROM` or `COPY --from`.
    pub line: usize,
    /// The reference, variables substituted.
    pub reference: String,
    /// The `--platform` of a `FROM`, when given.
    pub platform: Option<String>,
}

/// Splits a Dockerfile into instructions and returns them with the escape character in force.
pub fn parse(text: &str) -> (Vec<Instruction>, char) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut escape = '\\';
    let mut lines = text.split('\n').enumerate().peekable();
    // Parser directives: `# key=value` lines at the very top.
    while let Some((_, raw)) = lines.peek() {
        let Some((key, value)) = directive(raw) else { break };
        if key == "escape" {
            match value.as_str() {
                "`" => escape = '`',
                "\\" => escape = '\\',
                _ => {}
            }
        }
        lines.next();
    }
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in lines {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = raw.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue; // blank and comment lines, also inside a continuation
        }
        let (body, continues) = match trimmed.trim_end().strip_suffix(escape) {
            Some(b) => (b, true),
            None => (trimmed, false),
        };
        let (line, mut acc) = pending.take().unwrap_or((i + 1, String::new()));
        acc.push_str(body);
        if continues {
            pending = Some((line, acc));
        } else {
            out.extend(instruction(line, &acc));
        }
    }
    if let Some((line, acc)) = pending {
        out.extend(instruction(line, &acc));
    }
    (out, escape)
}

fn directive(raw: &str) -> Option<(String, String)> {
    let rest = raw.trim().strip_prefix('#')?.trim_start();
    let (key, value) = rest.split_once('=')?;
    let key = key.trim();
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    Some((key.to_ascii_lowercase(), value.trim().to_owned()))
}

fn instruction(line: usize, text: &str) -> Option<Instruction> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let (kw, args) = text.split_once(|c: char| c.is_whitespace()).unwrap_or((text, ""));
    Some(Instruction {
        line,
        keyword: kw.to_ascii_uppercase(),
        args: args.trim().to_owned(),
    })
}

/// Splits leading `--name[=value]` flags from the arguments.
fn flags(args: &str) -> (Vec<(String, Option<String>)>, &str) {
    let mut out = Vec::new();
    let mut rest = args.trim_start();
    while let Some(after) = rest.strip_prefix("--") {
        let end = after.find(char::is_whitespace).unwrap_or(after.len());
        let flag = &after[..end];
        match flag.split_once('=') {
            Some((k, v)) => out.push((k.to_ascii_lowercase(), Some(v.to_owned()))),
            None => out.push((flag.to_ascii_lowercase(), None)),
        }
        rest = after[end..].trim_start();
    }
    (out, rest)
}

/// The words of an `ADD`/`COPY`: the JSON array form, else whitespace-separated (the builder splits these
/// without regard to quotes, then unquotes and substitutes each word on its own).
fn words(rest: &str) -> Vec<String> {
    if rest.starts_with('[')
        && let Ok(v) = serde_json::from_str::<Vec<String>>(rest)
    {
        return v;
    }
    rest.split_whitespace().map(str::to_owned).collect()
}

/// Words split on whitespace outside quotes, quotes and escapes kept (how `ARG` and `ENV` read `K=V` pairs).
fn quoted_words(s: &str, escape: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut it = s.chars();
    while let Some(c) = it.next() {
        match (c, quote) {
            (c, _) if c == escape => {
                cur.push(c);
                if let Some(n) = it.next() {
                    cur.push(n);
                }
            }
            ('"' | '\'', None) => {
                quote = Some(c);
                cur.push(c);
            }
            (c, Some(q)) if c == q => {
                quote = None;
                cur.push(c);
            }
            (c, None) if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            (c, _) => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The variables a word is substituted with. In a `strict` scope (an `ONBUILD` trigger, which runs in a later
/// build) no value is known; otherwise an undeclared variable is empty, as the builder makes it.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    env: Rc<HashMap<String, String>>,
    args: HashMap<String, String>,
    strict: bool,
}

impl Scope {
    fn strict() -> Scope {
        Scope {
            strict: true,
            ..Scope::default()
        }
    }

    /// `ENV` wins over `ARG` of the same name (the builder drops a build argument the environment has).
    fn get(&self, name: &str) -> Result<String, String> {
        if self.strict {
            return Err(name.to_owned());
        }
        Ok(self
            .env
            .get(name)
            .or_else(|| self.args.get(name))
            .cloned()
            .unwrap_or_default())
    }

    fn from_env(env: &[String]) -> Scope {
        Scope {
            env: Rc::new(
                env.iter()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            ),
            ..Scope::default()
        }
    }
}

/// One word unquoted and substituted, as the builder's shell lexer does: `'…'` is literal, `"…"` substitutes,
/// the escape character makes the next character literal; `$NAME`, `${NAME}`, `${NAME:-word}` and
/// `${NAME:+word}` are substituted. `Err(name)` names a variable whose value cannot be known here, or a
/// modifier this check does not evaluate.
pub fn process_word(s: &str, scope: &Scope, escape: char) -> Result<String, String> {
    word_at(s, scope, escape, 0)
}

/// Nesting of `${NAME:-${…}}` beyond which a word is refused (the recursion is bounded).
const MAX_NESTING: usize = 16;

fn word_at(s: &str, scope: &Scope, escape: char, depth: usize) -> Result<String, String> {
    if depth > MAX_NESTING {
        return Err(format!("a substitution nested deeper than {MAX_NESTING}"));
    }
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    let mut in_double = false;
    while let Some(c) = it.next() {
        if c == escape {
            if let Some(n) = it.next() {
                if in_double && !matches!(n, '$' | '"') && n != escape {
                    out.push(c);
                }
                out.push(n);
            }
            continue;
        }
        match c {
            '\'' if !in_double => {
                for c in it.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    out.push(c);
                }
            }
            '"' => in_double = !in_double,
            '$' => match it.peek().copied() {
                Some('{') => {
                    it.next();
                    let mut inner = String::new();
                    let mut depth = 1;
                    for c in it.by_ref() {
                        match c {
                            '{' => depth += 1,
                            '}' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        inner.push(c);
                    }
                    if depth != 0 {
                        return Err(format!("${{{inner}"));
                    }
                    let split = inner
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(inner.len());
                    let (name, modifier) = inner.split_at(split);
                    if name.is_empty() {
                        return Err(format!("${{{inner}}}"));
                    }
                    let value = scope.get(name)?;
                    match modifier {
                        "" => out.push_str(&value),
                        m if m.starts_with(":-") || m.starts_with(":+") => {
                            let word = word_at(&m[2..], scope, escape, depth + 1)?;
                            match (m.starts_with(":-"), value.is_empty()) {
                                (true, true) | (false, false) => out.push_str(&word),
                                (true, false) => out.push_str(&value),
                                (false, true) => {}
                            }
                        }
                        _ => return Err(name.to_owned()),
                    }
                }
                Some(n) if n.is_ascii_alphabetic() || n == '_' => {
                    let mut name = String::new();
                    while let Some(&n) = it.peek() {
                        if !(n.is_ascii_alphanumeric() || n == '_') {
                            break;
                        }
                        name.push(n);
                        it.next();
                    }
                    out.push_str(&scope.get(&name)?);
                }
                _ => out.push('$'),
            },
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Whether an `ADD` source would be fetched by the engine rather than read from the context. Deliberately
/// broader than the builder: any `://` once quotes and escapes are removed, and any `git@` word.
fn is_remote(src: &str) -> bool {
    let plain: String = src
        .chars()
        .filter(|c| !matches!(c, '"' | '\'' | '\\' | '`'))
        .collect::<String>()
        .to_ascii_lowercase();
    plain.contains("://") || plain.split_whitespace().any(|w| w.starts_with("git@"))
}

const HINT_ADD: &str = "put the file in the build context and COPY it, or run with network mode open";
const HINT_IMAGE: &str = "make the image present on this host first, or run with network mode open";

/// Checks one `ADD` or `COPY` (also as an `ONBUILD` trigger); returns the image a `COPY --from` names when it is
/// not a stage of this Dockerfile.
fn check_copy(
    ins: &Instruction,
    scope: &Scope,
    escape: char,
    stages: &HashMap<String, usize>,
    what: &str,
) -> Result<Option<String>, Refusal> {
    let refuse = |reason: String| Refusal {
        line: ins.line,
        reason,
    };
    let (fl, rest) = flags(&ins.args);
    let mut from = None;
    for (k, v) in &fl {
        match k.as_str() {
            "chown" | "chmod" | "link" | "checksum" | "parents" | "exclude" => {}
            "from" if ins.keyword == "COPY" => from = v.clone(),
            other => {
                return Err(refuse(format!(
                    "{what} has the flag --{other}, which cannot be checked before a build without network"
                )));
            }
        }
    }
    if ins.keyword == "ADD" {
        let w = words(rest);
        let sources = w.len().saturating_sub(1);
        for src in &w[..sources] {
            let value = process_word(src, scope, escape).map_err(|name| {
                refuse(format!(
                    "{what} source {src} uses {name}, whose value cannot be known before the build, and a remote \
                     ADD source is fetched by the engine outside the run's network policy ({HINT_ADD})"
                ))
            })?;
            if is_remote(src) || is_remote(&value) {
                return Err(refuse(format!(
                    "{what} {value}: the engine would fetch it itself, outside the run's network policy, and the \
                     build has no network ({HINT_ADD})"
                )));
            }
        }
    }
    let Some(from) = from else { return Ok(None) };
    let from = process_word(&from, scope, escape).map_err(|name| {
        refuse(format!(
            "{what} --from={from} uses {name}, whose value cannot be known before the build"
        ))
    })?;
    let lower = from.to_ascii_lowercase();
    if lower.chars().all(|c| c.is_ascii_digit()) || stages.contains_key(&lower) {
        return Ok(None);
    }
    Ok(Some(from))
}

/// A base image present on the host, as the engine reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BaseImage {
    /// Its environment (`K=V`), which the builder substitutes with.
    pub env: Vec<String>,
    /// Its `ONBUILD` triggers, which run at the `FROM` that uses it.
    pub onbuild: Vec<String>,
    /// Its operating system.
    pub os: Option<String>,
    /// Its architecture.
    pub arch: Option<String>,
}

struct Meta {
    scope: Scope,
}

impl Meta {
    /// `ARG` before the first `FROM`: the build argument, else the default.
    fn declare(&mut self, decls: &str, args: &BTreeMap<String, String>, escape: char) {
        for decl in quoted_words(decls, escape) {
            let (name, default) = match decl.split_once('=') {
                Some((n, d)) => (n.to_owned(), Some(d.to_owned())),
                None => (decl.clone(), None),
            };
            let value = match (args.get(&name), default) {
                (Some(v), _) => v.clone(),
                // An unknown default is left empty here; a FROM using it is refused by substitution.
                (None, Some(d)) => process_word(&d, &self.scope, escape).unwrap_or_default(),
                (None, None) => String::new(),
            };
            self.scope.args.insert(name, value);
        }
    }
}

/// Stages beyond which a Dockerfile is refused: the check keeps each stage's environment, and no real
/// Dockerfile comes near this.
pub const MAX_STAGES: usize = 128;

/// Distinct images (`FROM` and `COPY --from`) beyond which a Dockerfile is refused: each is looked up.
pub const MAX_IMAGES: usize = 128;

/// The stage name a `FROM … AS name` declares.
fn stage_name<'a>(mut w: impl Iterator<Item = &'a str>) -> Option<String> {
    match (w.next(), w.next()) {
        (Some(a), Some(n)) if a.eq_ignore_ascii_case("as") => Some(n.to_ascii_lowercase()),
        _ => None,
    }
}

/// The images the `FROM` lines name (not `scratch`, not an earlier stage), with the build arguments applied,
/// so the caller can look them up before [`offline_plan`]. A `FROM` that cannot be read is left to
/// [`offline_plan`] to refuse; so are Dockerfiles past [`MAX_STAGES`].
pub fn from_images(text: &str, args: &BTreeMap<String, String>) -> Vec<ExternalImage> {
    let (instructions, escape) = parse(text);
    let mut meta = Meta {
        scope: Scope::default(),
    };
    let mut seen_from = false;
    let mut stages: HashMap<String, usize> = HashMap::new();
    let mut count = 0;
    let mut out: Vec<ExternalImage> = Vec::new();
    for ins in &instructions {
        match ins.keyword.as_str() {
            "ARG" if !seen_from => meta.declare(&ins.args, args, escape),
            "FROM" => {
                seen_from = true;
                count += 1;
                if count > MAX_STAGES {
                    break;
                }
                let (_, rest) = flags(&ins.args);
                let mut w = rest.split_whitespace();
                if let Some(Ok(reference)) = w.next().map(|i| process_word(i, &meta.scope, escape)) {
                    let lower = reference.to_ascii_lowercase();
                    if lower != "scratch"
                        && !stages.contains_key(&lower)
                        && !out.iter().any(|o| o.reference == reference)
                    {
                        out.push(ExternalImage {
                            line: ins.line,
                            reference,
                            platform: None,
                        });
                    }
                }
                if let Some(name) = stage_name(w) {
                    stages.insert(name, count - 1);
                }
            }
            _ => {}
        }
    }
    out
}

/// Every image the Dockerfile names — the `FROM` images of [`from_images`] and the `COPY --from` images —
/// with the build arguments applied as far as they are known before the build (a reference that cannot be
/// substituted is returned as written). The build cache key records what each one is on this host, so a
/// changed base image is a new key.
pub fn referenced_images(text: &str, args: &BTreeMap<String, String>) -> Vec<String> {
    let mut out: Vec<String> = from_images(text, args).into_iter().map(|i| i.reference).collect();
    let (instructions, escape) = parse(text);
    let mut meta = Meta {
        scope: Scope::default(),
    };
    let mut seen_from = false;
    let mut stages: Vec<String> = Vec::new();
    for ins in &instructions {
        match ins.keyword.as_str() {
            "ARG" if !seen_from => meta.declare(&ins.args, args, escape),
            "FROM" => {
                seen_from = true;
                let (_, rest) = flags(&ins.args);
                let mut w = rest.split_whitespace();
                w.next();
                if let Some(name) = stage_name(w) {
                    stages.push(name);
                }
            }
            "COPY" => {
                let (fl, _) = flags(&ins.args);
                let Some(from) = fl.into_iter().find(|(k, _)| k == "from").and_then(|(_, v)| v) else {
                    continue;
                };
                let from = process_word(&from, &meta.scope, escape).unwrap_or(from);
                let lower = from.to_ascii_lowercase();
                if !lower.chars().all(|c| c.is_ascii_digit())
                    && !stages.contains(&lower)
                    && !out.contains(&from)
                {
                    out.push(from);
                }
            }
            _ => {}
        }
    }
    out.truncate(MAX_IMAGES);
    out
}

/// Checks a Dockerfile for a build without network: refuses any line that would make the engine download
/// something itself (a remote `ADD`, also through a variable or an `ONBUILD` trigger, of this file or of a base
/// image) and any `FROM` of an image not in `bases` (which the engine would pull), and returns the images
/// `COPY --from` names, which the caller must find present too. `args` are the build arguments; `bases` maps
/// each reference of [`from_images`] that is present to what the engine reports of it.
pub fn offline_plan(
    text: &str,
    args: &BTreeMap<String, String>,
    bases: &HashMap<String, BaseImage>,
) -> Result<Vec<ExternalImage>, Refusal> {
    let (instructions, escape) = parse(text);
    let mut plan = OfflinePlan {
        args,
        bases,
        escape,
        meta: Meta {
            scope: Scope::default(),
        },
        stage: None,
        stages: HashMap::new(),
        stage_env: Vec::new(),
        out: Vec::new(),
    };
    for ins in &instructions {
        match ins.keyword.as_str() {
            "ARG" => plan.arg(ins)?,
            "ENV" => plan.env(ins)?,
            "FROM" => plan.from(ins)?,
            "ADD" | "COPY" => {
                let scope = plan.stage.clone().unwrap_or_default();
                if let Some(image) = check_copy(ins, &scope, escape, &plan.stages, &ins.keyword)? {
                    plan.push(ins.line, image)?;
                }
            }
            "ONBUILD" => {
                if let Some(inner) = instruction(ins.line, &ins.args)
                    && matches!(inner.keyword.as_str(), "ADD" | "COPY")
                {
                    // A trigger runs in a later build, with that build's variables and stages: none is known
                    // here, so its `COPY --from` is not an image to find now.
                    check_copy(
                        &inner,
                        &Scope::strict(),
                        escape,
                        &HashMap::new(),
                        &format!("ONBUILD {}", inner.keyword),
                    )?;
                }
            }
            _ => {}
        }
    }
    Ok(plan.out)
}

/// The state of [`offline_plan`] while it walks the instructions.
struct OfflinePlan<'a> {
    args: &'a BTreeMap<String, String>,
    bases: &'a HashMap<String, BaseImage>,
    escape: char,
    /// The scope of the `ARG`s before the first `FROM`.
    meta: Meta,
    /// The scope of the current stage; `None` before the first `FROM`.
    stage: Option<Scope>,
    /// Stage name → index.
    stages: HashMap<String, usize>,
    /// The environment each finished stage leaves, shared until a later stage changes its copy.
    stage_env: Vec<Rc<HashMap<String, String>>>,
    /// The images `COPY --from` names (and base triggers), in order.
    out: Vec<ExternalImage>,
}

fn refusal(ins: &Instruction, reason: String) -> Refusal {
    Refusal {
        line: ins.line,
        reason,
    }
}

impl OfflinePlan<'_> {
    /// Records an image to find present, refusing past [`MAX_IMAGES`].
    fn push(&mut self, line: usize, reference: String) -> Result<(), Refusal> {
        if self.out.iter().any(|o| o.reference == reference) {
            return Ok(());
        }
        if self.out.len() + self.bases.len() >= MAX_IMAGES {
            return Err(Refusal {
                line,
                reason: format!(
                    "more than {MAX_IMAGES} images cannot be checked before a build without network"
                ),
            });
        }
        self.out.push(ExternalImage {
            line,
            reference,
            platform: None,
        });
        Ok(())
    }

    /// `ARG`: before the first `FROM` into the meta scope, else into the stage's (a default must be knowable).
    fn arg(&mut self, ins: &Instruction) -> Result<(), Refusal> {
        let Some(scope) = self.stage.as_mut() else {
            self.meta.declare(&ins.args, self.args, self.escape);
            return Ok(());
        };
        for decl in quoted_words(&ins.args, self.escape) {
            let (name, default) = match decl.split_once('=') {
                Some((n, d)) => (n.to_owned(), Some(d.to_owned())),
                None => (decl.clone(), None),
            };
            let value = match (self.args.get(&name), default) {
                (Some(v), _) => v.clone(),
                (None, Some(d)) => process_word(&d, scope, self.escape).map_err(|n| {
                    refusal(
                        ins,
                        format!("ARG {name} uses {n}, whose value cannot be known before the build"),
                    )
                })?,
                (None, None) => self.meta.scope.args.get(&name).cloned().unwrap_or_default(),
            };
            scope.args.insert(name, value);
        }
        Ok(())
    }

    /// `ENV` in a stage: its values must be knowable, as later words are substituted with them.
    fn env(&mut self, ins: &Instruction) -> Result<(), Refusal> {
        let Some(scope) = self.stage.as_mut() else {
            return Ok(());
        };
        let a = ins.args.trim();
        let pairs: Vec<(String, String)> = match a.split_whitespace().next() {
            Some(first) if first.contains('=') => quoted_words(a, self.escape)
                .into_iter()
                .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
                .collect(),
            _ => a
                .split_once(char::is_whitespace)
                .map(|(k, v)| vec![(k.to_owned(), v.trim().to_owned())])
                .unwrap_or_default(),
        };
        for (k, v) in pairs {
            let value = process_word(&v, scope, self.escape).map_err(|n| {
                refusal(
                    ins,
                    format!("ENV {k} uses {n}, whose value cannot be known before the build"),
                )
            })?;
            Rc::make_mut(&mut scope.env).insert(k, value);
        }
        Ok(())
    }

    /// `FROM`: a new stage, from `scratch`, an earlier stage, or a base image that must be present (for the
    /// platform asked), whose `ONBUILD` triggers are checked.
    fn from(&mut self, ins: &Instruction) -> Result<(), Refusal> {
        let refuse = |reason: String| refusal(ins, reason);
        if let Some(s) = self.stage.take() {
            self.stage_env.push(s.env);
        }
        if self.stage_env.len() >= MAX_STAGES {
            return Err(refuse(format!(
                "more than {MAX_STAGES} stages cannot be checked before a build without network"
            )));
        }
        let (fl, rest) = flags(&ins.args);
        let mut platform = None;
        for (k, v) in fl {
            if k != "platform" {
                return Err(refuse(format!(
                    "FROM has the flag --{k}, which cannot be checked before a build without network"
                )));
            }
            let p = v.unwrap_or_default();
            platform = Some(process_word(&p, &self.meta.scope, self.escape).map_err(|n| {
                refuse(format!(
                    "FROM --platform={p} uses {n}, whose value cannot be known before the build"
                ))
            })?);
        }
        let mut w = rest.split_whitespace();
        let image = w.next().unwrap_or_default();
        let reference = process_word(image, &self.meta.scope, self.escape).map_err(|n| {
            refuse(format!(
                "FROM {image} uses {n}, whose value cannot be known before the build, and a base image that \
                 is not present would be pulled outside the run's network policy"
            ))
        })?;
        let lower = reference.to_ascii_lowercase();
        let scope = if lower == "scratch" {
            Scope::default()
        } else if let Some(&i) = self.stages.get(&lower) {
            Scope {
                env: self.stage_env[i].clone(),
                ..Scope::default()
            }
        } else {
            self.base_scope(ins, &reference, platform.as_deref())?
        };
        if let Some(name) = stage_name(w) {
            self.stages.insert(name, self.stage_env.len());
        }
        self.stage = Some(scope);
        Ok(())
    }

    /// The scope of a stage built on the base image `reference`: it must be present, for `platform` when one
    /// is asked; its `ONBUILD` triggers are checked.
    fn base_scope(
        &mut self,
        ins: &Instruction,
        reference: &str,
        platform: Option<&str>,
    ) -> Result<Scope, Refusal> {
        let bases = self.bases;
        let Some(base) = bases.get(reference) else {
            return Err(refusal(
                ins,
                format!(
                    "FROM {reference}: the image is not present on this host, and the build has no network \
                     to pull it; a pull would leave outside the run's network policy ({HINT_IMAGE})"
                ),
            ));
        };
        if let (Some(p), Some(os), Some(arch)) = (platform, &base.os, &base.arch) {
            let have = format!("{os}/{arch}");
            let want = p.to_ascii_lowercase();
            if want != have && !want.starts_with(&format!("{have}/")) {
                return Err(refusal(
                    ins,
                    format!(
                        "FROM --platform={p} {reference}: the image present is {have}, and the engine would \
                         pull the {p} one outside the run's network policy ({HINT_IMAGE})"
                    ),
                ));
            }
        }
        for trigger in &base.onbuild {
            if let Some(image) = check_trigger(trigger, ins.line, reference)? {
                self.push(ins.line, image)?;
            }
        }
        Ok(Scope::from_env(&base.env))
    }
}

/// Checks an `ONBUILD` trigger of a base image (`trigger` is the instruction text the image records); `line` is
/// the line of the `FROM` that runs it. Returns the image a `COPY --from` trigger names.
pub fn check_trigger(trigger: &str, line: usize, image: &str) -> Result<Option<String>, Refusal> {
    let Some(ins) = instruction(line, trigger) else {
        return Ok(None);
    };
    match ins.keyword.as_str() {
        "ADD" | "COPY" => check_copy(
            &ins,
            &Scope::strict(),
            '\\',
            &HashMap::new(),
            &format!("the ONBUILD trigger `{trigger}` of {image}"),
        ),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plans `text` with every `FROM` image present (environment `envs` for all of them).
    fn plan_with(
        text: &str,
        args: &BTreeMap<String, String>,
        base: &BaseImage,
    ) -> Result<Vec<ExternalImage>, Refusal> {
        let bases = from_images(text, args)
            .into_iter()
            .map(|i| (i.reference, base.clone()))
            .collect();
        offline_plan(text, args, &bases)
    }

    fn plan(text: &str) -> Result<Vec<ExternalImage>, Refusal> {
        plan_with(text, &BTreeMap::new(), &BaseImage::default())
    }

    fn refused_at(text: &str) -> usize {
        match plan(text) {
            Err(r) => r.line,
            Ok(v) => panic!("not refused: {text:?} → {v:?}"),
        }
    }

    fn copies(text: &str) -> Vec<(usize, String)> {
        plan(text)
            .unwrap_or_else(|r| panic!("refused {text:?}: {r:?}"))
            .into_iter()
            .map(|i| (i.line, i.reference))
            .collect()
    }

    #[test]
    fn parse_joins_continuations_and_skips_comments() {
        let (ins, esc) = parse("# syntax=x\nFROM a\n\n# c\nRUN echo \\\n  # inside\n\n  b\nADD x y\n");
        assert_eq!(esc, '\\');
        let got: Vec<(usize, &str, &str)> = ins
            .iter()
            .map(|i| (i.line, i.keyword.as_str(), i.args.as_str()))
            .collect();
        assert_eq!(got, [(2, "FROM", "a"), (5, "RUN", "echo b"), (9, "ADD", "x y")]);
    }

    #[test]
    fn the_escape_directive_changes_the_continuation() {
        let text = "# escape=`\nFROM a\nadd `\n http://h/x /x\n";
        let (ins, esc) = parse(text);
        assert_eq!(esc, '`');
        assert_eq!((ins[1].line, ins[1].keyword.as_str()), (3, "ADD"));
        assert_eq!(refused_at(text), 3);
    }

    #[test]
    fn remote_add_is_refused_in_every_spelling() {
        for (text, line) in [
            ("FROM a\nADD http://10.0.0.1/x /x\n", 2),
            ("FROM a\nADD HTTPS://h/x /x\n", 2),
            ("FROM a\nadd --chown=1:1 http://h/x /x\n", 2),
            ("FROM a\nADD \"http://h/x\" /x\n", 2),
            ("FROM a\nADD http:\\/\\/h/x /x\n", 2),
            ("FROM a\nADD [\"http://h/x\", \"/x\"]\n", 2),
            ("FROM a\nADD --chmod=644 [\"local\", \"ftp://h/x\", \"/d/\"]\n", 2),
            ("FROM a\nADD git@github.com:o/r.git /r\n", 2),
            ("FROM a\nADD ssh://git@h/r.git /r\n", 2),
            ("FROM a\nRUN true\nADD \\\n  http://h/x \\\n  /x\n", 3),
            ("ARG U=http://h/x\nFROM a\nARG U\nADD $U /x\n", 4),
            ("FROM a\nARG U=http://h/x\nADD ${U} /x\n", 3),
            ("FROM a\nARG A=1 U=\"x http://h/y\"\nADD $U /x\n", 3),
            ("FROM a\nENV U=http://h/x\nADD ${U:-local} /x\n", 3),
            ("FROM a\nENV U http://h/x\nADD $U /x\n", 3),
            ("FROM a\nENV P=http: Q=//h/x\nADD $P$Q /x\n", 3),
            ("FROM a AS s\nENV U=http://h/x\nFROM s\nADD $U /x\n", 4),
            ("FROM a\nADD ${U:?x} /x\n", 2),
            ("FROM a\nONBUILD ADD http://h/x /x\n", 2),
            ("FROM a\nonbuild add ${X} /x\n", 2),
            ("FROM a\nADD --unknown=1 x /x\n", 2),
            ("FROM a\nADD --keep-git-dir=true x /x\n", 2),
        ] {
            assert_eq!(refused_at(text), line, "{text:?}");
        }
    }

    #[test]
    fn the_base_image_environment_wins_over_arg() {
        let base = BaseImage {
            env: vec!["U=http://h/x".into()],
            ..BaseImage::default()
        };
        let r = plan_with("FROM a\nARG U=local\nADD $U /x\n", &BTreeMap::new(), &base).expect_err("refused");
        assert_eq!(r.line, 3);
        assert!(r.reason.contains("http://h/x"), "{}", r.reason);
    }

    #[test]
    fn a_build_argument_decides_a_variable() {
        let mut args = BTreeMap::new();
        args.insert("U".to_owned(), "http://h/x".to_owned());
        let r =
            plan_with("FROM a\nARG U=local\nADD $U /x\n", &args, &BaseImage::default()).expect_err("refused");
        assert_eq!(r.line, 3);
        assert!(r.reason.contains("http://h/x"), "{}", r.reason);
        args.insert("U".to_owned(), "local".to_owned());
        assert!(
            plan_with(
                "FROM a\nARG U=http://h/x\nADD $U /x\n",
                &args,
                &BaseImage::default()
            )
            .is_ok()
        );
    }

    #[test]
    fn local_sources_and_copies_pass() {
        assert_eq!(
            copies(
                "FROM a\nADD x.tar /x\nCOPY --chown=1 . /src\nADD [\"a b\", \"/c\"]\nENV D=/d\nADD f $D\nADD \\$lit /l\n"
            ),
            []
        );
        assert_eq!(copies("FROM a\nARG F=file\nADD ${F} /x\nADD $UNSET/y /y\n"), []);
    }

    #[test]
    fn external_images_are_listed_with_their_lines() {
        let text = "ARG BASE=img:1\nFROM $BASE AS build\nRUN make\nFROM scratch\nCOPY --from=build /o /o\nCOPY --from=0 /o /p\nCOPY --from=other/img:2 /x /x\nFROM BUILD\n";
        let froms: Vec<(usize, String)> = from_images(text, &BTreeMap::new())
            .into_iter()
            .map(|i| (i.line, i.reference))
            .collect();
        assert_eq!(froms, [(2, "img:1".to_owned())]);
        assert_eq!(copies(text), [(7, "other/img:2".to_owned())]);
    }

    #[test]
    fn absent_or_unresolvable_base_images_are_refused() {
        let none = HashMap::new();
        let r = offline_plan("FROM a\nRUN x\nFROM b\n", &BTreeMap::new(), &none).expect_err("absent");
        assert_eq!(r.line, 1);
        assert!(r.reason.contains("not present"), "{}", r.reason);
        assert_eq!(refused_at("FROM a\nCOPY --from=${S:?no} /x /x\n"), 2);
        assert_eq!(refused_at("FROM --weird a\n"), 1);
        // A stage ARG is not seen by FROM: the reference is `b:`, which is not present.
        let text = "FROM a\nARG V=1\nFROM b:$V\n";
        let mut bases = HashMap::new();
        bases.insert("a".to_owned(), BaseImage::default());
        bases.insert("b:1".to_owned(), BaseImage::default());
        assert_eq!(
            offline_plan(text, &BTreeMap::new(), &bases).expect_err("b:").line,
            3
        );
        assert_eq!(
            from_images("ARG V\nFROM b:${V:-1}\n", &BTreeMap::new())[0].reference,
            "b:1"
        );
    }

    #[test]
    fn a_platform_other_than_the_present_image_is_refused() {
        let base = BaseImage {
            os: Some("linux".into()),
            arch: Some("amd64".into()),
            ..BaseImage::default()
        };
        let args = BTreeMap::new();
        assert!(plan_with("FROM --platform=linux/amd64 a\n", &args, &base).is_ok());
        assert_eq!(
            plan_with("FROM --platform=linux/arm64 a\n", &args, &base)
                .expect_err("arm")
                .line,
            1
        );
    }

    #[test]
    fn triggers_of_base_images_are_checked() {
        let base = BaseImage {
            onbuild: vec!["ADD http://h/x /x".into()],
            ..BaseImage::default()
        };
        let r = plan_with("# c\nFROM a\n", &BTreeMap::new(), &base).expect_err("refused");
        assert_eq!(r.line, 2);
        assert!(r.reason.contains("ONBUILD trigger"), "{}", r.reason);
        assert_eq!(check_trigger("COPY . /src", 1, "b").expect("ok"), None);
        assert_eq!(
            check_trigger("COPY --from=other:1 /x /x", 1, "b").expect("ok"),
            Some("other:1".to_owned())
        );
        assert_eq!(check_trigger("RUN make", 1, "b").expect("ok"), None);
        assert!(check_trigger("ADD $U /x", 1, "b").is_err());
    }

    #[test]
    fn words_are_unquoted_and_substituted_like_the_builder() {
        let mut sc = Scope::default();
        sc.args.insert("A".into(), "x".into());
        sc.args.insert("E".into(), String::new());
        let w = |s: &str| process_word(s, &sc, '\\');
        assert_eq!(w("$A/${A}").as_deref(), Ok("x/x"));
        assert_eq!(w("${E:-d}${A:-d}").as_deref(), Ok("dx"));
        assert_eq!(w("${E:+d}${A:+d}").as_deref(), Ok("d"));
        assert_eq!(w("\\$A $ 5$").as_deref(), Ok("$A $ 5$"));
        assert_eq!(w("'$A'\"$A\"").as_deref(), Ok("$Ax"));
        assert_eq!(w("$Z").as_deref(), Ok(""));
        assert_eq!(w("${A"), Err("${A".into()));
        assert_eq!(w("${A:?e}"), Err("A".into()));
        assert_eq!(process_word("$A", &Scope::strict(), '\\'), Err("A".into()));
        assert_eq!(
            quoted_words("A=1 U=\"x y\" 'q r'", '\\'),
            ["A=1", "U=\"x y\"", "'q r'"]
        );
    }
}
