//! Fuzz the request-head parser, the proxy-target classifier, body framing and the authority parser with
//! arbitrary bytes: none of them may panic, and what they accept must respect the limits.
#![no_main]

use iterion_netproxy::head::{
    HeadLimits, ProxyTarget, find_head_end, parse_request_head, parse_response_head, proxy_target, request_framing,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = HeadLimits { max_head_bytes: 4096, max_headers: 16 };
    let Some(end) = find_head_end(data) else {
        return;
    };
    assert!(end <= data.len() && data[..end].ends_with(b"\r\n\r\n"));
    let _ = parse_response_head(&data[..end], &limits);
    let Ok(head) = parse_request_head(&data[..end], &limits) else {
        return;
    };
    assert!(end <= limits.max_head_bytes);
    assert!(head.headers.len() <= limits.max_headers);
    assert!(!head.target.bytes().any(|b| b <= 0x20 || b == 0x7f));
    let _ = request_framing(&head.headers);
    match proxy_target(&head.method, &head.target) {
        Ok(ProxyTarget::Authority(a)) => {
            if let Ok(t) = iterion_netpolicy::Target::parse(&a, None) {
                // The canonical form parses back to itself.
                assert_eq!(iterion_netpolicy::Target::parse(&t.to_string(), None).ok(), Some(t));
            }
        }
        Ok(ProxyTarget::Http { authority, path }) => {
            assert!(path.starts_with('/'));
            let _ = iterion_netpolicy::Target::parse(&authority, Some(80));
        }
        Err(_) => {}
    }
});
