//! The test vectors of 01 §12.1–§12.4 and §12.12, one line per case.

use iterion_spec::ast::Decl;
use iterion_spec::lexer::TokenKind;
use iterion_spec::model::{Node, SandboxDecl, Workflow};
use iterion_spec::{check, lex, parse};

// ---------------------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------------------

/// Renders diagnostics as `CODE@line:col` separated by spaces.
fn render(diags: &[iterion_spec::diag::Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| format!("{}@{}:{}", d.code, d.line, d.col))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Compares rendered diagnostics with `expect`; an expected token without `@` compares the code only.
fn same(got: &str, expect: &str, what: &str) {
    let g: Vec<&str> = got.split_whitespace().collect();
    let e: Vec<&str> = expect.split_whitespace().collect();
    let ok = g.len() == e.len()
        && g.iter().zip(&e).all(|(g, e)| {
            if e.contains('@') {
                g == e
            } else {
                g.split('@').next() == Some(e)
            }
        });
    assert!(ok, "{what}\n  got:    {got}\n  expect: {expect}");
}

/// Parse-only diagnostics.
fn parse_diags(src: &str, expect: &str) {
    let (_, d) = parse(src, "t.bot");
    same(&render(&d), expect, &format!("parse {src:?}"));
}

/// Diagnostics of lex + parse + compile.
fn check_diags(src: &str, expect: &str) {
    let c = check(src, "t.bot");
    if std::env::var_os("LANG_VECTORS_PRINT").is_some() {
        println!("{expect:30} => {}", render(&c.diagnostics));
        return;
    }
    same(&render(&c.diagnostics), expect, &format!("check {src:?}"));
}

/// The text of the first string or prompt-body token.
fn lex_str(src: &str, expect: &str) {
    let l = lex(src, "t.bot");
    let t = l
        .tokens
        .iter()
        .find(|t| matches!(t.kind, TokenKind::Str | TokenKind::PromptBody))
        .unwrap_or_else(|| panic!("no string token in {src:?}"));
    assert_eq!(l.text(t), expect, "lex {src:?}");
}

fn nodes(src: &str) -> Vec<Node> {
    let (ast, _) = parse(src, "t.bot");
    ast.decls
        .iter()
        .filter_map(|d| match d {
            Decl::Node(i) => ast.node(*i).cloned(),
            _ => None,
        })
        .collect()
}

fn compiled(src: &str) -> Workflow {
    let c = check(src, "t.bot");
    assert!(!c.has_errors(), "{src}\n{}", render(&c.diagnostics));
    c.workflows.into_iter().next().expect("a workflow")
}

/// A file with one tool `t` and a workflow whose body gets `wf` (indented by two spaces).
fn with_tool(tool_extra: &str, wf: &str) -> String {
    format!("tool t:\n  command: \"true\"\n{tool_extra}\nworkflow w:\n  entry: t\n{wf}  t -> done\n")
}

// ---------------------------------------------------------------------------------------------------------
// 12.1 lexer
// ---------------------------------------------------------------------------------------------------------

#[test]
fn l01_comment_only() {
    let l = lex("## only a comment\n", "t.bot");
    assert_eq!(l.tokens.len(), 1);
    assert_eq!(l.tokens[0].kind, TokenKind::Eof);
    assert!(l.diagnostics.is_empty());
}

#[test]
fn l02_single_hash() {
    let (_, d) = parse("# note\n", "t.bot");
    same(&render(&d), "E001@1:1", "L2");
    assert!(d[0].hint.as_deref().unwrap_or("").contains("##"));
}

#[test]
fn l03_bom_and_crlf() {
    let a = parse("\u{feff}vars:\r\n  a: int = 1\r\n", "t.bot");
    let b = parse("vars:\n  a: int = 1\n", "t.bot");
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert!(a.1.is_empty());
}

#[test]
fn lexer_diagnostics() {
    parse_diags("agent a:\n\tmodel: \"m\"\n", "E003@2:1"); // L4
    parse_diags("agent a:\n  model: \"m\"\n   \t\n  backend: \"claw\"\n", ""); // L5
    parse_diags("agent a:\n    model: \"m\"\n  backend: \"claw\"\n", "E003@3:3"); // L6
    parse_diags("x: \"\\q\"\n", "E001@1:1"); // legacy: no escape error, only the junk line
    parse_diags(
        "## strict-escape: on\nvars:\n  x: string = \"\\q\"\n",
        "E005@3:16",
    ); // L9
    parse_diags("tool t:\n  command: |  extra\n", "E006@2:15"); // E006 with a key
    parse_diags("tool t:\n  command: `never closed\n", "E004@2:12"); // raw string
    parse_diags("tool t:\n  command: \"open\n", "E004@2:12"); // quoted
    parse_diags("workflow w:\n  budget:\n    max_cost_usd: -1\n", "E001@3:19"); // L17
    parse_diags("vars:\n  t: string[]\n  u: string []\n", "E002@3:13"); // L18
    parse_diags("agent écrivain:\n  model: \"m\"\n", ""); // L20
    parse_diags("agent my-node:\n  model: \"m\"\n", "E001@1:9"); // L20
    parse_diags("prompt p:\n    a\n   b\n", "E003@3:4"); // L25
}

#[test]
fn l13_l19_l21_fragments() {
    let lexd = |src: &str, expect: &str| {
        let l = lex(src, "t.bot");
        same(&render(&l.diagnostics), expect, src);
    };
    lexd("x: | extra\n", "E006@1:6"); // L13
    lexd("x: a|b\n", "E001@1:5"); // L19
    lexd("n: 99999999999999999999\n", "E020@1:4"); // L21
}

#[test]
fn l02_hint_for_hyphen() {
    let (_, d) = parse("agent my-node:\n  model: \"m\"\n", "t.bot");
    assert_eq!(
        d[0].hint.as_deref(),
        Some("quote values that contain dots or hyphens")
    );
}

#[test]
fn lexer_strings() {
    lex_str("x: \"a\\nb\"", "a\\nb"); // L7: 4 characters
    lex_str("x: \"say \\\"hi\\\"\"", "say \\\"hi\\\""); // L8
    lex_str("## strict-escape: on\nx: \"a\\tb\"", "a\tb"); // L9
    lex_str("x: `line1\n  line2`", "line1\n  line2"); // L10
    lex_str("x: |\n  a\n  b", "a\nb"); // L12
    lex_str("x: |\n  line1\n\n\ny: 1\n", "line1\n\n\n"); // 1.5.3 example
    lex_str(
        "prompt p:\n  First line.\n\n    Indented line.\n  ## not a comment\n\n\nagent a:\n",
        "First line.\n\n  Indented line.\n## not a comment",
    ); // L14
    lex_str("prompt p: ## note\n  Hello\n", "Hello"); // L15
    lex_str(
        "prompt system:\n  Be brief, {{input.x}}.\n",
        "Be brief, {{input.x}}.",
    ); // L16
    lex_str("prompt empty:\nagent a:\n", ""); // empty prompt
}

#[test]
fn l11_block_scalar_script() {
    let n =
        nodes("tool t:\n  script: |\n    echo one\n      echo two\n\n    echo three\n\n\n  language: sh\n");
    assert_eq!(
        n[0].script.as_ref().map(|s| s.value.as_str()),
        Some("echo one\n  echo two\n\necho three\n\n\n")
    );
    assert_eq!(n[0].language.as_ref().map(|s| s.value.as_str()), Some("sh"));
}

#[test]
fn l16_prompt_named_by_keyword() {
    let (ast, d) = parse("prompt system:\n  Be brief, {{input.x}}.\n", "t.bot");
    assert!(d.is_empty());
    let Decl::Prompt(p) = &ast.decls[0] else {
        panic!("not a prompt")
    };
    assert_eq!(p.name.value, "system");
}

#[test]
fn l18_string_list_type() {
    let (ast, _) = parse("vars:\n  t: string[]\n  u: string []\n", "t.bot");
    let Decl::Vars(v) = &ast.decls[0] else {
        panic!("not vars")
    };
    assert_eq!(v.vars[0].ty.as_str(), "string[]");
}

#[test]
fn l22_strict_escape_directive() {
    assert!(lex("## hello\n## strict-escape = on\nvars:\n", "t").strict_escape);
    assert!(!lex("vars:\n## strict-escape: on\n", "t").strict_escape);
    assert!(lex("\n## strict-escape:on\n", "t").strict_escape);
    assert!(!lex("## strict-escape: off\n", "t").strict_escape);
}

#[test]
fn l23_size_limit() {
    let big = vec![b' '; 10 * 1024 * 1024 + 1];
    let (_, d) = iterion_spec::parser::parse_bytes(&big, "t.bot");
    same(&render(&d), "E007@1:1", "L23");
    let c = iterion_spec::check_bytes(&big, "t.bot");
    same(&render(&c.diagnostics), "E007@1:1", "L23 check");
}

#[test]
fn e007_invalid_utf8() {
    let (_, d) = iterion_spec::parser::parse_bytes(b"vars:\n  a: int\xff\n", "t.bot");
    same(&render(&d), "E007@2:9", "invalid utf-8");
}

#[test]
fn l24_multiline_list() {
    let src = with_tool(
        "",
        "  sandbox:\n    mode: auto\n    mounts: [\n        \"type=volume,source=a,target=/a\",\n        \"type=volume,source=b,target=/b\",\n      ]\n",
    );
    let l = lex(&src, "t.bot");
    let open = l
        .tokens
        .iter()
        .position(|t| t.kind == TokenKind::LBracket)
        .unwrap();
    let close = l
        .tokens
        .iter()
        .position(|t| t.kind == TokenKind::RBracket)
        .unwrap();
    assert!(
        l.tokens[open..close]
            .iter()
            .all(|t| !matches!(t.kind, TokenKind::Indent | TokenKind::Dedent | TokenKind::Nl))
    );
    let w = compiled(&src);
    let mounts: Vec<&str> = w
        .sandbox
        .as_ref()
        .unwrap()
        .mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.as_str())
        .collect();
    assert_eq!(
        mounts,
        ["type=volume,source=a,target=/a", "type=volume,source=b,target=/b"]
    );
}

