//! The skip rule for tests that need a tool the machine may lack: skip with a printed reason,
//! except under `UWF_REQUIRE_ALL_TESTS=1` (CI), where a skip fails.

mod common;

use common::{Need, missing, skip_line};

#[test]
fn a_missing_tool_is_named_and_a_present_one_is_not() {
    assert_eq!(
        missing(&[Need::Tool("sh"), Need::Tool("uwf-no-such-editor")]),
        ["uwf-no-such-editor not found"]
    );
}

#[test]
fn a_test_with_everything_it_needs_runs() {
    assert_eq!(skip_line("t", &[], true), None);
    assert_eq!(skip_line("t", &[], false), None);
}

#[test]
fn a_missing_tool_skips_outside_ci() {
    assert_eq!(
        skip_line("t", &["emacs not found".into()], false).as_deref(),
        Some("SKIP t: emacs not found")
    );
}

#[test]
#[should_panic(expected = "UWF_REQUIRE_ALL_TESTS=1 forbids skipping")]
fn a_missing_tool_fails_in_ci() {
    skip_line("t", &["emacs not found".into()], true);
}
