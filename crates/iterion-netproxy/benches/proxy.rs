//! Proxy benchmark (written later).
fn main() {}
