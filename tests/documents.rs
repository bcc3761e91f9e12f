//! The documents stay true and self-contained: every document the sources and scripts name
//! is in the repository, every section they name exists, every repository path the
//! documents name exists, every raw-data file under docs/perf/ is cited by a current table,
//! and no file speaks of how the project was built (work periods, GPU-access periods, issue
//! numbers) instead of the product.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use regex::Regex;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folders whose files are read, besides the top-level documents and the Makefile.
const FOLDERS: [&str; 10] = [
    "src",
    "tests",
    "scripts",
    "jobs",
    "docs",
    "kernels",
    "postprocess",
    "inputs",
    ".ci",
    "cuda-standin",
];

const TEXT: [&str; 12] = [
    "rs", "md", "sh", "py", "toml", "cu", "cuh", "sbatch", "geo", "yml", "cpp", "h",
];

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Every text file of the product, as (path relative to the root, text). Raw data under
/// docs/perf/ are measurements as the tools printed them, and are not read; nor is this
/// file, whose examples plant problems on purpose.
fn product_files() -> Vec<(String, String)> {
    let root = root();
    let mut paths = vec![];
    for folder in FOLDERS {
        walk(&root.join(folder), &mut paths);
    }
    for entry in fs::read_dir(&root).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_file() && (name.ends_with(".md") || name == "Makefile") {
            paths.push(path);
        }
    }
    let mut files: Vec<(String, String)> = paths
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name == "Makefile"
                || p.extension()
                    .is_some_and(|e| TEXT.contains(&e.to_string_lossy().as_ref()))
        })
        .map(|p| {
            let relative = p.strip_prefix(&root).unwrap().to_string_lossy().to_string();
            (relative, fs::read_to_string(&p).unwrap_or_default())
        })
        // The checks' own examples below are not references.
        .filter(|(path, _)| !path.starts_with("docs/perf/") && path != "tests/documents.rs")
        .collect();
    files.sort();
    files
}

/// Where `name` (a path as written in `file`) lies: relative to the root, or to the file's
/// folder.
fn resolves(file: &str, name: &str) -> bool {
    let root = root();
    let folder = root.join(file).parent().unwrap().to_path_buf();
    root.join(name).exists() || folder.join(name).exists()
}

/// The headings and bold paragraph leads of a Markdown document, for section references.
fn sections(document: &str) -> Vec<String> {
    document
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            if line.starts_with('#') {
                Some(line.trim_start_matches('#').trim().to_string())
            } else {
                line.strip_prefix("**")
                    .map(|rest| rest.split("**").next().unwrap_or("").to_string())
            }
        })
        .collect()
}

/// Documents named that are not in the repository, with where they are named: `*.md` names,
/// and a capitalised name before a section sign (`SPEC §2`, read as SPEC.md).
fn dangling_documents(files: &[(String, String)]) -> Vec<String> {
    let name = Regex::new(r"[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b").unwrap();
    let bare = Regex::new(r"\b([A-Z][A-Z0-9_-]+),? §\d").unwrap();
    let mut dangling = vec![];
    for (path, text) in files {
        for (number, line) in text.lines().enumerate() {
            for m in name.find_iter(line) {
                let doc = m.as_str().trim_start_matches("./");
                let in_url = line[..m.start()].ends_with('/') && line.contains("://");
                if !in_url && !resolves(path, doc) {
                    dangling.push(format!("{path}:{}: {doc}", number + 1));
                }
            }
            for c in bare.captures_iter(line) {
                let doc = format!("{}.md", &c[1]);
                if !resolves(path, &doc) {
                    dangling.push(format!("{path}:{}: {} §", number + 1, &c[1]));
                }
            }
        }
    }
    dangling
}

