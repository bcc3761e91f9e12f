//! The layering of docs/architecture.md, read from the sources: no import cycle between the
//! top-level modules of src/, a thin main.rs, algorithm files that never name a concrete
//! backend (solvers are written once against the device traits), a device layer that
//! mirrors itself across the backends, and a small driver (run/) that names no solver's
//! internals.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every .rs file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = vec![];
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The source without comments (line comments, doc comments, block comments) and without
/// the contents of string literals, so only code is read; line breaks are kept.
fn code(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    if c == '\n' {
                        out.push('\n');
                    }
                    last = c;
                }
            }
            '"' => {
                out.push('"');
                let mut escaped = false;
                for c in chars.by_ref() {
                    if !escaped && c == '"' {
                        break;
                    }
                    if c == '\n' {
                        out.push('\n');
                    }
                    escaped = !escaped && c == '\\';
                }
                out.push('"');
            }
            '\'' => {
                // A char literal ('x', '\n', '"') or a lifetime ('a).
                out.push('\'');
                let rest: String = chars.clone().take(3).collect();
                if let Some(escaped) = rest.strip_prefix('\\') {
                    let end = escaped.find('\'').map_or(0, |i| i + 2);
                    for _ in 0..end {
                        chars.next();
                    }
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn identifier(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules a piece of code names through `crate::` paths, including grouped
/// imports (`use crate::{a::b, c}`).
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start && depth == 0 => {
                        names.insert(identifier(&group[i..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(identifier(rest).to_string());
        }
    }
    names
}

/// The top-level module a file belongs to: `src/x.rs` and `src/x/…` are `x`.
fn module_of(file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src()).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "main" && name != "lib").then(|| name.to_string())
}

/// A cycle in the graph, if there is one, as the list of modules along it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut vec![], &mut done))
}

#[test]
fn top_level_modules_import_each_other_without_a_cycle() {
    let files = rust_files(&src());
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        let references = crate_references(&code(&fs::read_to_string(file).unwrap()));
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(
            references
                .into_iter()
                .filter(|r| *r != module && modules.contains(r)),
        );
    }
    assert!(graph.len() > 15, "the module graph was read: {graph:?}");
    assert!(
        graph["run"].contains("device") && graph["psc"].contains("linalg"),
        "the reader sees imports: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn the_reader_finds_cycles_and_grouped_imports() {
    let source = "use crate::{a::b, c::{d, e}};\n// use crate::commented;\nlet s = \"crate::quoted\";\nfn f() -> crate::g::H {}";
    let names = crate_references(&code(source));
    assert_eq!(
        names,
        ["a", "c", "g"].iter().map(|s| s.to_string()).collect()
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
}

/// run/ only reads the configuration, picks the backend and hands blocks to a solver: what
/// grows there belongs to a solver (poisson/, psc/, mg/, stokes/) or to the campaign.
#[test]
fn the_driver_stays_small() {
    let lines: usize = rust_files(&src().join("run"))
        .iter()
        .map(|f| fs::read_to_string(f).unwrap().lines().count())
        .sum();
    assert!(lines <= 900, "run/ has {lines} lines (at most 900)");
}

#[test]
fn main_stays_thin() {
    let lines = fs::read_to_string(src().join("main.rs"))
        .unwrap()
        .lines()
        .count();
    assert!(lines <= 150, "main.rs has {lines} lines");
}

/// psc/, mg/, stokes/ and linalg/ are written once for every device: they name the device
/// traits, never the CPU or CUDA backend (their unit tests, at the end of a file, run on
/// the CPU).
#[test]
fn algorithm_files_never_name_a_backend() {
    let forbidden = ["Cpu", "Cuda", "cpu", "cuda"];
    let mut offences = vec![];
    for dir in ["psc", "mg", "stokes", "linalg"] {
        for file in rust_files(&src().join(dir)) {
            let code = code(&fs::read_to_string(&file).unwrap());
            let code = code.split("#[cfg(test)]").next().unwrap_or_default();
            for (number, line) in code.lines().enumerate() {
                let named = line
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .find(|word| forbidden.contains(word));
                if let Some(word) = named {
                    offences.push(format!("{}:{}: {word}", file.display(), number + 1));
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "backends named in algorithm files:\n{}",
        offences.join("\n")
    );
}

/// The kernel families, each one file (or folder) of the same name in device/, device/cpu/
/// and device/cuda/ and one kernels/*.cu, with its trait declared in the first and
/// implemented in the other two.
const FAMILIES: [(&str, &str); 6] = [
    ("vector", "VectorKernels"),
    ("dense", "DenseKernels"),
    ("sparse", "SparseKernels"),
    ("multigrid", "MultigridKernels"),
    ("psc", "PscKernels"),
    ("stokes", "StokesKernels"),
];

/// The code of a family's file in `dir`: `dir/family.rs`, or the files of `dir/family/`.
fn family_code(dir: &Path, family: &str) -> Option<String> {
    let file = dir.join(format!("{family}.rs"));
    let folder = dir.join(family);
    if file.is_file() {
        Some(code(&fs::read_to_string(file).unwrap()))
    } else if folder.is_dir() {
        Some(
            rust_files(&folder)
                .iter()
                .map(|f| code(&fs::read_to_string(f).unwrap()))
                .collect(),
        )
    } else {
        None
    }
}

#[test]
fn the_device_layer_mirrors_itself_across_backends() {
    let device = src().join("device");
    let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut problems = vec![];
    for (family, trait_name) in FAMILIES {
        match family_code(&device, family) {
            Some(c) if c.contains(&format!("pub trait {trait_name}")) => {}
            _ => problems.push(format!("device/{family}.rs does not declare {trait_name}")),
        }
        for backend in ["Cpu", "Cuda"] {
            let dir = device.join(backend.to_lowercase());
            let implementation = format!("impl {trait_name} for {backend}");
            match family_code(&dir, family) {
                Some(c) if c.contains(&implementation) => {}
                _ => problems.push(format!(
                    "device/{}/{family} does not hold `{implementation}`",
                    backend.to_lowercase()
                )),
            }
        }
        if !kernels.join(format!("{family}.cu")).is_file() {
            problems.push(format!("kernels/{family}.cu is missing"));
        }
    }
    assert!(
        problems.is_empty(),
        "the device layer does not mirror itself:\n{}",
        problems.join("\n")
    );
}

/// The argument checks of every kernel live in device/checks.rs and run once, in the
/// family traits' public methods; a backend implements the `*_unchecked` kernels behind them
/// and never repeats a check: no file under device/cpu/ or device/cuda/ names the checks
/// module or any of its functions. Outside device/ nothing calls an `*_unchecked` kernel.
#[test]
fn backends_leave_the_argument_checks_to_the_front() {
    let device = src().join("device");
    let checks = code(&fs::read_to_string(device.join("checks.rs")).unwrap());
    let names: Vec<String> = checks
        .split("fn ")
        .skip(1)
        .map(|rest| identifier(rest).to_string())
        .filter(|name| name.starts_with("check_"))
        .collect();
    assert!(
        names.len() >= 10,
        "device/checks.rs should hold the checks, found {names:?}"
    );
    let mut offences = vec![];
    for backend in ["cpu", "cuda"] {
        for file in rust_files(&device.join(backend)) {
            let c = code(&fs::read_to_string(&file).unwrap());
            let named: Vec<&String> = names
                .iter()
                .filter(|name| c.contains(&format!("{name}(")) || c.contains(&format!("{name},")))
                .collect();
            if c.contains("checks::") || !named.is_empty() {
                offences.push(format!("{}: {named:?}", file.display()));
            }
        }
    }
    let front: String = fs::read_dir(&device)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .map(|path| code(&fs::read_to_string(path).unwrap()))
        .collect();
    let unchecked: Vec<&str> = front
        .split("fn ")
        .skip(1)
        .map(identifier)
        .filter(|name| name.ends_with("_unchecked"))
        .collect();
    assert!(
        unchecked.len() >= 40,
        "the family traits should declare the backends' kernels, found {unchecked:?}"
    );
    for file in rust_files(&src()) {
        if file.starts_with(&device) {
            continue;
        }
        let c = code(&fs::read_to_string(&file).unwrap());
        for name in &unchecked {
            if c.contains(&format!(".{name}(")) {
                offences.push(format!("{} calls {name}", file.display()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "argument checks outside the front of the device layer:\n{}",
        offences.join("\n")
    );
}

/// run/ reads the configuration, picks the backend and hands blocks to a solver through
/// `linalg::BlockSolver`: it names no solver's internal types (those behind each solver's
/// own `set_up`).
#[test]
fn the_driver_names_no_solver_internals() {
    let internals = [
        "PscOperator",
        "PscIr",
        "PscSetup",
        "OperatorCache",
        "SetupKey",
        "Multigrid",
        "PinnedEmbedding",
        "ColumnPlan",
        "solve_in_chunks",
    ];
    let mut offences = vec![];
    for file in rust_files(&src().join("run")) {
        let code = code(&fs::read_to_string(&file).unwrap());
        for (number, line) in code.lines().enumerate() {
            let named = line
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .find(|word| internals.contains(word));
            if let Some(word) = named {
                offences.push(format!("{}:{}: {word}", file.display(), number + 1));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "solver internals named in run/:\n{}",
        offences.join("\n")
    );
}
