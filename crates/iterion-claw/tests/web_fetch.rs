//! `web_fetch` against a local server, directly and through a proxy URL.

use iterion_claw::tools::Builtins;
use iterion_test_support::fake_provider::{FakeProvider, Reply};
use serde_json::json;

#[tokio::test]
async fn fetches_directly_and_through_the_proxy() {
    let d = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        Reply::Raw("page body".into()),
        Reply::Raw("proxied body".into()),
        Reply::Status {
            status: 404,
            retry_after: None,
            body: "nope".into(),
        },
    ])
    .await
    .unwrap();
    let allowed = vec!["web_fetch".to_string()];
    let direct = Builtins::new(d.path(), &allowed, false, None).unwrap();
    let url = format!("{}/page", fake.url());
    assert_eq!(
        direct.run("web_fetch", &json!({"url": url})).await.unwrap(),
        "page body"
    );
    let proxy = format!("http://u:p@{}", fake.url().trim_start_matches("http://"));
    let proxied = Builtins::new(d.path(), &allowed, false, Some(&proxy)).unwrap();
    let out = proxied
        .run("web_fetch", &json!({"url": "http://site.invalid/x"}))
        .await
        .unwrap();
    assert_eq!(out, "proxied body");
    assert_eq!(fake.requests()[1].path, "http://site.invalid/x");
    let e = direct.run("web_fetch", &json!({"url": url})).await.unwrap_err();
    assert_eq!(e.to_string(), "web_fetch: HTTP 404: nope");
    assert!(
        direct
            .run("web_fetch", &json!({"url": "file:///etc/passwd"}))
            .await
            .is_err()
    );
}
