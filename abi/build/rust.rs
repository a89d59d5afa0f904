//! The Rust side of the table: the constants, and the exported entry points.

use crate::spec::{Function, Item, Param};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The handle types (`typedef struct MPI_ABI_X* MPI_X`).
pub fn handle_types(items: &[Item]) -> Vec<&str> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Handle(name, _) => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

/// `pub const` items for every constant of the table.
pub fn constants(items: &[Item]) -> String {
    let mut out = String::from("// Written by abi/build.rs from abi/spec/mpi.spec.\n");
    let mut typed: BTreeMap<&str, &str> = BTreeMap::new();
    for item in items {
        match item {
            Item::Define(name, v) => {
                let _ = writeln!(out, "pub const {name}: c_int = {v};");
            }
            Item::Value { name, value, .. } => {
                typed.insert(name, "Handle");
                let _ = writeln!(out, "pub const {name}: Handle = {value};");
            }
            Item::Alias(name, other) => {
                let ty = typed.get(other.as_str()).copied().unwrap_or("c_int");
                let _ = writeln!(out, "pub const {name}: {ty} = {other};");
            }
            Item::Pointer { name, ty, value } => {
                // Pointers compare as addresses; MPI_DISPLACEMENT_CURRENT is an offset.
                let rust = if ty == "MPI_Offset" { "Count" } else { "usize" };
                let value = if rust == "usize" && value.starts_with('-') {
                    panic!("{name}: a negative address")
                } else {
                    value
                };
                let _ = writeln!(out, "pub const {name}: {rust} = {value};");
            }
            Item::Enum(values) => {
                for (name, v) in values {
                    let _ = writeln!(out, "pub const {name}: c_int = {v};");
                }
            }
            _ => {}
        }
    }
    out
}

/// The exported functions: for each one written by hand (a `PMPI_` function found
/// in `implemented`, by module path) its `MPI_` twin calling it; for every other, both
/// names, each refusing with `MPI_ERR_UNSUPPORTED_OPERATION` through the error handler
/// of the object it names. Then the exported variables.
pub fn entries(items: &[Item], implemented: &BTreeMap<String, String>) -> String {
    let handles = handle_types(items);
    let mut out = String::from("// Written by abi/build.rs from abi/spec/mpi.spec.\n");
    for item in items {
        let f = match item {
            Item::Function(f) => f,
            Item::Global(decl) => {
                let name = decl
                    .rsplit(' ')
                    .next()
                    .expect("a declaration ends in its name");
                let _ = writeln!(
                    out,
                    "#[no_mangle]\npub static {name}: GlobalPtr = GlobalPtr(std::ptr::null_mut());"
                );
                continue;
            }
            _ => continue,
        };
        let params: Vec<String> = f
            .params
            .iter()
            .map(|p| format!("{}: {}", rust_name(&p.name), rust_type(p, &handles)))
            .collect();
        let ret = rust_return(&f.ret, &handles);
        let name = &f.name;
        match implemented.get(name.as_str()) {
            Some(module) => {
                let args: Vec<String> = f.params.iter().map(|p| rust_name(&p.name)).collect();
                let _ = writeln!(
                    out,
                    "#[no_mangle]\npub unsafe extern \"C\" fn {name}({}){ret} {{\n    \
                     // SAFETY: the binding's contract, passed on unchanged.\n    \
                     unsafe {{ {module}::P{name}({}) }}\n}}",
                    params.join(", "),
                    args.join(", ")
                );
            }
            None => {
                if f.ret != "int" {
                    panic!("{name} returns {}: it must be written by hand", f.ret);
                }
                let (refusal, object) = refusal(f);
                let unused: Vec<String> = f
                    .params
                    .iter()
                    .zip(&params)
                    .enumerate()
                    .map(|(i, (_, text))| {
                        if object == Some(i) {
                            text.clone()
                        } else {
                            format!("_{text}")
                        }
                    })
                    .collect();
                for prefix in ["", "P"] {
                    let _ = writeln!(
                        out,
                        "#[no_mangle]\npub unsafe extern \"C\" fn {prefix}{name}({}){ret} {{\n    {refusal}\n}}",
                        unused.join(", ")
                    );
                }
            }
        }
    }
    out
}

/// The body of a function not written: its refusal, through the error handler of
/// the object it names ([`object`]); and which parameter that object is.
fn refusal(f: &Function) -> (String, Option<usize>) {
    let name = &f.name;
    if name.starts_with("MPI_T_") {
        return (format!("crate::error::unsupported_tool(\"{name}\")"), None);
    }
    let (o, i) = object(f);
    (format!("crate::error::unsupported(\"{name}\", {o})"), i)
}