/// Sections named (`docs/x.md, "Heading"`, `docs/x.md §N`, or a list such as
/// `docs/x.md §1, §7 and §8.3`) that the document lacks.
fn dangling_sections(files: &[(String, String)]) -> Vec<String> {
    let quoted = Regex::new(r#"((?:docs/)?[A-Za-z0-9_-]+\.md),? "([^"]+)""#).unwrap();
    let numbered = Regex::new(
        r"((?:docs/)?[A-Za-z0-9_-]+\.md),? (§\d+(?:\.\d+)?(?:(?:,| and| or) §\d+(?:\.\d+)?)*)",
    )
    .unwrap();
    let number_in_list = Regex::new(r"§\d+(?:\.\d+)?").unwrap();
    let mut dangling = vec![];
    for (path, text) in files {
        for (number, line) in text.lines().enumerate() {
            let found = quoted
                .captures_iter(line)
                .map(|c| (c[1].to_string(), c[2].to_string(), false))
                .chain(numbered.captures_iter(line).flat_map(|c| {
                    let doc = c[1].to_string();
                    number_in_list
                        .find_iter(&c[2])
                        .map(|m| (doc.clone(), m.as_str().to_string(), true))
                        .collect::<Vec<_>>()
                }));
            for (doc, section, by_number) in found {
                let full = if resolves("README.md", &doc) {
                    root().join(&doc)
                } else {
                    root().join(path).parent().unwrap().join(&doc)
                };
                let Ok(document) = fs::read_to_string(&full) else {
                    continue; // a missing document is reported by dangling_documents
                };
                let present = sections(&document).iter().any(|s| {
                    if by_number {
                        s == &section || s.starts_with(&format!("{section} "))
                    } else {
                        s.trim_end_matches('.') == section.trim_end_matches('.')
                            || s.starts_with(&section)
                    }
                });
                if !present {
                    dangling.push(format!("{path}:{}: {doc} {section}", number + 1));
                }
            }
        }
    }
    dangling
}

/// Repository paths the documents name in backticks (`src/…`, `scripts/…`, …) that do not
/// exist; a pattern (`*`, `<…>`, `NNNNNN`, `{a,b}`) is checked up to its first wildcard.
fn missing_paths(files: &[(String, String)]) -> Vec<String> {
    let path = Regex::new(
        r"`((?:src|tests|scripts|jobs|docs|inputs|postprocess|kernels|cuda-standin)/[^`\s]*)`",
    )
    .unwrap();
    let mut missing = vec![];
    for (file, text) in files.iter().filter(|(f, _)| f.ends_with(".md")) {
        for (number, line) in text.lines().enumerate() {
            for c in path.captures_iter(line) {
                let written = c[1].split(':').next().unwrap_or("");
                let cut = written
                    .find(['*', '<', '{', '['])
                    .or_else(|| written.find("NNN"))
                    .unwrap_or(written.len());
                let checked = &written[..cut];
                let checked = if cut < written.len() {
                    checked.rsplit_once('/').map_or("", |(dir, _)| dir)
                } else {
                    checked
                };
                if !checked.is_empty() && !root().join(checked).exists() {
                    missing.push(format!("{file}:{}: {written}", number + 1));
                }
            }
        }
    }
    missing
}

/// Words about the people or process that built the project rather than the product.
fn process_words(files: &[(String, String)]) -> Vec<String> {
    let ordinal = r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\w+teenth|twentieth|\d+(?:st|nd|rd|th))";
    let patterns = [
        format!(r"(?i)\b(?:{ordinal}|this|last|previous|next|earlier|later) (?:work )?sessions?\b"),
        r"(?i)\bwork(?:ing)? periods?\b".to_string(),
        r"(?i)\b(?:gpu[- ])?access periods?\b".to_string(),
        format!(r"(?i)\b(?:{ordinal}|this|last|previous|next|a|the|gpu) leases?\b"),
        r"(?i)\bissues? #?\d+\b".to_string(),
        r"(?i)\btried and not kept\b".to_string(),
    ];
    let patterns: Vec<Regex> = patterns.iter().map(|p| Regex::new(p).unwrap()).collect();
    let mut found = vec![];
    for (path, text) in files {
        for (number, line) in text.lines().enumerate() {
            for p in &patterns {
                if let Some(m) = p.find(line) {
                    found.push(format!("{path}:{}: \"{}\"", number + 1, m.as_str()));
                }
            }
        }
    }
    found
}

#[test]
fn every_document_and_section_named_exists() {
    let files = product_files();
    assert!(files.len() > 100, "the files were read: {}", files.len());
    let mut problems = dangling_documents(&files);
    problems.extend(dangling_sections(&files));
    problems.extend(missing_paths(&files));
    assert!(
        problems.is_empty(),
        "references to documents, sections or paths that do not exist:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_product_speaks_of_the_product_only() {
    let found = process_words(&product_files());
    assert!(
        found.is_empty(),
        "words about how the project was built, not about the product:\n{}",
        found.join("\n")
    );
}

/// docs/perf/ holds the raw data behind the current tables and nothing else: every file
/// (or a folder above it) is cited in docs/performance.md or BENCHMARKING.md.
#[test]
fn every_raw_data_file_is_cited() {
    let root = root();
    let citing: String = ["docs/performance.md", "BENCHMARKING.md"]
        .iter()
        .map(|d| fs::read_to_string(root.join(d)).unwrap_or_default())
        .collect();
    let mut files = vec![];
    walk(&root.join("docs/perf"), &mut files);
    let uncited: BTreeSet<String> = files
        .iter()
        .map(|f| f.strip_prefix(&root).unwrap().to_string_lossy().to_string())
        .filter(|f| {
            let mut cited = false;
            let mut prefix = f.as_str();
            while prefix.contains('/') && !cited {
                cited = citing.contains(prefix);
                prefix = prefix.rsplit_once('/').map_or("", |(dir, _)| dir);
                if prefix == "docs/perf" {
                    break;
                }
            }
            !cited
        })
        .collect();
    assert!(
        uncited.is_empty(),
        "raw data no current table cites (cite it, or leave it to git history):\n{}",
        uncited.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The checks above find what they are for: a planted dangling reference, a missing section,
/// a missing path and a process word.
#[test]
fn the_checks_find_planted_problems() {
    let planted = vec![(
        "docs/example.md".to_string(),
        "See SPEC.md, DESIGN §3.2 and docs/mathematics.md §42, docs/mathematics.md §1 and \
         §43, docs/mathematics.md \"No such heading\",\n\
         the file `src/no/such.rs`, and what the seventh session measured on the third lease \
         for issue 60."
            .to_string(),
    )];
    assert_eq!(dangling_documents(&planted).len(), 2);
    assert_eq!(dangling_sections(&planted).len(), 3);
    assert_eq!(missing_paths(&planted).len(), 1);
    assert_eq!(process_words(&planted).len(), 3);
}