// ---------------------------------------------------------------------------------------------------------
// 12.2 parser
// ---------------------------------------------------------------------------------------------------------

fn edges_of(wf_body: &str) -> (Vec<iterion_spec::model::Edge>, String) {
    let src = format!("workflow w:\n  entry: a\n{wf_body}");
    let (ast, d) = parse(&src, "t.bot");
    let e = ast
        .decls
        .into_iter()
        .find_map(|d| match d {
            Decl::Workflow(w) => Some(w.edges),
            _ => None,
        })
        .unwrap_or_default();
    (e, render(&d))
}

fn strip_spans(e: &iterion_spec::model::Edge) -> String {
    serde_json::to_string(e).unwrap()
}

#[test]
fn p01_clause_order() {
    let (a, da) = edges_of("  a -> b with { k: \"v\" } as l(2) when ok\n");
    let (b, db) = edges_of("  a -> b when ok as l(2) with { k: \"v\" }\n");
    assert_eq!((da.as_str(), db.as_str()), ("", ""));
    assert_eq!(strip_spans(&a[0]), strip_spans(&b[0]));
}

#[test]
fn p02_duplicate_clause() {
    let (e, d) = edges_of("  a -> b when ok when not ok\n");
    same(&d, "E030@3:18", "P2");
    assert_eq!(
        strip_spans(&e[0]),
        r#"{"from":"a","to":"b","condition":{"type":"field","field":"ok","negated":false}}"#
    );
}

