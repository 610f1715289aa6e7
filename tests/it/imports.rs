//! No import circle between the files of `src/` (issue 38, item 2): files that use each other,
//! directly or through others, can be neither read nor moved apart, and a circle is what told
//! that `cli.rs` and `publish/` were one piece. Read from the text, without compiling:
//!
//! - a use is a `use` of a path starting with `crate::`, `self::`, `super::` or a module the
//!   file declares (`mod y;`) or imported by an earlier `use`, and such a path written in the
//!   code (`crate::edifact::interchanges(..)`); it is resolved to the file of the deepest module
//!   it names that has one (`src/a/b.rs` or `src/a/b/mod.rs`; `crate::` alone, `src/lib.rs`);
//! - the tests do not count: an item under `#[cfg(test)]` (or `#[cfg(all(test, ..))]`), the
//!   `mod tests { .. }` block most files end with, and a file declared as such a module
//!   (`#[cfg(test)] mod tests;`);
//! - nor do the links between a module's file and its own submodules' files, either way: the
//!   parent declares and re-exports them, they reach what it shares through `super::`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Colons,
    Punct(char),
}

struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifiers, `::` and punctuation of a Rust file, without its comments and literals
/// (a path in a string or a doc comment is no use).
fn tokens(text: &str) -> Vec<Token> {
    let s: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    // Skips a quoted literal from its opening quote, escapes honoured unless raw.
    let skip_quoted = |mut i: usize, line: &mut usize, raw: bool, hashes: usize| -> usize {
        i += 1;
        while i < s.len() {
            match s[i] {
                '\\' if !raw => i += 1,
                '\n' => *line += 1,
                '"' if (1..=hashes).all(|k| at(i + k) == '#') => return i + 1 + hashes,
                _ => {}
            }
            i += 1;
        }
        i
    };
    while i < s.len() {
        let c = s[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut nesting = 0;
            while i < s.len() {
                if s[i] == '/' && at(i + 1) == '*' {
                    nesting += 1;
                    i += 2;
                } else if s[i] == '*' && at(i + 1) == '/' {
                    nesting -= 1;
                    i += 2;
                    if nesting == 0 {
                        break;
                    }
                } else {
                    if s[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_quoted(i, &mut line, false, 0);
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                // An escaped character (`'\''`, `'\u{..}'`): past it, to its closing quote.
                i += 3;
                while i < s.len() && s[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or a label.
                i += 1;
                while i < s.len() && is_ident(s[i]) {
                    i += 1;
                }
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < s.len() && is_ident(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            match (word.as_str(), at(i)) {
                ("r" | "br" | "cr", '"' | '#') => {
                    let mut hashes = 0;
                    while at(i + hashes) == '#' {
                        hashes += 1;
                    }
                    if at(i + hashes) == '"' {
                        i = skip_quoted(i + hashes, &mut line, true, hashes);
                    } else {
                        // A raw identifier, `r#type`: the word after the `#`.
                        i += 1;
                        let start = i;
                        while i < s.len() && is_ident(s[i]) {
                            i += 1;
                        }
                        let tok = Tok::Ident(s[start..i].iter().collect());
                        out.push(Token { tok, line });
                    }
                }
                ("b" | "c", '"') => i = skip_quoted(i, &mut line, false, 0),
                ("b", '\'') => {
                    // `b'x'` or `b'\''`: past the character (escaped or not), to the quote.
                    i += if at(i + 1) == '\\' { 3 } else { 2 };
                    while i < s.len() && s[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                }
                _ => out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                }),
            }
        } else if c.is_ascii_digit() {
            while i < s.len() && is_ident(s[i]) {
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::Colons,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    out
}

/// How a path written in a file starts, which says what it is relative to.
#[derive(Debug, Clone)]
enum Start {
    Crate,
    /// `self::` (0) or `super::` n times, from the module it is written in.
    Up(usize),
    /// A name: a module the file declares or imported by an earlier `use`, or anything else
    /// (another crate, a type), which is no use of a file.
    Name,
}

/// A path to a module or item of the crate as written in a file: where it is written (the module
/// path, an inline module's name included, and the line), how it starts, and its names.
struct Written {
    module: Vec<String>,
    line: usize,
    start: Start,
    names: Vec<String>,
    /// The name a `use` gives it in the file, if it is one.
    alias: Option<String>,
    text: String,
}

/// What one file says: the paths it writes outside its tests, and the modules it declares with
/// `mod name;` (true: under `#[cfg(test)]`).
#[derive(Default)]
struct Scan {
    written: Vec<Written>,
    declared: Vec<(String, bool)>,
}

fn ident(toks: &[Token], i: usize) -> Option<&str> {
    match toks.get(i).map(|t| &t.tok) {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

fn punct(toks: &[Token], i: usize, c: char) -> bool {
    matches!(toks.get(i).map(|t| &t.tok), Some(Tok::Punct(p)) if *p == c)
}

fn colons(toks: &[Token], i: usize) -> bool {
    matches!(toks.get(i).map(|t| &t.tok), Some(Tok::Colons))
}

/// From an opening bracket to just past its closing one.
fn past_group(toks: &[Token], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < toks.len() {
        match &toks[i].tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Just past the item starting at `i`: its `;` or its closing brace, whichever ends it.
fn past_item(toks: &[Token], mut i: usize) -> usize {
    while i < toks.len() {
        match &toks[i].tok {
            Tok::Punct(';') => return i + 1,
            Tok::Punct('{') => return past_group(toks, i),
            Tok::Punct('(' | '[') => i = past_group(toks, i),
            _ => i += 1,
        }
    }
    i
}

/// Whether an attribute's tokens (between `[` and `]`) keep its item to the tests:
/// `cfg(test)`, or `cfg(all(..))` with `test` among its conditions.
fn test_only(attr: &[Token]) -> bool {
    let words: Vec<Option<&str>> = (0..attr.len()).map(|i| ident(attr, i)).collect();
    if words.first() != Some(&Some("cfg")) || !punct(attr, 1, '(') {
        return false;
    }
    if words.get(2) == Some(&Some("test")) && punct(attr, 3, ')') {
        return true;
    }
    if words.get(2) != Some(&Some("all")) {
        return false;
    }
    // The conditions of `all(..)` at its own depth: `test`, not `not(test)`.
    let mut depth = 0;
    for t in &attr[3..] {
        match &t.tok {
            Tok::Punct('(') => depth += 1,
            Tok::Punct(')') => depth -= 1,
            Tok::Ident(w) if depth == 1 && w == "test" => return true,
            _ => {}
        }
    }
    false
}

/// Expands a `use` tree from `i` into `(names, alias)` pairs, `prefix` before each.
fn use_tree(
    toks: &[Token],
    i: &mut usize,
    mut path: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    loop {
        if let Some(name) = ident(toks, *i) {
            path.push(name.to_string());
            *i += 1;
            if colons(toks, *i) {
                *i += 1;
                continue;
            }
            if path.last().map(String::as_str) == Some("self") {
                path.pop();
            }
            let mut alias = path.last().cloned();
            if ident(toks, *i) == Some("as") {
                alias = ident(toks, *i + 1).map(str::to_string);
                *i += 2;
            }
            out.push((path, alias));
            return;
        } else if punct(toks, *i, '*') {
            *i += 1;
            out.push((path, None));
            return;
        } else if punct(toks, *i, '{') {
            *i += 1;
            while *i < toks.len() && !punct(toks, *i, '}') {
                use_tree(toks, i, path.clone(), out);
                if punct(toks, *i, ',') {
                    *i += 1;
                }
            }
            *i += 1;
            return;
        } else {
            // Nothing this reading knows: leave it.
            *i += 1;
            return;
        }
    }
}

impl Written {
    fn new(
        module: Vec<String>,
        line: usize,
        mut names: Vec<String>,
        alias: Option<String>,
    ) -> Self {
        let text = names.join("::");
        let start = start_of(&mut names);
        Written {
            module,
            line,
            start,
            names,
            alias,
            text,
        }
    }
}

fn start_of(names: &mut Vec<String>) -> Start {
    match names.first().map(String::as_str) {
        Some("crate") => {
            names.remove(0);
            Start::Crate
        }
        Some("self") => {
            names.remove(0);
            Start::Up(0)
        }
        Some("super") => {
            let ups = names.iter().take_while(|n| *n == "super").count();
            names.drain(..ups);
            Start::Up(ups)
        }
        _ => Start::Name,
    }
}

/// The paths one file writes outside its tests, `module` being its module's path.
fn scan(toks: &[Token], module: &[String]) -> Scan {
    let mut scan = Scan::default();
    let mut depth = 0usize;
    // The inline modules (`mod sse2 { .. }`) the reading is in, with the depth inside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let here = |inline: &[(String, usize)]| -> Vec<String> {
        let mut m = module.to_vec();
        m.extend(inline.iter().map(|(n, _)| n.clone()));
        m
    };
    let mut i = 0;
    while i < toks.len() {
        let line = toks[i].line;
        if punct(toks, i, '#') {
            let inner = punct(toks, i + 1, '!');
            let open = if inner { i + 2 } else { i + 1 };
            if !punct(toks, open, '[') {
                i += 1;
                continue;
            }
            let end = past_group(toks, open);
            let test = test_only(&toks[open + 1..end.saturating_sub(1)]);
            i = end;
            if test && inner {
                // The whole file (or inline module) is a test's.
                return Scan::default();
            }
            if test {
                // Past the item's other attributes, then past the item.
                while punct(toks, i, '#') && punct(toks, i + 1, '[') {
                    i = past_group(toks, i + 1);
                }
                let mut k = i;
                if ident(toks, k) == Some("pub") {
                    k += 1;
                    if punct(toks, k, '(') {
                        k = past_group(toks, k);
                    }
                }
                if ident(toks, k) == Some("mod")
                    && punct(toks, k + 2, ';')
                    && let Some(name) = ident(toks, k + 1)
                {
                    scan.declared.push((name.to_string(), true));
                }
                i = past_item(toks, i);
            }
            continue;
        }
        match &toks[i].tok {
            Tok::Ident(w) if w == "mod" => {
                if let Some(name) = ident(toks, i + 1) {
                    if punct(toks, i + 2, ';') {
                        scan.declared.push((name.to_string(), false));
                        i += 3;
                        continue;
                    }
                    if punct(toks, i + 2, '{') {
                        depth += 1;
                        inline.push((name.to_string(), depth));
                        i += 3;
                        continue;
                    }
                }
                i += 1;
            }
            Tok::Ident(w) if w == "use" => {
                i += 1;
                if colons(toks, i) {
                    // `use ::other_crate`.
                    i = past_item(toks, i);
                    continue;
                }
                let mut paths = Vec::new();
                use_tree(toks, &mut i, Vec::new(), &mut paths);
                for (names, alias) in paths {
                    let written = Written::new(here(&inline), line, names, alias);
                    scan.written.push(written);
                }
            }
            Tok::Ident(first) if colons(toks, i + 1) && !(i > 0 && colons(toks, i - 1)) => {
                // A path in the code: its names while `::` follows each.
                let mut names = vec![first.clone()];
                let mut k = i + 1;
                while colons(toks, k) {
                    match ident(toks, k + 1) {
                        Some(n) => names.push(n.to_string()),
                        None => break,
                    }
                    k += 2;
                }
                scan.written
                    .push(Written::new(here(&inline), line, names, None));
                i = k;
            }
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    scan
}

/// A file's module path: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`, `src/lib.rs` the root.
fn module_of(rel: &str) -> Vec<String> {
    let inner = rel.strip_prefix("src/").unwrap_or(rel);
    let inner = inner.strip_suffix(".rs").unwrap_or(inner);
    let mut names: Vec<String> = inner.split('/').map(str::to_string).collect();
    if matches!(names.last().map(String::as_str), Some("mod" | "lib")) {
        names.pop();
    }
    names
}

fn files_under(dir: &Path, out: &mut Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            files_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Where one file uses another: the line and the path as written.
type Uses = BTreeMap<String, BTreeMap<String, (usize, String)>>;

/// Every use of one file by another in `src/` (the library; `src/main.rs` is a crate of its own
/// that only calls it), each pair once with its first place.
fn uses() -> Uses {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    files_under(&root.join("src"), &mut files);
    files.retain(|f| f != "src/main.rs");
    files.sort();
    let by_module: BTreeMap<Vec<String>, String> =
        files.iter().map(|f| (module_of(f), f.clone())).collect();
    let scans: BTreeMap<&String, Scan> = files
        .iter()
        .map(|f| {
            let text = fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
            (f, scan(&tokens(&text), &module_of(f)))
        })
        .collect();
    // The files that are test modules (`#[cfg(test)] mod tests;`), read no further.
    let tests: BTreeSet<&String> = scans
        .iter()
        .flat_map(|(f, s)| {
            let parent = module_of(f);
            s.declared.iter().filter(|(_, t)| *t).filter_map({
                let by_module = &by_module;
                move |(name, _)| {
                    let mut m = parent.clone();
                    m.push(name.clone());
                    by_module.get(&m)
                }
            })
        })
        .collect();
    // The file of the deepest module that `path` names, and whether it names that module whole.
    let resolve = |path: &[String]| -> (&String, bool) {
        let mut best = (&by_module[&Vec::new()], path.is_empty());
        for n in 1..=path.len() {
            match by_module.get(&path[..n]) {
                Some(f) => best = (f, n == path.len()),
                None => break,
            }
        }
        best
    };
    let mut uses = Uses::new();
    for (file, s) in &scans {
        if tests.contains(file) {
            continue;
        }
        let module = module_of(file);
        let children: BTreeSet<&str> = s
            .declared
            .iter()
            .filter(|(_, t)| !t)
            .map(|(n, _)| n.as_str())
            .collect();
        // The modules an earlier `use` named whole, by the name it gave them here.
        let mut imported: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for w in &s.written {
            let absolute = match &w.start {
                Start::Crate => w.names.clone(),
                Start::Up(n) => {
                    let Some(keep) = w.module.len().checked_sub(*n) else {
                        panic!("{file}:{}: {} goes above the crate", w.line, w.text)
                    };
                    let mut p = w.module[..keep].to_vec();
                    p.extend(w.names.iter().cloned());
                    p
                }
                Start::Name => {
                    let first = w.names[0].as_str();
                    if w.module == module && children.contains(first) {
                        let mut p = module.clone();
                        p.extend(w.names.iter().cloned());
                        p
                    } else if let Some(m) = imported.get(first) {
                        let mut p = m.clone();
                        p.extend(w.names[1..].iter().cloned());
                        p
                    } else {
                        continue;
                    }
                }
            };
            let (target, whole) = resolve(&absolute);
            if whole && let Some(alias) = &w.alias {
                imported.insert(alias.clone(), absolute.clone());
            }
            let theirs = module_of(target);
            let parent_child = theirs
                .split_last()
                .is_some_and(|(_, p)| p == module.as_slice())
                || module
                    .split_last()
                    .is_some_and(|(_, p)| p == theirs.as_slice());
            if target == *file || parent_child || tests.contains(target) {
                continue;
            }
            uses.entry((*file).clone())
                .or_default()
                .entry(target.clone())
                .or_insert((w.line, w.text.clone()));
        }
    }
    uses
}

/// The pieces of more than one file in which each uses each other through the rest (Tarjan's
/// strongly connected components), each sorted, in a fixed order.
fn pieces(uses: &Uses) -> Vec<Vec<String>> {
    struct State<'a> {
        uses: &'a Uses,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(st: &mut State<'a>, v: &'a str) {
        let n = st.index.len();
        st.index.insert(v, n);
        st.low.insert(v, n);
        st.stack.push(v);
        st.on_stack.insert(v);
        for w in st.uses.get(v).into_iter().flat_map(|m| m.keys()) {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let low = st.low[v].min(st.low[w]);
                st.low.insert(v, low);
            } else if st.on_stack.contains(w) {
                let low = st.low[v].min(st.index[w]);
                st.low.insert(v, low);
            }
        }
        if st.low[v] == st.index[v] {
            let mut piece = Vec::new();
            while let Some(w) = st.stack.pop() {
                st.on_stack.remove(w);
                piece.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if piece.len() > 1 {
                piece.sort();
                st.out.push(piece);
            }
        }
    }
    let mut st = State {
        uses,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in uses.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.out.sort();
    st.out
}

/// The shortest circle from `from` back to it within `piece`.
fn circle(uses: &Uses, piece: &[String], from: &str) -> Vec<String> {
    let mut came: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(v) = queue.pop_front() {
        for w in uses.get(v).into_iter().flat_map(|m| m.keys()) {
            if !piece.contains(w) {
                continue;
            }
            if w == from {
                let mut path = vec![v.to_string()];
                let mut at = v;
                while at != from {
                    at = came[at];
                    path.push(at.to_string());
                }
                path.reverse();
                return path;
            }
            if !came.contains_key(w.as_str()) {
                came.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    unreachable!("{from} is in a piece of files using each other")
}

#[test]
fn no_import_circle_between_source_files() {
    let uses = uses();
    let count: usize = uses.values().map(BTreeMap::len).sum();
    // A reading that found nothing would find no circle either.
    assert!(
        uses.len() >= 80 && count >= 300,
        "only {count} uses in {} files read from src/",
        uses.len()
    );
    let mut circles = BTreeSet::new();
    for piece in pieces(&uses) {
        for from in &piece {
            let mut c = circle(&uses, &piece, from);
            // Each circle once, from its first file.
            let first = (0..c.len()).min_by_key(|&k| &c[k]).unwrap_or(0);
            c.rotate_left(first);
            circles.insert(c);
        }
    }
    let described: Vec<String> = circles
        .iter()
        .map(|c| {
            let mut steps = Vec::new();
            for (k, from) in c.iter().enumerate() {
                let to = &c[(k + 1) % c.len()];
                let (line, text) = &uses[from][to];
                steps.push(format!("{from}:{line} ({text}) -> {to}"));
            }
            format!(
                "{} -> {}\n      {}",
                c.join(" -> "),
                c[0],
                steps.join("\n      ")
            )
        })
        .collect();
    assert!(
        described.is_empty(),
        "files of src/ that use each other (issue 38, item 2: no import circle):\n  {}",
        described.join("\n  ")
    );
}
