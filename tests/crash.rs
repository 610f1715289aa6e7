//! Crash consistency: the process is stopped dead (abort, not unwind) at each fail point between
//! reading a file and moving it, then ingest runs again. Every interchange must end up applied
//! exactly once and every file in the archive or the quarantine, as after a run never
//! interrupted. Needs the fail points: `cargo test --features failpoints --test crash`.
#![cfg(feature = "failpoints")]

mod common;

use common::site::{Site, assert_same};

const FILES: usize = 60;

/// `(fail point, FAILPOINTS action)`: `n*off->return` aborts on the n+1th pass, so that some
/// batches commit (and some files move) before the crash.
const POINTS: &[(&str, &str)] = &[
    ("after-read", "return"),
    ("after-read", "17*off->return"),
    ("after-key-insert", "return"),
    ("after-key-insert", "9*off->return"),
    ("after-business-rows", "return"),
    ("after-business-rows", "13*off->return"),
    ("mid-batch", "2*off->return"),
    ("mid-batch", "23*off->return"),
    ("before-commit", "return"),
    ("before-commit", "3*off->return"),
    ("after-commit", "return"),
    ("after-commit", "4*off->return"),
    ("before-move", "return"),
    ("before-move", "11*off->return"),
    ("after-reason", "return"),
    ("after-reason", "1*off->return"),
    ("after-move", "return"),
    ("after-move", "19*off->return"),
];

#[test]
fn a_crash_at_any_point_then_a_rerun_applies_everything_exactly_once() {
    let reference = Site::new();
    reference.fill(FILES, 11);
    let out = reference.ingest(5);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = reference.state();
    reference.assert_all_placed(&want, FILES);
    assert!(!want.quarantined.is_empty() && want.keys.len() > FILES / 2);

    for (point, action) in POINTS {
        let site = Site::new();
        site.fill(FILES, 11);
        let crashed = site
            .ingest_command(5)
            .env("FAILPOINTS", format!("{point}={action}"))
            .output()
            .unwrap();
        assert_eq!(
            crashed.status.code(),
            None,
            "{point}={action} did not stop the run: {}",
            String::from_utf8_lossy(&crashed.stderr)
        );
        // What the crash left must already be consistent.
        let partial = site.state();
        assert!(partial.keys.is_subset(&want.keys), "{point}={action}");

        let out = site.ingest(5);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{point}={action}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = site.state();
        site.assert_all_placed(&got, FILES);
        assert_same(&got, &want, &format!("{point}={action}"));
    }
}