#[test]
fn p03_multiline_with() {
    let (e, d) = edges_of("  a -> b with {\n  x: \"1\" ## c\n  y: \"2\"\n}\n");
    assert_eq!(d, "");
    assert_eq!(serde_json::to_string(&e[0].with).unwrap(), r#"{"x":"1","y":"2"}"#);
}

#[test]
fn p04_property_words_as_nodes() {
    let src = "tool sandbox:\n  command: \"true\"\n\nworkflow w:\n  entry: sandbox\n  sandbox: auto\n  sandbox -> done\n";
    let w = compiled(src);
    assert_eq!(w.edges[0].from.value, "sandbox");
    assert_eq!(w.sandbox.as_ref().and_then(|s| s.mode_str()), Some("auto"));
}

#[test]
fn parser_diagnostics() {
    parse_diags(
        "tool fork:\n  command: \"x\"\nagent input:\n  model: \"m\"\ntool inherit_if_available:\n  command: \"y\"\n",
        "",
    ); // P5
    parse_diags("vars:\n  a: int\nvars:\n  b: int\n", "E014@3:1"); // P6
    parse_diags("agent a:\n  colour: \"red\"\n  model: \"m\"\n", "E012@2:3"); // P7
    parse_diags("vars:\n  n: int = \"3\"\n", "E020@2:12"); // P10
    parse_diags(
        "agent done:\n  model: \"m\"\ntool fail:\n  command: \"x\"\n",
        "C042@1:7 C042@3:6",
    ); // P11, as the reference validator reports a node declared done or fail
    parse_diags("schema done:\n  a: string\n", "E011@1:8"); // other declarations stay E011
    parse_diags("@@@\nagent a:\n  model: \"m\"\n", "E001@1:1"); // P12
    parse_diags("agent a:\n  model: \"m\"\n  model: \"n\"\n", ""); // P13
    parse_diags("vars:\n  a: int\n  a: bool\n", "E010@3:3"); // P14
    parse_diags("vars:\n  a: integer\n", "E021@2:6"); // E021
    parse_diags("junk here\nagent a:\n  model: \"m\"\n", "E001@1:1"); // top-level junk recovery
    parse_diags("schema s:\n  n: int [enum: \"a\"]\n", "E020@2:10"); // enum on a non-string field
    parse_diags("agent a:\n  readonly: \"yes\"\n", "E020@2:13"); // wrong value kind
    parse_diags("agent a:\n  session: forever\n", "E020@2:12"); // session values
}

#[test]
fn p07_p13_values_kept() {
    let n = nodes("agent a:\n  colour: \"red\"\n  model: \"m\"\n");
    assert_eq!(n[0].model.as_ref().unwrap().value, "m");
    let n = nodes("agent a:\n  model: \"m\"\n  model: \"n\"\n");
    assert_eq!(n[0].model.as_ref().unwrap().value, "n");
}

#[test]
fn p08_dotted_bare_value() {
    let src = with_tool("", "  sandbox:\n    network:\n      rules: [github.com]\n");
    let (_, d) = parse(&src, "t.bot");
    same(&render(&d), "E001@8:21", "P8");
    assert_eq!(
        d[0].hint.as_deref(),
        Some("quote values that contain dots or hyphens")
    );
}

#[test]
fn p09_json_defaults() {
    let (ast, d) = parse(
        "vars:\n  tags: string[] = [\"a\", \"b\"]\n  cfg: json = {retries: 3, mode: \"fast\"}\n  csv: string[] = \"x, y\"\n",
        "t.bot",
    );
    assert!(d.is_empty(), "{d:?}");
    let Decl::Vars(v) = &ast.decls[0] else { panic!() };
    let defaults: Vec<String> = v
        .vars
        .iter()
        .map(|v| v.default.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(
        defaults,
        [r#"["a","b"]"#, r#"{"retries":3,"mode":"fast"}"#, r#"["x","y"]"#]
    );
}

#[test]
fn p14_first_duplicate_kept() {
    let (ast, _) = parse("vars:\n  a: int\n  a: bool\n", "t.bot");
    let Decl::Vars(v) = &ast.decls[0] else { panic!() };
    assert_eq!(v.vars.len(), 1);
    assert_eq!(v.vars[0].ty.as_str(), "int");
}

// ---------------------------------------------------------------------------------------------------------
// 12.3 compiler
// ---------------------------------------------------------------------------------------------------------

const AB: &str = "tool a:\n  command: \"a\"\ntool b:\n  command: \"b\"\ntool c:\n  command: \"c\"\nschema out:\n  ok: bool\n  s: string\n";

fn graph(edges: &str) -> String {
    format!("{AB}tool d:\n  command: \"d\"\n  output: out\nworkflow w:\n  entry: a\n{edges}")
}

#[test]
fn compiler_diagnostics() {
    check_diags("prompt p:\n  hi\n", "C006@1:1"); // C-1
    check_diags(
        &format!("{AB}workflow w:\n  entry: a\n  a -> done\nworkflow v:\n  entry: a\n"),
        "C016@3:6 C016@5:6 C007@13:10",
    ); // C-2
    check_diags(&format!("{AB}workflow w:\n  a -> done\n"), "C008@10:10"); // C-3 (without a valid entry reachability is not checked)
    check_diags(&graph("  a -> zz\n"), "C016@3:6 C016@5:6 C016@10:6 C001@15:8"); // C-4
    check_diags(
        &graph("  a -> b\n  a -> c\n  b -> done\n  c -> done\n  d -> done\n"),
        "C016@10:6 C010@16:5",
    ); // C-5
    check_diags(
        &graph("  a -> d\n  d -> b when ok\n  b -> done\n"),
        "C016@5:6 C012@16:5",
    ); // C-6
    check_diags(&graph("  a -> b\n  b -> a\n"), "C016@5:6 C016@10:6 C019@16:5"); // C-7
    check_diags(
        &graph("  a -> a as l(0)\n  a -> done\n"),
        "C016@3:6 C016@5:6 C016@10:6 C026@15:15",
    ); // C-8
    check_diags(
        &graph("  a -> b as l(2)\n  b -> a as l(3)\n  a -> done\n  b -> done\n"),
        "C016@5:6 C016@10:6 C005@16:15",
    ); // C-8
    // a `when FIELD` on a source without an output schema is not checked (the reference validator says
    // nothing; this used to be a C032 warning)
    check_diags(
        &graph("  a -> d when ok\n  a -> done\n  d -> done\n"),
        "C016@3:6 C016@5:6",
    );
    check_diags(
        &graph("  a -> d\n  d -> b when s\n  d -> done\n  b -> done\n"),
        "C016@5:6 C013@16:15",
    ); // C-10
    check_diags(
        &graph("  a -> d\n  d -> b when nope\n  d -> done\n  b -> done\n"),
        "C016@5:6 C014@16:15",
    ); // C014
    check_diags(
        &graph("  a -> d\n  d -> b when \"status ==\"\n  d -> done\n  b -> done\n"),
        "C016@5:6 C040@16:25",
    ); // C-17
    check_diags(
        &graph("  a -> d\n  d -> b when ok\n  d -> c when not ok\n  b -> done\n  c -> done\n"),
        "",
    ); // exhaustive pair
    check_diags(
        &graph("  a -> d\n  d -> b when ok\n  d -> c when ok\n  d -> done\n  b -> done\n  c -> done\n"),
        "C011@17:5",
    ); // C011
    // an edge may leave `done`: `done` is a node of the graph (this used to be C042); the reference validator
    // reports only what such an edge breaks (cycles, C019; unreachable nodes, C016)
    check_diags(
        &graph("  done -> a\n  entry_is_fine -> done\n"),
        "C016@3:6 C016@5:6 C016@10:6 C001@16:3",
    );
}

#[test]
fn c07_first_workflow_used_and_parse_errors_block_compile() {
    // every further workflow is reported at its name against the first, which alone is compiled
    check_diags(
        &format!(
            "{AB}workflow w:\n  entry: a\n  a -> zz\nworkflow v:\n  entry: b\nworkflow u:\n  b -> done\n"
        ),
        "C016@3:6 C016@5:6 C001@12:8 C007@13:10 C007@15:10",
    );
    let c = check(
        &format!("{AB}workflow w:\n  entry: a\nworkflow v:\n  entry: a\n"),
        "t.bot",
    );
    let c007: Vec<_> = c.diagnostics.iter().filter(|d| d.code == "C007").collect();
    assert_eq!(c007.len(), 1);
    assert_eq!(
        c007[0].message,
        "more than one workflow ('w', 'v'); only the first is used"
    );
    assert_eq!(c.workflows.len(), 1);
    assert_eq!(c.workflows[0].name.value, "w");
    // lexing or parsing errors block compilation: the unknown edge target is not reported, nothing compiles
    let c = check(&format!("{AB}workflow w:\n  entry: a\n  a -> zz\n  @\n"), "t.bot");
    assert_eq!(render(&c.diagnostics), "E001@13:3");
    assert!(c.workflows.is_empty());
}

/// An agent `a` with `agent_extra` properties in a workflow with `wf_extra` properties (indented by two).
fn caps(agent_extra: &str, wf_extra: &str) -> String {
    format!("agent a:\n  model: \"m\"\n{agent_extra}workflow w:\n  entry: a\n{wf_extra}  a -> done\n")
}

#[test]
fn c082_board_capabilities_in_a_sandbox() {
    let board = "  capabilities: [board.read, boardroom.read, web.fetch, board]\n";
    // boardroom.read, web.fetch and board are well formed but not in the registry
    const UNKNOWN: &str = "C080@3:30 C080@3:46 C080@3:57";
    // an active workflow sandbox (auto, inline): every board capability of its nodes; the workflow's own
    // capabilities are not warned about (as the reference validator does; this used to warn at 6:18 too)
    check_diags(
        &caps(board, "  capabilities: [board.*]\n  sandbox: auto\n"),
        "C082@3:18 C080@3:30 C080@3:46 C082@3:57 C080@3:57 C081@6:18",
    );
    check_diags(
        &caps(board, "  sandbox:\n    image: \"alpine:3\"\n"),
        "C082@3:18 C080@3:30 C080@3:46 C082@3:57 C080@3:57",
    );
    // no declared sandbox, an explicit none, or a block that only overrides the network: not active
    check_diags(&caps(board, "  capabilities: [board.close]\n"), UNKNOWN);
    check_diags(&caps(board, "  sandbox: none\n"), &format!("{UNKNOWN} C128@6:3"));
    check_diags(
        &caps(board, "  sandbox:\n    network:\n      mode: open\n"),
        UNKNOWN,
    );
    // a node's own sandbox: none makes no difference, and the workflow's capabilities are not warned about
    // (as the reference validator does; this used to skip the node and warn at 7:18)
    check_diags(
        &caps(
            &format!("{board}  sandbox: none\n"),
            "  capabilities: [board.move]\n  sandbox: auto\n",
        ),
        "C082@3:18 C080@3:30 C080@3:46 C082@3:57 C080@3:57 C128@4:3",
    );
    let c = check(&caps(board, "  sandbox: auto\n"), "t.bot");
    assert!(!c.has_errors());
    assert_eq!(
        c.diagnostics[0].render_header(),
        "t.bot:3:18: warning[C082]: capability 'board.read' is not reachable from inside the sandbox"
    );
    assert_eq!((c.diagnostics[0].end_line, c.diagnostics[0].end_col), (3, 28));
}

#[test]
fn c080_c081_capability_names() {
    let t = |list: &str, expect: &str| {
        check_diags(&caps(&format!("  capabilities: [{list}]\n"), ""), expect);
    };
    // every registered capability, no diagnostic
    t(
        "board.read, board.create, board.move, board.assign, board.label, board.close, board.comment",
        "",
    );
    t("watch.subscribe, watch.unsubscribe", "");
    // well formed but unknown: a warning, the name is passed through
    t("runs.read", "C080@3:18");
    t("web", "C080@3:18");
    t("x_1.y_2", "C080@3:18");
    // malformed: upper case, three parts, a wildcard, a part starting with an underscore
    t("Board.Read", "C081@3:18");
    t("board.read.all", "C081@3:18");
    t("board.*", "C081@3:18");
    // (a name starting with a digit is not a list item at all: E020 from the parser)
    t("1board.read", "E020@3:18");
    t("board._read", "C081@3:18");
    // the workflow's own list is checked too
    check_diags(
        &caps("", "  capabilities: [Bad.Cap, runs.read]\n"),
        "C081@5:18 C080@5:27",
    );
    let c = check(&caps("  capabilities: [Read]\n", ""), "t.bot");
    assert!(c.has_errors());
    assert_eq!(
        c.diagnostics[0].render_header(),
        "t.bot:3:18: error[C081]: malformed capability 'Read'"
    );
    let c = check(&caps("  capabilities: [runs.read]\n", ""), "t.bot");
    assert!(!c.has_errors());
    assert_eq!(
        c.diagnostics[0].render_header(),
        "t.bot:3:18: warning[C080]: unknown capability 'runs.read'"
    );
}

#[test]
fn c060_playwright_mcp_needs_a_browser_image() {
    let src = |server: &str, sandbox: &str| {
        format!(
            "mcp_server pw:\n  transport: stdio\n{server}agent a:\n  model: \"m\"\nworkflow w:\n  entry: a\n{sandbox}  a -> done\n"
        )
    };
    let npx = "  command: \"npx\"\n  args: [\"-y\", \"@playwright/mcp@latest\"]\n";
    let bin = "  command: \"/usr/local/bin/playwright-mcp\"\n";
    let other = "  command: \"npx\"\n  args: [\"@modelcontextprotocol/server-filesystem\"]\n";
    let plain = "  sandbox:\n    image: \"alpine:3\"\n";
    let browser = "  sandbox:\n    image: \"ghcr.io/acme/iterion-sandbox-browser:1\"\n";
    let full = "  sandbox:\n    image: \"Acme-Sandbox-Full-Browser:edge\"\n";
    // an inline image without a browser: refused at the server's name
    check_diags(&src(npx, plain), "C060@1:12");
    check_diags(&src(bin, plain), "C060@1:12");
    // a browser image, another server, or no inline image literal: nothing
    check_diags(&src(npx, browser), "");
    check_diags(&src(npx, full), "");
    check_diags(&src(other, plain), "");
    check_diags(&src(npx, ""), "");
    check_diags(&src(npx, "  sandbox: none\n"), "C128@9:3");
    let c = check(&src(npx, plain), "t.bot");
    assert_eq!(
        c.diagnostics[0].render_header(),
        "t.bot:1:12: error[C060]: mcp_server 'pw' needs a browser sandbox image"
    );
}

#[test]
fn c09_templates() {
    let t = |cmd: &str, expect: &str| {
        let src = format!(
            "vars:\n  v: string\ntool t:\n  command: \"{cmd}\"\nworkflow w:\n  entry: t\n  t -> done\n"
        );
        check_diags(&src, expect);
    };
    t("echo {{outputs.zz.x}}", "C029@4:18");
    t("echo {{vars.nope}}", "C033@4:18");
    t("echo {{vars.v}} {{run.id}}", "");
    t("echo {{foo.bar}}", "C004@4:18");
    t("echo {{input.a", "C004@4:18");
    // an unavailable node stops the checks of that placeholder (no C032 after C036)
    t("echo {{outputs.t.x}}", "C036@4:18");
    t("echo {{artifacts.report}}", "C035@4:18");
    // the reference validator's numbering: C053 unknown attachment (C052 is an invalid accept_mime)
    t("echo {{attachments.doc}}", "C053@4:18");
}

#[test]
fn c11_tools() {
    let t = |props: &str, expect: &str| {
        check_diags(
            &format!("tool t:\n{props}workflow w:\n  entry: t\n  t -> done\n"),
            expect,
        );
    };
    // the reference validator's numbering: C004 for every tool shape problem (these were C088/C089)
    t("  command: \"a\"\n  script: \"b\"\n", "C004@1:6");
    t("  output: x\n", "C004@1:6 C002@2:11");
    t("  command: \"a\"\n  language: sh\n", "C004@3:13");
    t("  script: \"a\"\n  language: cobol\n", "C004@3:13");
    // an unknown language is reported even without a script; a missing script only next to a command
    t("  language: cobol\n", "C004@1:6 C004@2:13");
}

#[test]
fn c12_c15_agents() {
    let t = |props: &str, expect: &str| {
        check_diags(
            &format!("agent a:\n{props}workflow w:\n  entry: a\n  a -> done\n"),
            expect,
        );
    };
    t("  system: p\n", "C018@1:7 C003@2:11"); // claw without model
    t("  backend: \"claude_code\"\n", ""); // C-12
    // an unknown backend name is not a language error (the reference validator has no such check; this
    // used to be C087): `run` refuses it
    t("  backend: \"gemini\"\n", ""); // C-15
    t("  backend: \"${B:-claw}\"\n", ""); // C-15
    t("  backend: \"codex\"\n", "C030@2:12");
    // a bare word outside the list is the parser's E020 (as the reference reads it); a quoted one the compiler's
    t("  model: \"m\"\n  reasoning_effort: extreme\n", "E020@3:21");
    t("  model: \"m\"\n  reasoning_effort: \"extreme\"\n", "C027@3:21");
    t("  model: \"m\"\n  memory:\n    enabled: true\n", "C048@1:7");
    t("  model: \"m\"\n  compaction:\n    threshold: 1.5\n", "C043@1:7");
}

#[test]
fn c13_c14_c16_workflow_props() {
    let t = |wf: &str, expect: &str| check_diags(&with_tool("", wf), expect);
    t("  budget:\n    max_duration: \"90 minutes\"\n", "C091@7:19"); // C-13
    t(
        "  budget:\n    max_duration: \"1h30m\"\n    max_cost_usd: 2.5\n",
        "",
    );
    t("  worktree: sometimes\n", "C090@6:13"); // C-14
    t("  worktree: auto\n", "");
    // `entry: done` is not C042 nor C008: nothing else is reachable (C016), as the reference validator says
    check_diags(
        "tool t:\n  command: \"x\"\nworkflow w:\n  entry: done\n  t -> done\n",
        "C016@1:6",
    ); // C-16
}

// ---------------------------------------------------------------------------------------------------------
// 12.4 sandbox blocks
// ---------------------------------------------------------------------------------------------------------

fn wf_sandbox(block: &str) -> (Option<SandboxDecl>, String) {
    let src = with_tool("", &indent(block, 2));
    let c = check(&src, "t.bot");
    let s = c.workflows.first().and_then(|w| w.sandbox.clone()).or_else(|| {
        // compile is skipped after parse errors: read the declaration from the tree
        let (ast, _) = iterion_spec::parse(&src, "t.bot");
        ast.decls.into_iter().find_map(|d| match d {
            Decl::Workflow(w) => w.sandbox,
            _ => None,
        })
    });
    (s, codes(&c.diagnostics))
}

fn node_sandbox(block: &str) -> (Option<SandboxDecl>, String) {
    let src = with_tool(&indent(block, 2), "");
    let c = check(&src, "t.bot");
    let s = c
        .workflows
        .first()
        .and_then(|w| w.node("t").and_then(|n| n.sandbox.as_deref().cloned()));
    (s, codes(&c.diagnostics))
}

fn indent(s: &str, n: usize) -> String {
    s.lines().map(|l| format!("{}{l}\n", " ".repeat(n))).collect()
}

fn codes(d: &[iterion_spec::diag::Diagnostic]) -> String {
    d.iter().map(|d| d.code).collect::<Vec<_>>().join(" ")
}

/// `kind` is the derived block kind (`-` when there is no declaration), `expect` the diagnostic codes.
fn sb(r: (Option<SandboxDecl>, String), kind: &str, expect: &str) {
    let (decl, got) = r;
    let k = decl.map_or("-", |d| d.kind.as_str());
    assert_eq!((k, got.as_str()), (kind, expect));
}

#[test]
fn sandbox_secrets() {
    let ok = "sandbox:\n  mode: auto\n  secrets:\n    GH_TOKEN: [\"api.github.com\"]\n    NPM_TOKEN:\n      hosts: [\"registry.npmjs.org\", \"127.0.0.1:8080\"]\n      plain_http: true\n    DEPLOY_KEY:\n      as: file";
    let (decl, got) = wf_sandbox(ok);
    assert_eq!(got, "");
    let secrets = decl.unwrap().secrets.unwrap();
    let names: Vec<&str> = secrets.iter().map(|s| s.name.value.as_str()).collect();
    assert_eq!(names, ["GH_TOKEN", "NPM_TOKEN", "DEPLOY_KEY"]);
    assert_eq!(secrets[1].plain_http, Some(true));
    assert_eq!(secrets[2].delivery.as_ref().unwrap().value, "file");
    for bad in [
        "    GH_TOKEN: []",                           // no host: could go nowhere
        "    GH_TOKEN: [\"!api.github.com\"]",        // a negation
        "    GH_TOKEN: [\"https://api.github.com\"]", // a URL
        "    GH_TOKEN: [\"10.0.0.0/8\"]",             // a range
        "    ITERION_X: [\"a.example\"]",             // iterion's namespace
        "    HTTPS_PROXY: [\"a.example\"]",           // set by the run
        "    K:\n      as: file\n      hosts: [\"a.example\"]",
        "    K:\n      as: mail",
        "    K: [\"a.example\"]\n    K: [\"b.example\"]",
    ] {
        let (_, got) = wf_sandbox(&format!("sandbox:\n  mode: auto\n  secrets:\n{bad}"));
        assert!(got.split(' ').any(|c| c == "C132"), "{bad}: {got}");
    }
    let (_, got) = node_sandbox("sandbox:\n  secrets:\n    K: [\"a.example\"]");
    assert!(got.contains("C132"), "{got}");
    // an unknown property of a secret is named
    let (_, got) = wf_sandbox("sandbox:\n  mode: auto\n  secrets:\n    K:\n      host: [\"a\"]");
    assert!(got.contains("E012"), "{got}");
}

#[test]
fn sandbox_blocks() {
    sb(wf_sandbox("sandbox: auto"), "auto", ""); // S1
    sb(wf_sandbox("sandbox: none"), "off", "C128"); // S1
    sb(wf_sandbox("sandbox: inline"), "invalid", "C044"); // S2
    sb(wf_sandbox("sandbox: Auto"), "invalid", "C044"); // S2
    sb(wf_sandbox("sandbox: docker"), "invalid", "C044"); // S2
    sb(wf_sandbox("sandbox:\n  image: \"alpine:3.20\""), "inline", ""); // S3
    sb(
        wf_sandbox("sandbox:\n  image: \"a\"\n  build:\n    dockerfile: \"D\""),
        "invalid",
        "C044",
    ); // S4
    sb(
        wf_sandbox("sandbox:\n  mode: inline\n  user: \"1000\""),
        "invalid",
        "C044",
    ); // S5
    sb(wf_sandbox("sandbox:\n  host_state: none"), "override", ""); // S6
    sb(
        wf_sandbox("sandbox:\n  network:\n    rules: [\"a.com\"]"),
        "override",
        "",
    ); // S7
    sb(
        node_sandbox("sandbox:\n  network:\n    rules: [\"a.com\"]"),
        "override",
        "",
    ); // S8
    sb(node_sandbox("sandbox:\n  host_state: none"), "invalid", "C094"); // S8
    sb(
        node_sandbox("sandbox:\n  network:\n    rules: [\"a.com\"]\n  env:\n    A: \"1\""),
        "invalid",
        "C044",
    ); // S8
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  image: \"x\""),
        "invalid",
        "C093",
    ); // S9
    sb(
        wf_sandbox("sandbox:\n  mode: none\n  image: \"x\""),
        "off",
        "C092 C128",
    ); // S10
    sb(
        wf_sandbox("sandbox:\n  network:\n    mode: strict"),
        "override",
        "C095",
    ); // S11
    sb(
        wf_sandbox("sandbox:\n  network:\n    preset: \"iterion-defaults\""),
        "override",
        "C096",
    ); // S11
    sb(
        wf_sandbox("sandbox:\n  network:\n    preset: \"none\""),
        "override",
        "",
    );
    sb(
        wf_sandbox("sandbox:\n  network:\n    inherit: replace"),
        "override",
        "C098",
    ); // S14
    // `append` is `merge`: a mode beside it is valid
    sb(
        node_sandbox("sandbox:\n  network:\n    inherit: append\n    mode: denylist"),
        "override",
        "",
    ); // S14
    sb(
        node_sandbox("sandbox:\n  network:\n    inherit: keep"),
        "override",
        "C098",
    ); // S14
    sb(
        wf_sandbox("sandbox:\n  network:\n    mode: open\n    rules: [\"a.com\"]"),
        "override",
        "C099",
    ); // S15
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  workspace_folder: \"workspace\""),
        "auto",
        "C100",
    ); // S16
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  workspace_folder: \"${localWorkspaceFolder}/x\""),
        "auto",
        "",
    ); // S16
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  user: \"-u root\""),
        "auto",
        "C101",
    ); // S17
    sb(wf_sandbox("sandbox:\n  mode: auto\n  user: \"node\""), "auto", ""); // S17
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  user: \"1000:1000\""),
        "auto",
        "",
    ); // S17
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  user: \"1000 : 1000\""),
        "auto",
        "C101",
    ); // S17
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  mounts: [\"type=bind,source=/a,target=rel\"]"),
        "auto",
        "C102",
    ); // S18
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  mounts: [\"-v /a:/b\"]"),
        "auto",
        "C102",
    ); // S18
    sb(
        wf_sandbox(
            "sandbox:\n  mode: auto\n  mounts: [\"type=volume,source=x,target=/y,volume-opt=o=bind\"]",
        ),
        "auto",
        "C102",
    ); // S18
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  mounts: [\"type=BIND,src=/a,dst=/b,ro\"]"),
        "auto",
        "",
    ); // S19
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  mounts: [`type=bind,\"source=/a,b\",target=/c`]"),
        "auto",
        "",
    ); // S19
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  env:\n    X: |\n      a\n      b"),
        "auto",
        "C103",
    ); // S20
    sb(
        wf_sandbox("sandbox:\n  build:\n    dockerfile: \"../Dockerfile\""),
        "inline",
        "C104",
    ); // S21
    sb(
        wf_sandbox("sandbox:\n  build:\n    dockerfile: \"/abs/Dockerfile\""),
        "inline",
        "C104",
    ); // S21
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  env:\n    K: \"${localEnv:AWS_SECRET_ACCESS_KEY}\""),
        "auto",
        "C105",
    ); // S22
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  env:\n    K: \"${devcontainerId}\""),
        "auto",
        "C105",
    ); // S22
    sb(
        wf_sandbox("sandbox:\n  colour: red\n  image: \"a\""),
        "inline",
        "E012",
    ); // unknown key, others survive
    sb(
        wf_sandbox("sandbox:\n  build:\n    dockerfile: \"D\"\n    cache: \"x\""),
        "inline",
        "E012",
    ); // context sandbox.build
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  host_state: sometimes"),
        "auto",
        "C044",
    );
    sb(
        wf_sandbox("sandbox:\n  mode: auto\n  post_create: \"make\""),
        "auto",
        "",
    );
}

