//! The documents kept true: every file under `src/` is named in `docs/development.md`'s layout,
//! under the heading of its folder, and every cargo feature in its table of features; every
//! broker of the table in `src/brokers.rs` is named in `docs/brokers.md`; and every alert's
//! `runbook_url` points at a section of `docs/operating.md` that exists and that the Debian
//! package installs where the URL says.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_is_named_in_the_layout() {
    let layout = read("docs/development.md");
    let mut files = Vec::new();
    files_under(&root().join("src"), &mut files);
    let missing: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .filter(|rel| !layout.contains(&format!("`{rel}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/development.md does not name these files of src/ (as `path`): {missing:#?}"
    );
    // And names no file that is gone: a path in backticks under src/ must exist.
    let gone: Vec<&str> = layout
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("src/") && !s.contains(' ') && !s.contains('*'))
        .filter(|s| !root().join(s.trim_end_matches('/')).exists())
        .collect();
    assert!(
        gone.is_empty(),
        "docs/development.md names files that do not exist: {gone:#?}"
    );
}

/// Each `src/...` entry of the layout stands under its heading: the heading naming the folder
/// (or the file) the entry is in, the nearest such where several do (`src/inbox/sqlite/` before
/// `src/inbox/`); an entry whose folder no heading names (`src/lib.rs`) under a heading naming
/// no path. A heading is a bold line (`**AS4: `src/as4/`**`) or a paragraph of one line ending in
/// a colon (`SQLite, `src/inbox/sqlite/`:`); an entry is a list item starting with its path.
#[test]
fn every_layout_entry_stands_under_the_heading_naming_its_folder() {
    let development = read("docs/development.md");
    let layout = development
        .split_once("\n## Layout\n")
        .map(|(_, rest)| rest)
        .expect("docs/development.md has a ## Layout section");
    let layout = layout.split("\n## ").next().unwrap_or(layout);
    let lines: Vec<&str> = layout.lines().collect();
    let paths = |line: &str| -> Vec<String> {
        line.split('`')
            .skip(1)
            .step_by(2)
            .filter(|s| s.starts_with("src/"))
            .map(str::to_string)
            .collect()
    };
    let blank = |i: usize| lines.get(i).is_none_or(|l| l.trim().is_empty());
    // Each heading with the paths it names, and each entry with the heading it stands under.
    let mut headings: Vec<(&str, Vec<String>)> = Vec::new();
    let mut entries: Vec<(String, usize)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let single = i > 0 && blank(i - 1) && blank(i + 1) && line.trim_end().ends_with(':');
        if line.starts_with("**") || (single && !line.starts_with('-')) {
            headings.push((line.trim(), paths(line)));
        } else if let Some(item) = line.strip_prefix("- `src/") {
            let path = format!("src/{}", item.split('`').next().unwrap_or(""));
            let Some(under) = headings.len().checked_sub(1) else {
                panic!("{path} stands before any heading of the layout");
            };
            entries.push((path, under));
        }
    }
    assert!(
        headings.len() >= 10 && entries.len() >= 100,
        "only {} headings and {} entries read from the layout",
        headings.len(),
        entries.len()
    );
    let mut misfiled = Vec::new();
    for (path, under) in &entries {
        // How closely a heading names the entry's place: the length of its path that holds it.
        let closeness = |names: &[String]| {
            names
                .iter()
                .filter(|n| *n == path || (n.ends_with('/') && path.starts_with(n.as_str())))
                .map(String::len)
                .max()
        };
        let best = headings.iter().filter_map(|(_, n)| closeness(n)).max();
        let home: Vec<&str> = headings
            .iter()
            .filter(|(_, n)| match best {
                Some(best) => closeness(n) == Some(best),
                None => n.is_empty(),
            })
            .map(|(h, _)| *h)
            .collect();
        let (heading, _) = &headings[*under];
        if !home.contains(heading) {
            misfiled.push(format!(
                "{path} stands under {heading:?} but belongs under {}",
                home.iter()
                    .map(|h| format!("{h:?}"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        }
    }
    assert!(
        misfiled.is_empty(),
        "docs/development.md's layout files these entries under another heading: {misfiled:#?}"
    );
}

/// A broker of the table in `src/brokers.rs` (`BROKERS`), read from its text: what the documents
/// must name.
struct TableBroker {
    name: String,
    feature: String,
    schemes: Vec<String>,
    from: bool,
    to: bool,
}

fn broker_table() -> Vec<TableBroker> {
    let source = read("src/brokers.rs");
    let table = source
        .split_once("pub const BROKERS: &[Broker] = &[")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split_once("\n];"))
        .map(|(table, _)| table)
        .expect("src/brokers.rs has `pub const BROKERS: &[Broker] = &[ ... ];`");
    table
        .split("\n    Broker {")
        .skip(1)
        .map(|b| {
            // A field of the line, as rustfmt writes it: eight spaces in.
            let field = |name: &str| {
                b.split_once(&format!("\n        {name}: "))
                    .and_then(|(_, rest)| rest.lines().next())
                    .unwrap_or_else(|| panic!("a broker without {name}: {b}"))
            };
            let quoted = |text: &str| -> Vec<String> {
                text.split('"')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect()
            };
            TableBroker {
                name: quoted(field("name")).concat(),
                feature: quoted(field("feature")).concat(),
                schemes: quoted(field("schemes")),
                from: field("from").starts_with("Some("),
                to: field("to").starts_with("Some("),
            }
        })
        .collect()
}

/// The lines of a `### TITLE` section of `doc`, up to the next heading.
fn section<'a>(doc: &'a str, title: &str) -> &'a str {
    let rest = doc
        .split_once(&format!("\n### {title}\n"))
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no ### {title}"));
    rest.split("\n#").next().unwrap_or(rest)
}

