//! Blocking requests to the container engine's Unix socket for test helpers and `cargo xtask images`, which
//! must never shell out to a container CLI: a string-error shorthand over the driver's one raw engine client
//! ([`iterion_driver_docker::engine_http`]).

use iterion_driver_docker::engine_http::{Request, blocking};
use std::path::Path;
use std::time::Duration;

pub use iterion_driver_docker::engine_http::{Response, encode_component};

/// Sends one request to the engine at `socket` and reads the whole response, bounded by `timeout` per read.
pub fn request(
    socket: &Path,
    method: &str,
    path_and_query: &str,
    content_type: Option<&str>,
    body: &[u8],
    timeout: Duration,
) -> Result<Response, String> {
    let req = Request::new(method, path_and_query).with_body(content_type, body);
    blocking::send(socket, &req, timeout).map_err(|e| e.to_string())
}
