//! The large-count bindings (`MPI_Send_c`, ...) served by their `int` twins: for
//! each `X_c` not written by hand whose twin `X` is, and whose parameters differ
//! from the twin's only in scalar counts and sizes (`MPI_Count` or `MPI_Aint` where
//! the twin has `int`, or `MPI_Count` where it has `MPI_Aint`) and in single values
//! written back through a pointer, a `PMPI_X_c` that narrows each such argument and
//! calls `PMPI_X`; a count followed by its datatype (outside reductions,
//! accumulates and type constructors) is widened instead: beyond `int`, one element
//! of a type of that many (`large_count::widen`). Those with arrays of counts
//! (`MPI_Allgatherv_c`'s `recvcounts`, ...) are written by hand
//! (`src/large_arrays.rs`), as their arrays' lengths depend on the call.

use crate::rust::{object, rust_name, rust_type};
use crate::spec::{Function, Item, Param};
use std::collections::BTreeMap;
use std::fmt::Write;

/// How a parameter of `X_c` reaches the same parameter of `X`.
enum Pass {
    /// Unchanged.
    Same,
    /// A count narrowed to an `int` (an error when it does not fit).
    Narrow,
    /// A value of the same width, cast (`MPI_Count` to `MPI_Aint`).
    Cast,
    /// A single value written back: through an `int` of the wrapper's own, read
    /// first when the binding also reads it (`position`).
    Written { read_first: bool },
    /// A pointer to a value of the same width, cast.
    CastPointer,
}

/// How each parameter of large-count `c` reaches its twin `f`; `None` when one
/// cannot be passed on by narrowing or casting.
fn passes(c: &Function, f: &Function) -> Option<Vec<Pass>> {
    if c.params.len() != f.params.len() || c.variadic || f.variadic || c.ret != f.ret {
        return None;
    }
    c.params
        .iter()
        .zip(&f.params)
        .map(|(a, b)| pass(a, b))
        .collect()
}

/// How parameter `large` of the large-count binding reaches `twin`, the same
/// parameter of its `int` form.
fn pass(large: &Param, twin: &Param) -> Option<Pass> {
    if large.name != twin.name || large.pointers != twin.pointers {
        return None;
    }
    if large.base == twin.base {
        return Some(Pass::Same);
    }
    let wide = matches!(large.base.as_str(), "MPI_Count" | "MPI_Aint");
    let array = large.text.ends_with("[]");
    match (large.pointers, twin.base.as_str()) {
        (0, "int") if wide => Some(Pass::Narrow),
        (0, "MPI_Aint") if large.base == "MPI_Count" => Some(Pass::Cast),
        (1, "int") if wide && !large.constant && !array => Some(Pass::Written {
            read_first: large.name == "position",
        }),
        (1, "MPI_Aint") if large.base == "MPI_Count" && !array => Some(Pass::CastPointer),
        _ => None,
    }
}

/// The wrappers' source (for `src/large_count.rs` to include), and the names they
/// add to `implemented`, each with its module.
pub fn wrappers(
    items: &[Item],
    implemented: &BTreeMap<String, String>,
) -> (String, BTreeMap<String, String>) {
    let handles = crate::rust::handle_types(items);
    let functions: BTreeMap<&str, &Function> = items
        .iter()
        .filter_map(|i| match i {
            Item::Function(f) => Some((f.name.as_str(), f)),
            _ => None,
        })
        .collect();
    let mut out = String::from("// Written by abi/build/large.rs from abi/spec/mpi.spec.\n");
    let mut added = BTreeMap::new();
    for (name, c) in &functions {
        let Some(twin) = name.strip_suffix("_c") else {
            continue;
        };
        let (Some(module), Some(f)) = (implemented.get(twin), functions.get(twin)) else {
            continue;
        };
        if implemented.contains_key(*name) {
            continue;
        }
        let Some(passes) = passes(c, f) else {
            continue;
        };
        let (object, _) = object(c);
        let params: Vec<String> = c
            .params
            .iter()
            .map(|p| format!("{}: {}", rust_name(&p.name), rust_type(p, &handles)))
            .collect();
        let mut before = String::new();
        let mut after = String::new();
        let mut args = Vec::new();
        // Counts of elements of a datatype may be widened (see the module's
        // description): not where an operation combines basic elements.
        let typed = !name.starts_with("MPI_Type_") && !c.params.iter().any(|p| p.base == "MPI_Op");
        for (i, (p, how)) in c.params.iter().zip(&passes).enumerate() {
            let n = rust_name(&p.name);
            let its_type = c
                .params
                .get(i + 1)
                .filter(|t| typed && t.base == "MPI_Datatype" && t.pointers == 0);
            match how {
                Pass::Same => args.push(n),
                Pass::Narrow if its_type.is_some() => {
                    let t = rust_name(&its_type.expect("checked").name);
                    let _ = writeln!(
                        before,
                        "    let ({n}, {t}, _{n}_whole) = match widen(\"{name}\", \"{n}\", {n} as i64, {t}, {object}) {{\n        \
                         Ok(v) => v,\n        Err(code) => return code,\n    }};"
                    );
                    args.push(n);
                }
                Pass::Narrow => {
                    let _ = writeln!(
                        before,
                        "    let {n} = match narrow(\"{name}\", \"{n}\", {n} as i64, {object}) {{\n        \
                         Ok(v) => v,\n        Err(code) => return code,\n    }};"
                    );
                    args.push(n);
                }
                Pass::Cast => args.push(format!("{n} as Aint")),
                Pass::CastPointer => args.push(format!("{n}.cast()")),
                Pass::Written { read_first } => {
                    let _ = writeln!(before, "    let mut {n}_int: c_int = 0;");
                    if *read_first {
                        let _ = writeln!(
                            before,
                            "    if !{n}.is_null() {{\n        \
                             // SAFETY: not null: the caller's value, the binding's contract.\n        \
                             let v = unsafe {{ {n}.read() }};\n        \
                             {n}_int = match narrow(\"{name}\", \"{n}\", v as i64, {object}) {{\n            \
                             Ok(v) => v,\n            Err(code) => return code,\n        }};\n    }}"
                        );
                    }
                    let _ = writeln!(
                        before,
                        "    let {n}_at: *mut c_int = if {n}.is_null() {{ std::ptr::null_mut() }} else {{ &mut {n}_int }};"
                    );
                    let _ = writeln!(
                        after,
                        "    if code == MPI_SUCCESS && !{n}.is_null() {{\n        \
                         // SAFETY: not null: the caller's place for the value.\n        \
                         unsafe {{ {n}.write({n}_int as _) }};\n    }}"
                    );
                    args.push(format!("{n}_at"));
                }
            }
        }
        let call = format!("unsafe {{ {module}::P{twin}({}) }}", args.join(", "));
        let body = if after.is_empty() {
            format!("    {call}\n")
        } else {
            format!("    let code = {call};\n{after}    code\n")
        };
        let _ = writeln!(
            out,
            "#[no_mangle]\npub unsafe extern \"C\" fn P{name}({}) -> c_int {{\n{before}    \
             // SAFETY: the binding's contract, passed on with its counts narrowed (or\n    \
             // widened into a type of as many elements).\n{body}}}",
            params.join(", "),
        );
        added.insert(name.to_string(), "crate::large_count".to_string());
    }
    (out, added)
}