/// docs/brokers.md is where the brokers are told apart: its opening names every broker of the
/// table and the feature that builds it, its list of destinations a URL of each broker `--to`
/// takes, its list of sources one of each that `--from` takes. A broker added to the table and
/// not to these lists (SQS was missing from both) fails here.
#[test]
fn the_brokers_guide_names_every_broker_of_the_table() {
    let table = broker_table();
    assert!(
        table.len() >= 5 && table.iter().filter(|b| b.from).count() >= 4,
        "only {} brokers read from src/brokers.rs",
        table.len()
    );
    let guide = read("docs/brokers.md");
    let opening = guide
        .split("\n\n")
        .nth(1)
        .expect("docs/brokers.md has an opening paragraph");
    let listed = |list: &str, b: &TableBroker| {
        list.lines()
            .any(|l| b.schemes.iter().any(|s| l.starts_with(&format!("- `{s}"))))
    };
    let destinations = section(&guide, "Destinations");
    let sources = section(&guide, "Sources");
    let mut missing = Vec::new();
    for b in &table {
        if !opening.contains(&b.name) {
            missing.push(format!("the opening does not name {}", b.name));
        }
        if b.feature != "cli" && !opening.contains(&format!("`{}`", b.feature)) {
            missing.push(format!(
                "the opening does not name the feature `{}`",
                b.feature
            ));
        }
        if b.to && !listed(destinations, b) {
            missing.push(format!(
                "### Destinations lists no URL of {} ({:?})",
                b.name, b.schemes
            ));
        }
        if b.from && !listed(sources, b) {
            missing.push(format!(
                "### Sources lists no URL of {} ({:?})",
                b.name, b.schemes
            ));
        }
    }
    assert!(missing.is_empty(), "docs/brokers.md: {missing:#?}");
}