#[test]
fn s11_bare_hyphenated_preset() {
    let src = with_tool("", "  sandbox:\n    network:\n      preset: iterion-default\n");
    let (_, d) = parse(&src, "t.bot");
    same(&render(&d), "E001@8:22", "S11");
    assert!(d[0].hint.is_some());
}

#[test]
fn s12_invalid_rules() {
    for rule in [
        "a*b.com",
        "github.com.*",
        "*github.com",
        "***.x.com",
        "*.",
        "**.",
        "*.*.com",
        "*",
        "!",
        "10.0.0.0/99",
        "example.com:0",
        "example.com:70000",
        "https://x.com",
        "x.com/path",
    ] {
        let block = format!("sandbox:\n  network:\n    rules: [\"{rule}\"]");
        sb(wf_sandbox(&block), "override", "C097");
    }
}

#[test]
fn s13_valid_rules() {
    for rule in [
        "GITHUB.com",
        "github.com.",
        "bücher.example",
        "127.1",
        "2130706433",
        "0x7f.0.0.1",
        "api.github.com:443",
        "[::1]:8080",
        "fd00::/8",
        "!**.evil.example",
        "!  github.com",
    ] {
        let block = format!("sandbox:\n  network:\n    rules: [\"{rule}\"]");
        sb(wf_sandbox(&block), "override", "");
    }
}

