//! `show --diff`: each drifted copy of a key set beside the applied one, segment by segment, so
//! that a person sees what the partner changed (NAD `Hauptstra?+e` against `Nebenstra?+e`)
//! without SQL; and `show --raw --copy N`, the bytes of the copy that was not applied.

use serde::Serialize;
use similar::{Algorithm, DiffOp, capture_diff_slices, group_diff_ops};

use crate::edifact::Charset;
use crate::envelopes::split_segments;
use crate::exit::ExitStatus;
use crate::inbox::{DriftedCopy, StoredInterchange};
use crate::output::{Out, problem};

/// Unchanged segments shown around each change.
const CONTEXT: usize = 2;

/// One line of a diff: a segment, unchanged (` `), of the applied copy only (`-`) or of the
/// drifted copy only (`+`), with its number in the copy it is of (the applied one's for ` `).
#[derive(Debug, Serialize)]
struct Line {
    mark: &'static str,
    segment_number: usize,
    segment: String,
}

#[derive(Debug, Serialize)]
struct CopyDiff<'a> {
    /// From 1, as `--raw --copy N` takes it.
    copy: usize,
    seen_at: &'a str,
    file: &'a str,
    sha256: &'a str,
    applied_sha256: &'a str,
    /// The interchange it is compared with, as `show` numbers it; `None` where the applied
    /// copy is no longer stored.
    applied_id: Option<i64>,
    changed_segments: usize,
    lines: Vec<Line>,
}

/// Prints every drifted copy against the applied one.
pub fn print(
    out: &mut Out,
    interchanges: &[StoredInterchange],
    copies: &[DriftedCopy],
    json: bool,
) -> ExitStatus {
    if copies.is_empty() {
        problem(
            out,
            "no drifted copy is kept under this key: nothing to compare",
        );
        out.flush();
        return ExitStatus::Problems;
    }
    for (n, copy) in copies.iter().enumerate() {
        let applied = interchanges
            .iter()
            .find(|i| i.sha256 == copy.stored_sha256)
            .or_else(|| interchanges.iter().find(|i| i.in_inbox));
        let old = applied.map(|i| split_segments(&i.raw)).unwrap_or_default();
        let new = split_segments(&copy.payload);
        // The text as the interchange's syntax identifier says (UNOC is Latin-1).
        let charset = applied.map_or(Charset::for_syntax("UNOC"), |i| {
            Charset::for_syntax(i.syntax.split(':').next().unwrap_or(""))
        });
        let (lines, changed_segments) = diff_lines(&old, &new, &charset);
        let d = CopyDiff {
            copy: n + 1,
            seen_at: &copy.seen_at,
            file: &copy.source_file,
            sha256: &copy.sha256,
            applied_sha256: &copy.stored_sha256,
            applied_id: applied.map(|i| i.id),
            changed_segments,
            lines,
        };
        if json {
            out.json(&d);
            continue;
        }
        out.line(&format!(
            "drifted copy {} of {}: seen {} in {}",
            d.copy,
            copies.len(),
            d.seen_at,
            d.file
        ));
        match applied {
            Some(i) => out.line(&format!(
                "  - applied  sha256 {} (#{}, first seen {} in {})",
                i.sha256, i.id, i.received_at, i.source_file
            )),
            None => out.line(&format!(
                "  - applied  sha256 {} (no longer stored: purged)",
                d.applied_sha256
            )),
        }
        out.line(&format!("  + drifted  sha256 {}", d.sha256));
        for l in &d.lines {
            if l.mark == "..." {
                out.line("    ...");
            } else {
                out.line(&format!(
                    "  {} {:>4} {}",
                    l.mark, l.segment_number, l.segment
                ));
            }
        }
        out.line(&format!(
            "  {} segment{} changed; `show ... --raw --copy {}` prints this copy",
            d.changed_segments,
            if d.changed_segments == 1 { "" } else { "s" },
            d.copy
        ));
    }
    out.flush();
    if out.failed() {
        ExitStatus::Problems
    } else {
        ExitStatus::Success
    }
}

