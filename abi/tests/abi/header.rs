//! The project's `mpi.h` against the MPI Forum's reference header.

use super::{compile, mpicc, reference_include, scratch, MPICC};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn ours() -> String {
    read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("include/mpi.h"))
}

fn reference() -> String {
    read(&reference_include().join("mpi.h"))
}

/// The names a header declares: macros, enum members, typedefs, functions,
/// variables (comments dropped).
fn names(header: &str) -> BTreeSet<String> {
    let mut text = String::new();
    let mut rest = header;
    while let Some(i) = rest.find("/*") {
        text.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    text.push_str(rest);
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        let words: Vec<&str> = line
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        let name = if line.starts_with("#define") {
            words.get(1).copied()
        } else if line.starts_with("typedef") {
            // `typedef ... NAME;` or `typedef RET (NAME)(...)`.
            match line.find('(') {
                Some(i)
                    if line[..i]
                        .trim_end()
                        .ends_with(|c: char| c.is_alphanumeric())
                        || line[i + 1..].starts_with("MPI_") =>
                {
                    line[i + 1..].split(')').next()
                }
                _ => words.last().copied(),
            }
        } else if let Some(i) = line.find('(').filter(|_| line.ends_with(");")) {
            line[..i]
                .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
        } else if line.starts_with("extern") {
            words.last().copied()
        } else if line.starts_with("MPI") && (line.contains('=') || line.ends_with(',')) {
            words.first().copied()
        } else if line.starts_with('}') && line.ends_with(';') {
            words.last().copied()
        } else {
            None
        };
        if let Some(n) = name.filter(|n| n.starts_with("MPI") || n.starts_with("PMPI")) {
            out.insert(n.to_string());
        }
    }
    out
}

#[test]
fn declares_every_name_the_reference_declares_and_no_other() {
    let (r, o) = (names(&reference()), names(&ours()));
    assert!(
        r.len() > 1500,
        "the reference's names were not read: {}",
        r.len()
    );
    let missing: Vec<_> = r.difference(&o).collect();
    let extra: Vec<_> = o.difference(&r).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}\nextra {extra:?}"
    );
}

/// The table's entries of kind `word`: the second field of each line.
fn spec_names(spec: &str, word: &str) -> Vec<String> {
    spec.lines()
        .filter_map(|l| l.strip_prefix(word).and_then(|r| r.strip_prefix(' ')))
        .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

fn spec() -> String {
    read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("spec/mpi.spec"))
}

