//! Cursors: their declarations (`C085`) and the values nodes set for them (`C083`, `C084`).

use super::compiler::Compiler;
use super::graph::Ix;
use crate::ast::CursorDecl;
use crate::model::{Cursor, CursorLevels, CursorSettings, Span, Spanned};

impl Compiler<'_> {
    /// `C085`: the first problem of a cursor declaration; such a cursor is left out (its invocations then
    /// draw `C083`).
    pub(super) fn cursor(&mut self, c: CursorDecl) -> Cursor {
        let CursorDecl {
            name,
            description,
            values,
            bands,
        } = c;
        let levels = match (values, bands) {
            (Some(v), None) => cursor_values(v),
            (None, Some(b)) => cursor_bands(b),
            _ => Err((
                name.span,
                "exactly one of values or bands is required".to_string(),
            )),
        };
        let levels = match levels {
            Ok(l) => Some(l),
            Err((span, msg)) => {
                self.err("C085", span, format!("cursor '{}': {msg}", name.value));
                None
            }
        };
        Cursor {
            name,
            description,
            levels,
        }
    }

    /// `C083` (warning) for an undeclared (or left out) cursor; `C084` for a value that does not fit it. A
    /// value holding `${…}` is expanded at run time and not checked.
    pub(super) fn cursor_settings(&mut self, c: &CursorSettings, w: &Ix<'_>) {
        for (k, v) in &c.values {
            let Some(levels) = w
                .cursors
                .iter()
                .find(|x| x.name.value == k.value)
                .and_then(|x| x.levels.as_ref())
            else {
                self.warn("C083", k.span, format!("unknown cursor '{}'", k.value));
                continue;
            };
            if v.value.contains("${") && v.value.contains('}') {
                continue;
            }
            let ok = match (v.value.trim().parse::<f64>(), levels) {
                (Ok(x), _) if !(0.0..=1.0).contains(&x) => false,
                (Ok(x), CursorLevels::Bands(bands)) => bands.iter().any(|(lo, hi, _)| *lo <= x && x <= *hi),
                (Ok(_), CursorLevels::Values(_)) => true,
                (Err(_), CursorLevels::Values(levels)) => levels.iter().any(|(n, _)| *n == v.value),
                (Err(_), CursorLevels::Bands(_)) => false,
            };
            if !ok {
                self.err(
                    "C084",
                    v.span,
                    format!("invalid value '{}' for cursor '{}'", v.value, k.value),
                );
            }
        }
    }
}

type CursorEntries = Vec<(Spanned<String>, Spanned<String>)>;

/// `values:` of a cursor: names and prompts are not empty, names are unique.
fn cursor_values(v: CursorEntries) -> Result<CursorLevels, (Span, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(v.len());
    for (k, d) in v {
        if k.value.is_empty() || d.value.is_empty() {
            return Err((k.span, "a value needs a name and a prompt".into()));
        }
        if out.iter().any(|(n, _)| *n == k.value) {
            return Err((k.span, format!("duplicate value '{}'", k.value)));
        }
        out.push((k.value, d.value));
    }
    Ok(CursorLevels::Values(out))
}

/// `bands:` of a cursor: keys `LO..HI` with 0 ≤ LO ≤ HI ≤ 1, no two bands overlapping (ends included).
fn cursor_bands(b: CursorEntries) -> Result<CursorLevels, (Span, String)> {
    let mut out: Vec<(f64, f64, String)> = Vec::with_capacity(b.len());
    for (k, d) in b {
        let Some((lo, hi)) = parse_band(&k.value) else {
            return Err((k.span, format!("malformed band '{}' (want \"LO..HI\")", k.value)));
        };
        if lo < 0.0 || hi > 1.0 {
            return Err((k.span, format!("band '{}' is outside 0..1", k.value)));
        }
        if lo > hi {
            return Err((k.span, format!("band '{}' has LO above HI", k.value)));
        }
        if let Some((plo, phi, _)) = out.iter().find(|(plo, phi, _)| lo <= *phi && *plo <= hi) {
            return Err((k.span, format!("band '{}' overlaps band '{plo}..{phi}'", k.value)));
        }
        out.push((lo, hi, d.value));
    }
    Ok(CursorLevels::Bands(out))
}

/// `LO..HI` with decimal numbers.
fn parse_band(k: &str) -> Option<(f64, f64)> {
    let (lo, hi) = k.split_once("..")?;
    let num = |x: &str| {
        let x = x.trim();
        let digits = x.strip_prefix('-').unwrap_or(x);
        (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
            .then(|| x.parse::<f64>().ok())
            .flatten()
    };
    Some((num(lo)?, num(hi)?))
}