/// The lines of the diff of two copies' segments, changes with [`CONTEXT`] unchanged segments
/// around them (a `...` line where some are left out), and how many segments changed.
fn diff_lines(old: &[&[u8]], new: &[&[u8]], charset: &Charset) -> (Vec<Line>, usize) {
    let text = |s: &[u8]| charset.decode(s).to_string();
    // Segments are numbered as ISO 9735 counts them: a UNA is not one.
    let una = |side: &[&[u8]]| usize::from(!side.first().is_some_and(|s| s.starts_with(b"UNA")));
    let (old_base, new_base) = (una(old), una(new));
    let ops = capture_diff_slices(Algorithm::Myers, old, new);
    let mut changed = 0;
    let mut lines = Vec::new();
    let groups = group_diff_ops(ops, CONTEXT);
    for (g, group) in groups.iter().enumerate() {
        if g > 0 || group.first().is_some_and(|op| op.old_range().start > 0) {
            lines.push(Line {
                mark: "...",
                segment_number: 0,
                segment: String::new(),
            });
        }
        for op in group {
            match *op {
                DiffOp::Equal { old_index, len, .. } => {
                    for (k, segment) in old.iter().enumerate().skip(old_index).take(len) {
                        lines.push(Line {
                            mark: " ",
                            segment_number: k + old_base,
                            segment: text(segment),
                        });
                    }
                }
                _ => {
                    let (o, n) = (op.old_range(), op.new_range());
                    changed += o.len().max(n.len());
                    for k in o {
                        lines.push(Line {
                            mark: "-",
                            segment_number: k + old_base,
                            segment: text(old[k]),
                        });
                    }
                    for k in n {
                        lines.push(Line {
                            mark: "+",
                            segment_number: k + new_base,
                            segment: text(new[k]),
                        });
                    }
                }
            }
        }
    }
    if groups
        .last()
        .and_then(|g| g.last())
        .is_some_and(|op| op.old_range().end < old.len())
    {
        lines.push(Line {
            mark: "...",
            segment_number: 0,
            segment: String::new(),
        });
    }
    (lines, changed)
}

/// Prints the bytes of drifted copy `n` (from 1).
pub fn raw_copy(out: &mut Out, copies: &[DriftedCopy], n: usize) -> ExitStatus {
    match copies.get(n.wrapping_sub(1)) {
        Some(copy) => {
            out.raw(&copy.payload);
            out.flush();
            if out.failed() {
                ExitStatus::Problems
            } else {
                ExitStatus::Success
            }
        }
        None => {
            problem(
                out,
                &format!(
                    "--copy {n}: {} drifted cop{} kept under this key",
                    copies.len(),
                    if copies.len() == 1 { "y is" } else { "ies are" }
                ),
            );
            out.flush();
            ExitStatus::Problems
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_segment_is_marked_with_its_context() {
        let old: Vec<&[u8]> = vec![
            b"UNB'",
            b"UNH'",
            b"BGM'",
            b"NAD+BY+Hauptstra?+e'",
            b"LIN'",
            b"QTY'",
            b"CNT'",
            b"UNT'",
            b"UNZ'",
        ];
        let mut new = old.clone();
        new[3] = b"NAD+BY+Nebenstra?+e'";
        let latin1 = Charset::for_syntax("UNOC");
        let (lines, changed) = diff_lines(&old, &new, &latin1);
        assert_eq!(changed, 1);
        let shown: Vec<String> = lines
            .iter()
            .map(|l| format!("{}{} {}", l.mark, l.segment_number, l.segment))
            .collect();
        assert_eq!(
            shown,
            [
                "...0 ",
                " 2 UNH'",
                " 3 BGM'",
                "-4 NAD+BY+Hauptstra?+e'",
                "+4 NAD+BY+Nebenstra?+e'",
                " 5 LIN'",
                " 6 QTY'",
                "...0 "
            ]
        );
        let (lines, changed) = diff_lines(&old, &old, &latin1);
        assert_eq!((lines.len(), changed), (0, 0));
    }
}
