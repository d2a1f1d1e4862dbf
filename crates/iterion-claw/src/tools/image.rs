//! `read_image`: an image file of the work directory as base64 with its media type (PNG, JPEG, GIF or WebP,
//! told by its first bytes), at most [`MAX_IMAGE_BYTES`] so that the result stays within the tool output cap.

use super::confine::Root;
use super::tool_err;
use crate::error::Result;
use serde_json::json;
use std::io::Read;

/// Largest image `read_image` returns: its base64 and the JSON around it fit in [`super::OUTPUT_CAP`].
pub const MAX_IMAGE_BYTES: u64 = 72 * 1024;

const TOOL: &str = "read_image";

/// The media type of an image by its signature.
fn media_type(b: &[u8]) -> Option<&'static str> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if b.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// Standard base64 with padding.
fn base64(b: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | u32::from(x) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(super) fn read_image(root: &Root, path: &str) -> Result<String> {
    let file = root.confine(TOOL, path)?;
    let shown = root.shown(&file);
    let meta = file
        .symlink_metadata()
        .map_err(|e| tool_err(TOOL, format!("{shown}: {e}")))?;
    if !meta.is_file() {
        return Err(tool_err(TOOL, format!("{shown} is not a regular file")));
    }
    if meta.len() > MAX_IMAGE_BYTES {
        return Err(tool_err(
            TOOL,
            format!(
                "{shown} has {} bytes, more than the {MAX_IMAGE_BYTES} bytes read_image returns",
                meta.len()
            ),
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&file)
        .and_then(|f| f.take(MAX_IMAGE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| tool_err(TOOL, format!("{shown}: {e}")))?;
    if bytes.len() as u64 > MAX_IMAGE_BYTES {
        return Err(tool_err(
            TOOL,
            format!("{shown} grew past {MAX_IMAGE_BYTES} bytes"),
        ));
    }
    let media = media_type(&bytes)
        .ok_or_else(|| tool_err(TOOL, format!("{shown} is not a PNG, JPEG, GIF or WebP image")))?;
    Ok(json!({"path": shown, "media_type": media, "size": bytes.len(), "data": base64(&bytes)}).to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_standard_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64(i.as_bytes()), o);
        }
        assert_eq!(super::base64(&[0xFF, 0xFE, 0xFD]), "//79");
    }
}
