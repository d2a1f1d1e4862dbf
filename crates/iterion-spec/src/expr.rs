//! The expression language of `when "…"` and `compute expr:`: parser and evaluator.
//!
//! ```
//! use iterion_spec::expr::{parse_expr, eval, truthy};
//! let e = parse_expr("status == 'pass' && length(items) > 1").unwrap();
//! let input = serde_json::json!({"status": "pass", "items": [1, 2]});
//! let v = eval(&e, &|root: &str| (root == "input").then(|| input.clone())).unwrap();
//! assert!(truthy(&v));
//! ```

use serde::Serialize;
use serde_json::Value;

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BinOp {
    /// `||` / `or`.
    Or,
    /// `&&` / `and`.
    And,
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`.
    Div,
    /// `%`.
    Rem,
}

/// Built-in functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Func {
    /// `length(x)`.
    Length,
    /// `concat(a, b, …)`.
    Concat,
    /// `unique(list)`.
    Unique,
    /// `contains(h, n)`.
    Contains,
    /// `join(list, sep)`.
    Join,
    /// `if(c, a, b)` (lazy).
    If,
}

/// An expression tree.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expr {
    /// A literal (number, string, bool, null).
    Lit(Value),
    /// A path; the first segment is the namespace (`input` when it was not one of the namespaces).
    Path(Vec<String>),
    /// `!x` / `not x`.
    Not(Box<Expr>),
    /// `-x`.
    Neg(Box<Expr>),
    /// `a OP b`.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `f(args…)`.
    Call(Func, Vec<Expr>),
}

/// A parse error: byte offset inside the expression text and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// Byte offset in the expression text.
    pub offset: usize,
    /// What is wrong (used in `C040 invalid expression: <detail>`).
    pub detail: String,
}

/// Namespaces a path may start with; any other first segment reads from `input`.
pub const EXPR_NAMESPACES: &[&str] = &["input", "outputs", "vars", "artifacts", "loop", "run"];

/// A token; names borrow the expression text, string literals hold their decoded value.
#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    Num(Value),
    Str(String),
    Ident(&'a str),
    Op(&'static str),
    End,
}

fn tokenize(s: &str) -> Result<Vec<(Tok<'_>, usize)>, ExprError> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let mut float = false;
            if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
                float = true;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let t = &s[start..i];
            let v = if float {
                t.parse::<f64>().ok().map(Value::from)
            } else {
                t.parse::<i64>().ok().map(Value::from)
            };
            let Some(v) = v else {
                return Err(ExprError {
                    offset: start,
                    detail: format!("number '{t}' out of range"),
                });
            };
            out.push((Tok::Num(v), start));
            continue;
        }
        if c == b'"' || c == b'\'' {
            i += 1;
            let mut val = String::new();
            loop {
                let Some(ch) = s[i..].chars().next() else {
                    return Err(ExprError {
                        offset: start,
                        detail: "unterminated string".into(),
                    });
                };
                i += ch.len_utf8();
                if ch as u32 == c as u32 {
                    break;
                }
                if ch == '\\' {
                    let Some(e) = s[i..].chars().next() else {
                        return Err(ExprError {
                            offset: start,
                            detail: "unterminated string".into(),
                        });
                    };
                    i += e.len_utf8();
                    match e {
                        '"' | '\'' | '\\' => val.push(e),
                        'n' => val.push('\n'),
                        't' => val.push('\t'),
                        _ => {
                            return Err(ExprError {
                                offset: i - e.len_utf8() - 1,
                                detail: format!("invalid escape '\\{e}'"),
                            });
                        }
                    }
                } else {
                    val.push(ch);
                }
            }
            out.push((Tok::Str(val), start));
            continue;
        }
        let ch = s[i..].chars().next().unwrap_or(' ');
        if ch == '_' || ch.is_alphabetic() {
            while let Some(ch) = s[i..].chars().next() {
                if ch == '_' || ch.is_alphanumeric() {
                    i += ch.len_utf8();
                } else {
                    break;
                }
            }
            out.push((Tok::Ident(&s[start..i]), start));
            continue;
        }
        const OPS: &[&str] = &[
            "||", "&&", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "*", "/", "%", "(", ")", ",", ".",
        ];
        match OPS.iter().find(|op| s[i..].starts_with(**op)) {
            Some(op) => {
                out.push((Tok::Op(op), start));
                i += op.len();
            }
            None => {
                return Err(ExprError {
                    offset: start,
                    detail: format!("unexpected character '{ch}'"),
                });
            }
        }
    }
    out.push((Tok::End, s.len()));
    Ok(out)
}

/// The most operands (literals and paths) one expression may have. A longer expression is `C040`, so every
/// tree the parser builds is small enough for the recursive evaluator and the walkers over it.
pub const MAX_EXPR_OPERANDS: usize = 512;

/// The deepest nesting one expression may have: parentheses, function calls and prefix `!` / `not` / `-`
/// together.
pub const MAX_EXPR_NESTING: usize = 64;

struct P<'a> {
    toks: Vec<(Tok<'a>, usize)>,
    i: usize,
    depth: usize,
    operands: usize,
}

impl<'a> P<'a> {
    fn peek(&self) -> &Tok<'a> {
        &self.toks[self.i].0
    }
    fn off(&self) -> usize {
        self.toks[self.i].1
    }
    /// Takes the current token and moves on (the final `End` stays in place). A taken token is never read
    /// again: stepping back (`i -= 1`) only happens to report an error at its offset.
    fn bump(&mut self) -> Tok<'a> {
        if self.i + 1 < self.toks.len() {
            self.i += 1;
            std::mem::replace(&mut self.toks[self.i - 1].0, Tok::End)
        } else {
            Tok::End
        }
    }
    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }
    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Ident(x) if *x == w)
    }
    fn err<T>(&self, detail: impl Into<String>) -> Result<T, ExprError> {
        Err(ExprError {
            offset: self.off(),
            detail: detail.into(),
        })
    }
    fn found(&self) -> String {
        match self.peek() {
            Tok::Num(n) => format!("number {n}"),
            Tok::Str(s) => format!("string '{s}'"),
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Op(o) => format!("'{o}'"),
            Tok::End => "end of expression".into(),
        }
    }

    /// One more level of nesting at the current token, refused past [`MAX_EXPR_NESTING`].
    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_EXPR_NESTING {
            return self.err(format!("expression nested too deeply (max {MAX_EXPR_NESTING})"));
        }
        Ok(())
    }

    /// One more operand at the current token, refused past [`MAX_EXPR_OPERANDS`].
    fn operand(&mut self) -> Result<(), ExprError> {
        self.operands += 1;
        if self.operands > MAX_EXPR_OPERANDS {
            return self.err(format!(
                "expression has too many operands (max {MAX_EXPR_OPERANDS})"
            ));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Expr, ExprError> {
        self.enter()?;
        let mut l = self.and()?;
        while self.is_op("||") || self.is_word("or") {
            self.bump();
            let r = self.and()?;
            l = Expr::Bin(BinOp::Or, Box::new(l), Box::new(r));
        }
        self.depth -= 1;
        Ok(l)
    }
    fn and(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.not()?;
        while self.is_op("&&") || self.is_word("and") {
            self.bump();
            let r = self.not()?;
            l = Expr::Bin(BinOp::And, Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn not(&mut self) -> Result<Expr, ExprError> {
        let mut n = 0;
        while self.is_op("!") || self.is_word("not") {
            self.enter()?;
            self.bump();
            n += 1;
        }
        let mut e = self.cmp()?;
        for _ in 0..n {
            e = Expr::Not(Box::new(e));
        }
        self.depth -= n;
        Ok(e)
    }
    fn cmp(&mut self) -> Result<Expr, ExprError> {
        let l = self.sum()?;
        let op = match self.peek() {
            Tok::Op("==") => BinOp::Eq,
            Tok::Op("!=") => BinOp::Ne,
            Tok::Op("<") => BinOp::Lt,
            Tok::Op("<=") => BinOp::Le,
            Tok::Op(">") => BinOp::Gt,
            Tok::Op(">=") => BinOp::Ge,
            _ => return Ok(l),
        };
        self.bump();
        let r = self.sum()?;
        if matches!(self.peek(), Tok::Op("==" | "!=" | "<" | "<=" | ">" | ">=")) {
            return self.err("comparisons are not associative; use parentheses");
        }
        Ok(Expr::Bin(op, Box::new(l), Box::new(r)))
    }
    fn sum(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.prod()?;
        loop {
            let op = match self.peek() {
                Tok::Op("+") => BinOp::Add,
                Tok::Op("-") => BinOp::Sub,
                _ => return Ok(l),
            };
            self.bump();
            let r = self.prod()?;
            l = Expr::Bin(op, Box::new(l), Box::new(r));
        }
    }
    fn prod(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Op("*") => BinOp::Mul,
                Tok::Op("/") => BinOp::Div,
                Tok::Op("%") => BinOp::Rem,
                _ => return Ok(l),
            };
            self.bump();
            let r = self.unary()?;
            l = Expr::Bin(op, Box::new(l), Box::new(r));
        }
    }
    fn unary(&mut self) -> Result<Expr, ExprError> {
        let mut n = 0;
        while self.is_op("-") {
            self.enter()?;
            self.bump();
            n += 1;
        }
        let mut e = self.primary()?;
        for _ in 0..n {
            e = Expr::Neg(Box::new(e));
        }
        self.depth -= n;
        Ok(e)
    }
    fn primary(&mut self) -> Result<Expr, ExprError> {
        if !self.is_op("(") {
            self.operand()?;
        }
        let literal = match &mut self.toks[self.i].0 {
            Tok::Num(n) => Some(std::mem::take(n)),
            Tok::Str(v) => Some(Value::String(std::mem::take(v))),
            _ => None,
        };
        if let Some(v) = literal {
            self.bump();
            return Ok(Expr::Lit(v));
        }
        match *self.peek() {
            Tok::Op("(") => {
                self.bump();
                let e = self.or()?;
                if !self.is_op(")") {
                    return self.err(format!("expected ')', found {}", self.found()));
                }
                self.bump();
                Ok(e)
            }
            Tok::Ident(w) => {
                self.bump();
                match w {
                    "true" => return Ok(Expr::Lit(Value::Bool(true))),
                    "false" => return Ok(Expr::Lit(Value::Bool(false))),
                    "null" => return Ok(Expr::Lit(Value::Null)),
                    _ => {}
                }
                if self.is_op("(") {
                    let f = match w {
                        "length" => Func::Length,
                        "concat" => Func::Concat,
                        "unique" => Func::Unique,
                        "contains" => Func::Contains,
                        "join" => Func::Join,
                        "if" => Func::If,
                        _ => {
                            self.i -= 1;
                            return self.err(format!("unknown function '{w}'"));
                        }
                    };
                    self.bump();
                    let mut args = Vec::new();
                    if !self.is_op(")") {
                        loop {
                            args.push(self.or()?);
                            if self.is_op(",") {
                                self.bump();
                                continue;
                            }
                            break;
                        }
                    }
                    if !self.is_op(")") {
                        return self.err(format!("expected ',' or ')', found {}", self.found()));
                    }
                    self.bump();
                    let arity_ok = match f {
                        Func::Length | Func::Unique => args.len() == 1,
                        Func::Contains | Func::Join => args.len() == 2,
                        Func::If => args.len() == 3,
                        Func::Concat => !args.is_empty(),
                    };
                    if !arity_ok {
                        return self.err(format!("wrong number of arguments for '{w}'"));
                    }
                    return Ok(Expr::Call(f, args));
                }
                let mut path = vec![w.to_string()];
                while self.is_op(".") {
                    self.bump();
                    match self.bump() {
                        Tok::Ident(s) => path.push(s.to_string()),
                        Tok::Num(Value::Number(n)) if n.is_u64() => path.push(n.to_string()),
                        _ => {
                            self.i -= 1;
                            return self.err("expected a name or an index after '.'");
                        }
                    }
                }
                if !EXPR_NAMESPACES.contains(&path[0].as_str()) {
                    path.insert(0, "input".to_string());
                }
                Ok(Expr::Path(path))
            }
            _ => self.err(format!("expected a value, found {}", self.found())),
        }
    }
}

/// Parses an expression. Errors carry the byte offset inside `text`.
pub fn parse_expr(text: &str) -> Result<Expr, ExprError> {
    let toks = tokenize(text)?;
    let mut p = P {
        toks,
        i: 0,
        depth: 0,
        operands: 0,
    };
    if matches!(p.peek(), Tok::End) {
        return p.err("empty expression");
    }
    let e = p.or()?;
    if !matches!(p.peek(), Tok::End) {
        return p.err(format!("unexpected {}", p.found()));
    }
    Ok(e)
}

/// Parses the expression held by a string value (`when "…"`, `compute expr:`), reporting `C040` at the
/// position inside the string (exact for single-line strings, the string's start otherwise).
pub fn parse_expression(
    text: &crate::model::Spanned<String>,
    file: &str,
) -> Result<Expr, crate::diag::Diagnostic> {
    parse_expr(&text.value).map_err(|e| {
        let s = crate::span::inner_span(text, e.offset, 1);
        crate::diag::Diagnostic::error(
            "C040",
            file,
            s.line,
            s.col,
            format!("invalid expression: {}", e.detail),
        )
        .with_end(s.end_line, s.end_col)
    })
}

/// An evaluation error (the runtime logs it; an edge condition with an error counts as false).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError(pub String);

/// Truthiness of 01 §5.3.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => {
            let t = s.trim().to_ascii_lowercase();
            !(t.is_empty() || t == "false" || t == "no" || t == "0")
        }
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Evaluates an expression. `root` returns the value of a namespace (`input`, `outputs`, `vars`, `loop`,
/// `run`); missing paths evaluate to `null`.
///
/// The evaluation is iterative (an explicit stack on the heap), so a deep tree cannot overflow the thread's
/// stack, whatever built it. Operands are evaluated left to right and the first error stops the evaluation;
/// `||`, `&&` and `if` are lazy.
pub fn eval(e: &Expr, root: &dyn Fn(&str) -> Option<Value>) -> Result<Value, EvalError> {
    /// What to do next: evaluate a tree, or combine the values on top of the value stack.
    enum Step<'e> {
        Eval(&'e Expr),
        Not,
        Neg,
        /// The left operand of `||` is on the stack; the right one is evaluated only when it is false.
        Or(&'e Expr),
        /// The left operand of `&&` is on the stack; the right one is evaluated only when it is true.
        And(&'e Expr),
        /// The truthiness of the value on the stack.
        Truthy,
        /// The left operand is on the stack; evaluate the right one, then [`Step::Apply`].
        Right(BinOp, &'e Expr),
        Apply(BinOp, Value),
        /// The condition of `if` is on the stack.
        Branch(&'e Expr, &'e Expr),
        /// The `n` arguments of a call are on the stack.
        Call(Func, usize),
    }
    let mut steps = vec![Step::Eval(e)];
    let mut vals: Vec<Value> = Vec::new();
    let pop = |vals: &mut Vec<Value>| vals.pop().unwrap_or(Value::Null);
    while let Some(step) = steps.pop() {
        match step {
            Step::Eval(e) => match e {
                Expr::Lit(v) => vals.push(v.clone()),
                Expr::Path(p) => vals.push(read_path(p, root)),
                Expr::Not(x) => steps.extend([Step::Not, Step::Eval(x)]),
                Expr::Neg(x) => steps.extend([Step::Neg, Step::Eval(x)]),
                Expr::Bin(BinOp::Or, a, b) => steps.extend([Step::Or(b), Step::Eval(a)]),
                Expr::Bin(BinOp::And, a, b) => steps.extend([Step::And(b), Step::Eval(a)]),
                Expr::Bin(op, a, b) => steps.extend([Step::Right(*op, b), Step::Eval(a)]),
                Expr::Call(Func::If, args) => {
                    steps.extend([Step::Branch(&args[1], &args[2]), Step::Eval(&args[0])]);
                }
                Expr::Call(f, args) => {
                    steps.push(Step::Call(*f, args.len()));
                    steps.extend(args.iter().rev().map(Step::Eval));
                }
            },
            Step::Not => {
                let v = pop(&mut vals);
                vals.push(Value::Bool(!truthy(&v)));
            }
            Step::Neg => {
                let v = match pop(&mut vals) {
                    Value::Number(n) => match n.as_i64() {
                        Some(i) => i.checked_neg().map_or(Value::from(-(i as f64)), Value::from),
                        None => Value::from(-n.as_f64().unwrap_or(0.0)),
                    },
                    other => return Err(EvalError(format!("cannot negate {}", type_name(&other)))),
                };
                vals.push(v);
            }
            Step::Or(b) => {
                if truthy(&pop(&mut vals)) {
                    vals.push(Value::Bool(true));
                } else {
                    steps.extend([Step::Truthy, Step::Eval(b)]);
                }
            }
            Step::And(b) => {
                if truthy(&pop(&mut vals)) {
                    steps.extend([Step::Truthy, Step::Eval(b)]);
                } else {
                    vals.push(Value::Bool(false));
                }
            }
            Step::Truthy => {
                let v = pop(&mut vals);
                vals.push(Value::Bool(truthy(&v)));
            }
            Step::Right(op, b) => {
                let l = pop(&mut vals);
                steps.extend([Step::Apply(op, l), Step::Eval(b)]);
            }
            Step::Apply(op, l) => {
                let r = pop(&mut vals);
                vals.push(binop(op, l, r)?);
            }
            Step::Branch(a, b) => {
                let c = pop(&mut vals);
                steps.push(Step::Eval(if truthy(&c) { a } else { b }));
            }
            Step::Call(f, n) => {
                let args = vals.split_off(vals.len().saturating_sub(n));
                vals.push(call(f, args)?);
            }
        }
    }
    Ok(pop(&mut vals))
}

fn read_path(p: &[String], root: &dyn Fn(&str) -> Option<Value>) -> Value {
    let mut cur = root(&p[0]).unwrap_or(Value::Null);
    for seg in &p[1..] {
        cur = match cur {
            Value::Object(mut o) => o.remove(seg).unwrap_or(Value::Null),
            Value::Array(mut a) => match seg.parse::<usize>() {
                Ok(i) if i < a.len() => a.swap_remove(i),
                _ => Value::Null,
            },
            _ => Value::Null,
        };
    }
    cur
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

fn binop(op: BinOp, a: Value, b: Value) -> Result<Value, EvalError> {
    use std::cmp::Ordering;
    match op {
        BinOp::Eq | BinOp::Ne => {
            let eq = match (&a, &b) {
                (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
                _ => a == b,
            };
            Ok(Value::Bool(if op == BinOp::Eq { eq } else { !eq }))
        }
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            let ord = match (&a, &b) {
                (Value::Number(x), Value::Number(y)) => {
                    x.as_f64().unwrap_or(0.0).partial_cmp(&y.as_f64().unwrap_or(0.0))
                }
                (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
                _ => None,
            };
            let Some(ord) = ord else {
                return Err(EvalError(format!(
                    "cannot compare {} with {}",
                    type_name(&a),
                    type_name(&b)
                )));
            };
            Ok(Value::Bool(match op {
                BinOp::Lt => ord == Ordering::Less,
                BinOp::Le => ord != Ordering::Greater,
                BinOp::Gt => ord == Ordering::Greater,
                _ => ord != Ordering::Less,
            }))
        }
        BinOp::Add if a.is_string() && b.is_string() => Ok(Value::String(format!(
            "{}{}",
            a.as_str().unwrap_or(""),
            b.as_str().unwrap_or("")
        ))),
        _ => {
            let (Value::Number(x), Value::Number(y)) = (&a, &b) else {
                return Err(EvalError(format!(
                    "arithmetic on {} and {}",
                    type_name(&a),
                    type_name(&b)
                )));
            };
            if let (Some(i), Some(j)) = (x.as_i64(), y.as_i64())
                && op != BinOp::Div
            {
                let r = match op {
                    BinOp::Add => i.checked_add(j),
                    BinOp::Sub => i.checked_sub(j),
                    BinOp::Mul => i.checked_mul(j),
                    _ => {
                        if j == 0 {
                            return Err(EvalError("modulo by zero".into()));
                        }
                        i.checked_rem(j)
                    }
                };
                return r
                    .map(Value::from)
                    .ok_or_else(|| EvalError("integer overflow".into()));
            }
            let (f, g) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            if matches!(op, BinOp::Div | BinOp::Rem) && g == 0.0 {
                return Err(EvalError("division by zero".into()));
            }
            let r = match op {
                BinOp::Add => f + g,
                BinOp::Sub => f - g,
                BinOp::Mul => f * g,
                BinOp::Div => f / g,
                _ => f % g,
            };
            serde_json::Number::from_f64(r)
                .map(Value::Number)
                .ok_or_else(|| EvalError("result is not a finite number".into()))
        }
    }
}

fn call(f: Func, args: Vec<Value>) -> Result<Value, EvalError> {
    match f {
        Func::Length => match &args[0] {
            Value::String(s) => Ok(Value::from(s.chars().count())),
            Value::Array(a) => Ok(Value::from(a.len())),
            Value::Object(o) => Ok(Value::from(o.len())),
            Value::Null => Ok(Value::from(0)),
            v => Err(EvalError(format!("length of {}", type_name(v)))),
        },
        Func::Concat => {
            if args.iter().all(Value::is_array) {
                Ok(Value::Array(
                    args.into_iter()
                        .flat_map(|a| match a {
                            Value::Array(v) => v,
                            _ => Vec::new(),
                        })
                        .collect(),
                ))
            } else if args.iter().all(Value::is_string) {
                Ok(Value::String(
                    args.iter().filter_map(Value::as_str).collect::<String>(),
                ))
            } else {
                Err(EvalError("concat needs all lists or all strings".into()))
            }
        }
        Func::Unique => match &args[0] {
            Value::Array(a) => {
                // Linear: a set of canonical forms, not a scan of the kept items per item.
                let mut seen = std::collections::HashSet::new();
                let out: Vec<Value> = a.iter().filter(|v| seen.insert(canonical(v))).cloned().collect();
                Ok(Value::Array(out))
            }
            v => Err(EvalError(format!("unique of {}", type_name(v)))),
        },
        Func::Contains => match (&args[0], &args[1]) {
            (Value::String(h), Value::String(n)) => Ok(Value::Bool(h.contains(n.as_str()))),
            (Value::Array(h), n) => Ok(Value::Bool(h.contains(n))),
            (h, _) => Err(EvalError(format!("contains on {}", type_name(h)))),
        },
        Func::Join => match (&args[0], &args[1]) {
            (Value::Array(a), Value::String(sep)) => Ok(Value::String(
                a.iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(sep),
            )),
            _ => Err(EvalError("join needs a list and a string".into())),
        },
        Func::If => Ok(Value::Null),
    }
}

/// A text that two values share exactly when they are equal (`==` of [`Value`]): JSON with object keys
/// sorted (objects compare without regard to key order).
fn canonical(v: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            Value::Object(o) => {
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&o[k.as_str()], out);
                }
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out
}

/// Every path the expression reads, namespace first.
pub fn paths(e: &Expr) -> Vec<&[String]> {
    let mut out = Vec::new();
    fn walk<'a>(e: &'a Expr, out: &mut Vec<&'a [String]>) {
        match e {
            Expr::Lit(_) => {}
            Expr::Path(p) => out.push(p),
            Expr::Not(x) | Expr::Neg(x) => walk(x, out),
            Expr::Bin(_, a, b) => {
                walk(a, out);
                walk(b, out);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| walk(a, out)),
        }
    }
    walk(e, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(src: &str, expect: &str) {
        let input = json!({"status": "pass", "n": 3, "items": ["a", "b", "a"], "ok": true, "s": " No "});
        let got = match parse_expr(src) {
            Err(e) => format!("C040@{}: {}", e.offset, e.detail),
            Ok(e) => match eval(&e, &|r: &str| (r == "input").then(|| input.clone())) {
                Ok(v) => v.to_string(),
                Err(EvalError(m)) => format!("eval error: {m}"),
            },
        };
        assert_eq!(got, expect, "expression {src:?}");
    }

    #[test]
    fn expressions() {
        check("status == 'pass'", "true");
        check("status == \"fail\"", "false");
        check("n + 1", "4");
        check("n / 2", "1.5");
        check("n % 2", "1");
        check("-n * 2", "-6");
        check("1 / 0", "eval error: division by zero");
        check("n < 'x'", "eval error: cannot compare number with string");
        check("n == 'x'", "false");
        check("length(items)", "3");
        check("unique(items)", "[\"a\",\"b\"]");
        check("join(items, '-')", "\"a-b-a\"");
        check("contains(items, 'b') and not ok", "false");
        check("concat('a', \"b\")", "\"ab\"");
        check("if(ok, 1, 1/0)", "1");
        check("missing.x == null", "true");
        check("!s", "true");
        check("input.items.1", "\"b\"");
        check("status ==", "C040@9: expected a value, found end of expression");
        check(
            "a == b == c",
            "C040@7: comparisons are not associative; use parentheses",
        );
        check("(1", "C040@2: expected ')', found end of expression");
        check("foo(1)", "C040@0: unknown function 'foo'");
        check("'x", "C040@0: unterminated string");
        check("", "C040@0: empty expression");
        check("a # b", "C040@2: unexpected character '#'");
        check("length(unique(concat(items, items)))", "2");
    }

    #[test]
    fn unique_keeps_first_occurrences_of_equal_values() {
        let input =
            json!({"l": [1, 1.0, "1", {"a": 1, "b": 2}, {"b": 2, "a": 1}, [1, 2], [2, 1], 1, null, null]});
        let e = parse_expr("unique(l)").unwrap();
        let got = eval(&e, &|r: &str| (r == "input").then(|| input.clone())).unwrap();
        assert_eq!(got, json!([1, 1.0, "1", {"a": 1, "b": 2}, [1, 2], [2, 1], null]));
    }

    #[test]
    fn operand_count_is_limited_with_the_offset_of_the_first_operand_past_it() {
        let ok = vec!["a"; MAX_EXPR_OPERANDS].join(" && ");
        assert!(parse_expr(&ok).is_ok());
        let over = vec!["a"; 200_000].join(" && ");
        let e = parse_expr(&over).unwrap_err();
        assert_eq!(
            e.detail,
            format!("expression has too many operands (max {MAX_EXPR_OPERANDS})")
        );
        assert_eq!(
            e.offset,
            MAX_EXPR_OPERANDS * 5,
            "offset of operand {}",
            MAX_EXPR_OPERANDS + 1
        );
        // `||`, arithmetic and function arguments count the same way.
        let sum = vec!["1"; MAX_EXPR_OPERANDS + 1].join("+");
        assert!(parse_expr(&sum).unwrap_err().detail.contains("too many operands"));
        let args = format!("concat({})", vec!["'x'"; MAX_EXPR_OPERANDS].join(","));
        assert!(
            parse_expr(&args)
                .unwrap_err()
                .detail
                .contains("too many operands")
        );
    }

    #[test]
    fn nesting_counts_parentheses_calls_and_prefix_operators_together() {
        let at = |prefix: &str, n: usize| {
            format!(
                "{}x{}",
                prefix.repeat(n),
                if prefix == "(" {
                    ")".repeat(n)
                } else {
                    String::new()
                }
            )
        };
        // `or` is entered once for the whole expression, so MAX - 1 further levels are accepted.
        for p in ["(", "!", "-", "not "] {
            assert!(parse_expr(&at(p, MAX_EXPR_NESTING - 1)).is_ok(), "{p}");
            let e = parse_expr(&at(p, 100_000)).unwrap_err();
            assert_eq!(
                e.detail,
                format!("expression nested too deeply (max {MAX_EXPR_NESTING})"),
                "{p}"
            );
        }
        // Mixed: 40 parentheses each holding `!` can not reach 40 × 64 levels.
        let mixed = "(!".repeat(40) + "x" + &")".repeat(40);
        assert!(
            parse_expr(&mixed)
                .unwrap_err()
                .detail
                .contains("nested too deeply")
        );
    }

    #[test]
    fn a_tree_deeper_than_any_parse_evaluates_without_recursion() {
        // 100 000 levels, on a small stack: the evaluator keeps its work on the heap.
        let mut e = Expr::Lit(Value::Bool(true));
        for i in 0..100_000 {
            e = if i % 2 == 0 {
                Expr::Not(Box::new(e))
            } else {
                Expr::Bin(BinOp::And, Box::new(Expr::Lit(Value::from(1))), Box::new(e))
            };
        }
        let got = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let r = eval(&e, &|_: &str| None);
                // Take the chain apart by hand: the derived drop recurses.
                let mut cur = e;
                loop {
                    cur = match cur {
                        Expr::Not(inner) => *inner,
                        Expr::Bin(_, _, inner) => *inner,
                        _ => break,
                    };
                }
                r
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(got, Ok(Value::Bool(true)));
    }

    #[test]
    fn the_largest_accepted_expressions_parse_and_evaluate_on_a_worker_sized_stack() {
        // 2 MiB is the stack of an async runtime's worker thread, where the runtime evaluates conditions.
        let chain = vec!["a"; MAX_EXPR_OPERANDS].join(" && ");
        let nested = "(!".repeat(MAX_EXPR_NESTING / 2 - 1) + "a" + &")".repeat(MAX_EXPR_NESTING / 2 - 1);
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                let input = json!({"a": true});
                for text in [&chain, &nested] {
                    let e = parse_expr(text).unwrap();
                    let v = eval(&e, &|r: &str| (r == "input").then(|| input.clone())).unwrap();
                    assert_eq!(v, Value::Bool(text == &chain), "{}", &text[..20]);
                    drop(e);
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
