//! `check_spec` names the failing field (03 §11.1).

use std::path::Path;

use iterion_driver::Error;
use iterion_driver::spec_safety::check_spec;
use iterion_test_support::conformance::sandbox_for;

fn field_of(f: impl FnOnce(&mut iterion_spec::resolved::ResolvedSandbox)) -> String {
    let mut s = sandbox_for(Some("alpine:3"), Path::new("/workspace"));
    f(&mut s);
    match check_spec(&s) {
        Ok(()) => "ok".into(),
        Err(Error::InvalidSpec { field, .. }) => field,
        Err(e) => format!("unexpected {e:?}"),
    }
}

#[test]
fn fields_are_named() {
    assert_eq!(field_of(|_| {}), "ok");
    assert_eq!(field_of(|s| s.image = Some("Alpine".into())), "image");
    assert_eq!(field_of(|s| s.user = Some("a b".into())), "user");
    assert_eq!(
        field_of(|s| s.workspace_folder = "/proc/x".into()),
        "workspace_folder"
    );
    assert_eq!(
        field_of(|s| {
            s.env_layers.workflow.insert("A".into(), "x\ny".into());
        }),
        "env.A"
    );
    assert_eq!(
        field_of(|s| s.post_create = vec!["ok".into(), "a\0b".into()]),
        "post_create[1]"
    );
}