#[test]
fn s23_s24_sandbox_placement_errors() {
    parse_diags("router r:\n  sandbox: auto\n", "E012@2:3"); // S23
    parse_diags(
        "tool t:\n  command: \"x\"\n  sandbox:\n  command: \"y\"\n",
        "E002@3:3",
    ); // S24
}

#[test]
fn c128_points_at_the_key() {
    let src = with_tool("  sandbox: none", "");
    let c = check(&src, "t.bot");
    assert_eq!(
        c.diagnostics[0].render_header(),
        "t.bot:3:3: warning[C128]: sandbox: none disables isolation for node 't'; prefer sandbox: auto"
    );
}

// ---------------------------------------------------------------------------------------------------------
// 12.12 complete examples
// ---------------------------------------------------------------------------------------------------------

fn example(n: &str) -> (Workflow, Vec<iterion_spec::diag::Diagnostic>) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/spec");
    let path = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("ok-example-{n}-"))
        })
        .unwrap();
    let src = std::fs::read_to_string(&path).unwrap();
    let c = check(&src, "ex.bot");
    (c.workflows.into_iter().next().unwrap(), c.diagnostics)
}

#[test]
fn ex1_release_gate() {
    let (w, d) = example("1");
    assert!(d.is_empty(), "{d:?}");
    let s = w.sandbox.as_ref().unwrap();
    assert_eq!(s.kind.as_str(), "inline");
    assert_eq!(
        serde_json::to_string(&s.network).unwrap(),
        r#"{"mode":"allowlist","rules":["github.com","**.github.com"]}"#
    );
    let script = w.node("tag_exists").unwrap().script.as_ref().unwrap();
    assert_eq!(script.value.lines().count(), 6);
    assert!(script.value.starts_with("set -eu\nif git ls-remote"));
    assert!(script.value.ends_with("fi\n"));
}