/// docs/development.md's table of cargo features has a row for each feature of Cargo.toml (but
/// `default`, which is all of them): it lacked `kafka`, `sqs` and `as4` once they came.
#[test]
fn every_cargo_feature_has_its_row_in_the_building_table() {
    let manifest = read("Cargo.toml");
    let features = manifest
        .split_once("\n[features]\n")
        .map(|(_, rest)| rest.split("\n[").next().unwrap_or(rest))
        .expect("Cargo.toml has [features]");
    let names: Vec<&str> = features
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with(' ') && !l.starts_with(']'))
        .filter_map(|l| l.split_once(" = ").map(|(name, _)| name.trim()))
        .filter(|name| *name != "default")
        .collect();
    assert!(names.len() >= 10, "only {names:?} read from Cargo.toml");
    let development = read("docs/development.md");
    let missing: Vec<&&str> = names
        .iter()
        .filter(|name| !development.contains(&format!("\n| `{name}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/development.md's table of features has no row for {missing:?}"
    );
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_has_a_runbook_section_in_the_operating_guide() {
    let rules = read("packaging/prometheus/edi-inbox.rules.yml");
    let operating = read("docs/operating.md");
    let anchors: BTreeSet<String> = operating
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();
    let prefix = "file:///usr/share/doc/edi-inbox/operating.md#";
    let mut alerts = 0;
    let mut problems = Vec::new();
    let lines: Vec<&str> = rules.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line.trim().strip_prefix("- alert: ") else {
            continue;
        };
        alerts += 1;
        // The rule's own lines: up to the next rule.
        let body = lines[i + 1..]
            .iter()
            .take_while(|l| !l.trim().starts_with("- alert: "));
        let url = body
            .map(|l| l.trim())
            .find_map(|l| l.strip_prefix("runbook_url:"))
            .map(|u| u.trim().trim_matches('"').to_string());
        match url {
            None => problems.push(format!("{name}: no runbook_url")),
            Some(url) => match url.strip_prefix(prefix) {
                None => problems.push(format!("{name}: runbook_url {url} is not under {prefix}")),
                Some(a) if a != anchor(name) => problems.push(format!(
                    "{name}: runbook_url points at #{a}, not its own section"
                )),
                Some(a) if !anchors.contains(a) => {
                    problems.push(format!("{name}: docs/operating.md has no section #{a}"))
                }
                Some(_) => {}
            },
        }
    }
    assert!(
        alerts >= 13,
        "only {alerts} alerts read from the rules file"
    );
    assert!(problems.is_empty(), "{problems:#?}");
    // The URL names the installed copy: the package must put it there.
    let manifest = read("Cargo.toml");
    assert!(
        manifest.contains("\"docs/operating.md\"") || manifest.contains("\"docs/*.md\""),
        "Cargo.toml's [package.metadata.deb] assets do not install docs/operating.md"
    );
}

/// Each test `docs/guarantees.md` names as `tests/it/FILE.rs::NAME` is in that file (as a test
/// function, or as a module of `per_backend!` / `per_broker!`): a promise's test that was renamed
/// or removed must be noticed where the promise is made.
#[test]
fn every_test_the_guarantees_name_exists() {
    let guarantees = read("docs/guarantees.md");
    let mut named = 0;
    let mut missing = Vec::new();
    for quoted in guarantees.split('`').skip(1).step_by(2) {
        let Some((file, name)) = quoted.split_once("::") else {
            continue;
        };
        if !file.starts_with("tests/") || !file.ends_with(".rs") {
            continue;
        }
        let name = name.split("::").next().unwrap_or(name);
        named += 1;
        let source = fs::read_to_string(root().join(file)).unwrap_or_default();
        let defined = [format!("fn {name}("), format!("mod {name} ")]
            .iter()
            .any(|d| source.contains(d.as_str()));
        if !defined {
            missing.push(format!("{file}::{name}"));
        }
    }
    assert!(
        named >= 10,
        "only {named} tests read from docs/guarantees.md"
    );
    assert!(
        missing.is_empty(),
        "docs/guarantees.md names tests that are not there: {missing:#?}"
    );
}