/// A C program printing every constant of the table, and the size and layout of
/// every type, one `name=value` a line.
fn layout_program(spec: &str) -> String {
    let mut c = String::from("#include <mpi.h>\n#include <stdio.h>\n#include <stddef.h>\n#define V(x) printf(\"%s=%lld\\n\", #x, (long long)(intptr_t)(x))\n#define S(x) printf(\"sizeof %s=%zu\\n\", #x, sizeof(x))\n#define O(t, f) printf(\"offsetof %s.%s=%zu\\n\", #t, #f, offsetof(t, f))\nint main(void) {\n");
    let mut consts: Vec<String> = Vec::new();
    for kind in ["value", "alias", "define"] {
        let skip_type = kind == "value";
        for l in spec
            .lines()
            .filter_map(|l| l.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')))
        {
            let w: Vec<&str> = l.split_whitespace().collect();
            consts.push(if skip_type { w[1] } else { w[0] }.to_string());
        }
    }
    consts.extend(spec_names(spec, "pointer"));
    let mut in_enum = false;
    for l in spec.lines() {
        match l.trim() {
            "enum {" => in_enum = true,
            "}" => in_enum = false,
            t if in_enum => consts.push(t.split_whitespace().next().unwrap_or("").to_string()),
            _ => {}
        }
    }
    // The tool interface's typed enums (raw C lines `NAME = VALUE,`).
    for l in spec.lines().filter_map(|l| l.strip_prefix("raw ")) {
        if let Some((n, _)) = l.split_once('=') {
            consts.push(n.trim().to_string());
        }
    }
    for n in &consts {
        c.push_str(&format!("  V({n});\n"));
    }
    for t in [
        "MPI_Aint",
        "MPI_Offset",
        "MPI_Count",
        "MPI_Fint",
        "MPI_Status",
        "MPI_F08_status",
    ] {
        c.push_str(&format!("  S({t});\n"));
    }
    for h in spec_names(spec, "handle") {
        c.push_str(&format!("  S({h});\n"));
    }
    for f in ["MPI_SOURCE", "MPI_TAG", "MPI_ERROR", "MPI_internal"] {
        c.push_str(&format!(
            "  O(MPI_Status, {f});\n  O(MPI_F08_status, {f});\n"
        ));
    }
    c.push_str("  return 0;\n}\n");
    c
}

#[test]
fn every_constant_and_layout_agrees_with_the_reference() {
    let dir = scratch("header-layout");
    let src = dir.join("layout.c");
    std::fs::write(&src, layout_program(&spec())).unwrap();
    let mut printed = Vec::new();
    for reference in [true, false] {
        let exe = dir.join(if reference { "reference" } else { "ours" });
        compile(&src, &exe, reference);
        let o = Command::new(&exe).output().expect("run");
        assert!(o.status.success());
        printed.push(String::from_utf8(o.stdout).unwrap());
    }
    assert!(printed[0].lines().count() > 350, "{}", printed[0]);
    for (r, o) in printed[0].lines().zip(printed[1].lines()) {
        assert_eq!(r, o, "reference, then ours");
    }
    assert_eq!(printed[0].lines().count(), printed[1].lines().count());
}

#[test]
fn every_binding_has_the_references_prototype() {
    let dir = scratch("header-prototypes");
    let src = dir.join("prototypes.c");
    // Every function as the table declares it (and its PMPI_ twin), after the
    // reference header: a conflicting declaration does not compile.
    let mut c = String::from("#include <mpi.h>\n");
    for l in spec().lines().filter_map(|l| l.strip_prefix("function ")) {
        let (head, params) = l.split_once('(').expect("a binding");
        let at = head.rfind(' ').expect("a return type");
        c.push_str(&format!("{}({};\n", head, params));
        c.push_str(&format!(
            "{} P{}({};\n",
            &head[..at],
            &head[at + 1..],
            params
        ));
    }
    std::fs::write(&src, c).unwrap();
    let o = mpicc(true)
        .args(["-c", "-Werror", "-o"])
        .arg(dir.join("prototypes.o"))
        .arg(&src)
        .output()
        .expect("run mpicc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn the_library_exports_every_function_and_variable_of_the_reference() {
    let lib = Path::new(MPICC).parent().unwrap().join("libmpi_abi.so");
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let exported: BTreeSet<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    // Functions (`RET NAME(...);` lines, not typedefs) and variables (`extern`).
    let wanted: Vec<String> = reference()
        .lines()
        .filter(|l| {
            !l.starts_with("typedef")
                && !l.starts_with('#')
                && (l.ends_with(");") || l.starts_with("extern "))
        })
        .filter_map(|l| {
            let head = l.split('(').next().unwrap_or(l).trim_end_matches(';');
            head.rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .map(str::to_string)
        })
        .filter(|n| n.starts_with("MPI_") || n.starts_with("PMPI_"))
        .collect();
    assert!(
        wanted.len() > 1300,
        "the reference's functions were not read: {}",
        wanted.len()
    );
    let missing: Vec<_> = wanted.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

#[test]
fn the_committed_header_is_the_one_the_table_makes() {
    assert_eq!(
        ours(),
        mpi_abi::HEADER,
        "abi/include/mpi.h differs from what abi/spec/mpi.spec makes: copy target/*/build/rbtl-abi-*/out/mpi.h there"
    );
}