#[test]
fn ex2_release_notes() {
    let (w, d) = example("2");
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(
        w.prompt("reviewer_user").unwrap().body,
        "Review the release notes below. Approve them only if every\nsentence is factual and the list of changes is complete.\n\n{{input.notes}}"
    );
    assert!(w.sandbox.is_none());
}

#[test]
fn ex3_ci_check() {
    let (w, d) = example("3");
    // the C128 of the example, plus the C129 of the test summary (repository-controlled, produced in the
    // sandbox) reaching the host command of notify
    assert_eq!(d.len(), 2);
    assert_eq!(
        d[0].render_header(),
        "ex.bot:30:3: warning[C128]: sandbox: none disables isolation for node 'notify'; prefer sandbox: auto"
    );
    assert_eq!(
        d[1].render_header(),
        "ex.bot:31:27: warning[C129]: '{{input.summary}}' brings the output of node 'unit_tests' (mapped by the edge unit_tests -> notify), produced in the sandbox, into the host command of node 'notify'"
    );
    let unit = w.node("unit_tests").unwrap().sandbox.as_ref().unwrap();
    assert_eq!(unit.kind.as_str(), "override");
    assert_eq!(w.sandbox.as_ref().unwrap().kind.as_str(), "auto");
}

#[test]
fn ex4_flaky_job() {
    let (w, d) = example("4");
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(
        w.node("plan").unwrap().command.as_ref().unwrap().value,
        "printf '{\"target\": \"%s\", \"attempts_allowed\": %d}\\n' {{vars.target}} {{vars.attempts}}"
    );
    assert_eq!(w.sandbox.as_ref().unwrap().kind.as_str(), "inline");
    let rj = w.node("run_job").unwrap().sandbox.as_ref().unwrap();
    assert_eq!(rj.kind.as_str(), "override");
    assert_eq!(
        rj.network.as_ref().unwrap().inherit.as_ref().unwrap().value,
        "append"
    );
}

