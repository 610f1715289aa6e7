//! Any text as an effects file: the lexer must neither panic nor loop, what it reports must
//! point inside the text, and each statement it finds must be a piece of the text without blanks
//! at its edges that, split again, is that same statement (no parameter moved).
#![no_main]

use edi_inbox::effects::Piece;
use edi_inbox::effects::sql::split;
use libfuzzer_sys::fuzz_target;

/// Whether a 1-based line and column (in characters) stands in `text`, or just past the end
/// of its line.
fn within(text: &str, line: usize, column: usize) -> bool {
    text.split('\n')
        .nth(line.wrapping_sub(1))
        .is_some_and(|l| column >= 1 && column <= l.chars().count() + 1)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match split(text) {
        Ok(statements) => {
            for s in statements {
                assert!(!s.pieces.is_empty());
                assert!(!s.pieces.contains(&Piece::Sql(String::new())));
                let params = s.pieces.iter().filter(|p| matches!(p, Piece::Param(_)));
                assert_eq!(params.count(), s.params_at.len());
                assert!(within(text, s.line, 1));
                for &(line, column) in &s.params_at {
                    assert!(within(text, line, column), "{line}:{column}");
                }
                let written: String = s
                    .pieces
                    .iter()
                    .map(|p| match p {
                        Piece::Sql(sql) => sql.clone(),
                        Piece::Param(p) => p.to_string(),
                    })
                    .collect();
                // A statement is a piece of the text as it stands, with no blank at its edges.
                assert!(text.contains(&written), "{written:?}");
                let blank = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0B' | '\x0C');
                assert_eq!(written.trim_matches(blank), written);
                let again = split(&written).unwrap_or_else(|e| panic!("{written:?}: {e}"));
                assert_eq!(again.len(), 1, "{written:?}");
                assert_eq!(again[0].pieces, s.pieces, "{written:?}");
            }
        }
        Err(e) => {
            assert!(within(text, e.line, e.column), "{e}");
            let _ = e.to_string();
        }
    }
});