/// The object whose error handler `f`'s errors go through, as a Rust expression:
/// the communicator, window, file or session it names (else `MPI_COMM_SELF`'s); and
/// which parameter that object is.
pub fn object(f: &Function) -> (String, Option<usize>) {
    // The file functions report to a file's handler (MPI_FILE_NULL's without a
    // file, MPI_ERRORS_RETURN by default), even those given a communicator.
    let file = f.name.starts_with("MPI_File_");
    let object = f.params.iter().enumerate().find_map(|(i, p)| {
        let kind = match p.base.as_str() {
            "MPI_File" => "File",
            _ if file => return None,
            "MPI_Comm" => "Comm",
            "MPI_Win" => "Win",
            "MPI_Session" => "Session",
            _ => return None,
        };
        (p.pointers == 0).then(|| {
            (
                i,
                format!("crate::error::Object::{kind}({})", rust_name(&p.name)),
            )
        })
    });
    match object {
        Some((i, o)) => (o, Some(i)),
        None if file => (
            "crate::error::Object::File(crate::ffi::MPI_FILE_NULL)".to_string(),
            None,
        ),
        None => ("crate::error::Object::None".to_string(), None),
    }
}

/// A parameter's name, clear of Rust's keywords.
pub fn rust_name(name: &str) -> String {
    match name {
        "type" | "ref" | "in" | "fn" | "mod" | "use" | "box" | "match" => format!("{name}_"),
        _ => name.to_string(),
    }
}

/// The Rust type of a C base type (what one level of pointer points to).
fn rust_base(base: &str, handles: &[&str]) -> &'static str {
    match base {
        "int" | "MPI_Fint" | "MPI_T_cb_safety" | "MPI_T_source_order" => "c_int",
        "double" => "f64",
        "void" => "c_void",
        "char" => "c_char",
        "MPI_Aint" => "Aint",
        "MPI_Count" | "MPI_Offset" => "Count",
        "MPI_Status" | "MPI_F08_status" => "Status",
        b if handles.contains(&b) => "Handle",
        // The tool interface's handles are pointers too.
        b if b.starts_with("MPI_T_") => "Handle",
        // Function types: only ever behind a pointer.
        b if b.ends_with("_function") || b.ends_with("_function_c") || b.ends_with("_fn") => {
            "c_void"
        }
        b => panic!("spec/mpi.spec: no Rust type for the C type {b}"),
    }
}

/// The Rust type of a parameter.
pub fn rust_type(p: &Param, handles: &[&str]) -> String {
    let mut ty = rust_base(&p.base, handles).to_string();
    for level in 0..p.pointers {
        let kind = if level == 0 && p.constant {
            "const"
        } else {
            "mut"
        };
        ty = format!("*{kind} {ty}");
    }
    ty
}

/// ` -> T` for a return type.
fn rust_return(ret: &str, handles: &[&str]) -> String {
    format!(" -> {}", rust_base(ret, handles))
}

/// The `PMPI_` functions written by hand under `src`: name (as `MPI_...`) to the path
/// of the module that holds it.
pub fn scan(src: &std::path::Path) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .expect("readable source folder")
            .map(|e| e.expect("a folder entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("readable source");
            let module = module_path(src, &path);
            // A binding is written as `extern "C" fn PMPI_X`, or made by a macro
            // called with the names it makes first (`name!(PMPI_X, PMPI_Y, ...)`).
            for (i, _) in text.match_indices("PMPI_") {
                let before = text[..i].trim_end();
                let names = if before.ends_with("extern \"C\" fn") {
                    1
                } else if before.ends_with("!(") {
                    usize::MAX
                } else {
                    continue;
                };
                for name in leading_names(&text[i..]).take(names) {
                    if let Some(other) = found.insert(name.clone(), module.clone()) {
                        panic!("P{name} is written twice: in {other} and {module}");
                    }
                }
            }
        }
    }
    found
}

/// The `PMPI_` names that `text` starts with, separated by commas, each as `MPI_...`.
fn leading_names(mut text: &str) -> impl Iterator<Item = String> + '_ {
    std::iter::from_fn(move || {
        let rest = text.strip_prefix("PMPI_")?;
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = format!("MPI_{}", &rest[..end]);
        text = rest[end..]
            .trim_start()
            .strip_prefix(',')
            .map_or("", str::trim_start);
        Some(name)
    })
}

/// `crate::a::b` for `src/a/b.rs` or `src/a/b/mod.rs`.
fn module_path(src: &std::path::Path, file: &std::path::Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    std::iter::once("crate".to_string())
        .chain(parts)
        .collect::<Vec<_>>()
        .join("::")
}