#[test]
fn deep_nesting_is_reported_not_overflowed() {
    let deep = format!("vars:\n  x: json = {}\n", "[".repeat(100_000));
    let (_, d) = parse(&deep, "t.bot");
    assert!(d.iter().any(|d| d.code == "E020"), "{d:?}");
    let deep_indent: String = (0..150).map(|i| format!("{}a:\n", " ".repeat(i))).collect();
    let (_, d) = parse(&deep_indent, "t.bot");
    assert!(
        d.iter()
            .any(|d| d.code == "E003" && d.message.contains("max 100"))
    );
    let deep_expr = format!("{}1", "(".repeat(10_000));
    assert!(iterion_spec::expr::parse_expr(&deep_expr).is_err());
}

#[test]
fn placeholder_positions_inside_multiline_strings() {
    // block scalar: line and column of the placeholder itself
    check_diags(
        "tool t:\n  script: |\n    echo one\n      echo {{vars.nope}}\nworkflow w:\n  entry: t\n  t -> done\n",
        "C033@4:12",
    );
    // backtick string: continuation lines are verbatim
    check_diags(
        "tool t:\n  command: `echo\n  {{vars.nope}}`\nworkflow w:\n  entry: t\n  t -> done\n",
        "C033@3:3",
    );
    // prompt body: line of the body, column after the stripped indentation
    check_diags(
        "prompt p:\n  Hello\n\n    and {{vars.nope}}\nagent a:\n  model: \"m\"\n  user: p\nworkflow w:\n  entry: a\n  a -> done\n",
        "C033@4:9",
    );
}

#[test]
fn c012_loop_edge_is_a_fallback() {
    // an `as` edge without `when` is a fallback ("loop N times, then fall through"), as the reference
    // validator has it; this used to be C012
    check_diags(
        &graph("  a -> d\n  d -> b when ok\n  d -> d as l(2)\n  b -> done\n"),
        "C016@5:6",
    );
    // a loop edge with `when` is not
    check_diags(
        &graph("  a -> d\n  d -> b when ok\n  d -> d when s as l(2)\n  b -> done\n"),
        "C016@5:6 C012@16:5 C013@17:15",
    );
    check_diags(
        &graph("  a -> d\n  d -> b when ok\n  d -> d as l(2)\n  d -> done\n  b -> done\n"),
        "C016@5:6",
    );
}

#[test]
fn unclosed_bracket_stops_at_the_next_declaration() {
    let src = "tool t:\n  command: \"x\"\n  sandbox:\n    mounts: [\"a\",\n\nworkflow w:\n  entry: t\n  t -> done\n";
    let (ast, d) = parse(src, "t.bot");
    same(&render(&d), "E002@4:13", "unclosed [");
    assert!(ast.decls.iter().any(|d| matches!(d, Decl::Workflow(_))));
}
