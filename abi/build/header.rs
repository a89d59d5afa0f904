//! The project's `mpi.h`, written from the table.

use crate::spec::{Function, Item};
use std::fmt::Write;

/// The header's text.
pub fn header(items: &[Item]) -> String {
    let mut h = String::new();
    h.push_str(
        "/* mpi.h: the MPI standard ABI (MPI 5.0, ABI 1.0) of rbtl's libmpi_abi.so.\n \
         * Written by abi/build.rs from abi/spec/mpi.spec: edit the table, not this file. */\n\
         #ifndef MPI_H_ABI\n#define MPI_H_ABI\n\n",
    );
    let mut functions = Vec::new();
    let mut opened = false;
    for item in items {
        match item {
            Item::Include(x) => {
                let _ = writeln!(h, "#include {x}");
                if !opened {
                    h.push_str("\n#if defined(__cplusplus)\nextern \"C\" {\n#endif\n");
                    opened = true;
                }
            }
            Item::Define(name, v) => {
                let _ = writeln!(h, "#define {name:<30} {v}");
            }
            Item::Scalar(name, ty) => {
                // As the standard's header: the type may be given by a macro
                // (`-DMPI_ABI_Aint=...`) on a platform that needs another.
                let abi = name.replacen("MPI_", "MPI_ABI_", 1);
                let _ = writeln!(
                    h,
                    "#if !defined({abi})\n#define {abi} {ty}\n#endif\ntypedef {abi} {name};\n#undef  {abi}"
                );
            }
            Item::Struct(name, fields) => {
                h.push_str("typedef struct {\n");
                for f in fields {
                    let _ = writeln!(h, "    {f};");
                }
                let _ = writeln!(h, "}} {name};");
            }
            Item::Handle(name, tag) => {
                let _ = writeln!(h, "\ntypedef struct {tag}* {name};");
            }
            Item::Value { ty, name, value } => {
                let _ = writeln!(h, "#define {name:<30} (({ty}){value})");
            }
            Item::Alias(name, other) => {
                let _ = writeln!(h, "#define {name:<30} {other}");
            }
            Item::Pointer { name, ty, value } => {
                let _ = writeln!(h, "#define {name:<30} (({ty}){value})");
            }
            Item::Enum(values) => {
                h.push_str("\nenum {\n");
                for (i, (name, v)) in values.iter().enumerate() {
                    let comma = if i + 1 < values.len() { "," } else { "" };
                    let _ = writeln!(h, "    {name:<34} = {v}{comma}");
                }
                h.push_str("};\n");
            }
            Item::CType(c) | Item::Raw(c) => {
                let _ = writeln!(h, "{c}");
            }
            Item::Global(decl) => {
                let _ = writeln!(h, "extern {decl};");
            }
            Item::Function(f) => functions.push(f),
        }
    }
    for prefix in ["", "P"] {
        let _ = writeln!(
            h,
            "\n/* Functions{} */",
            if prefix.is_empty() {
                ""
            } else {
                " of the profiling interface"
            }
        );
        for f in &functions {
            let _ = writeln!(h, "{};", prototype(f, prefix));
        }
    }
    h.push_str("\n#if defined(__cplusplus)\n}\n#endif\n\n#endif /* MPI_H_ABI */\n");
    h
}

/// `RET PREFIXNAME(PARAMS)`.
fn prototype(f: &Function, prefix: &str) -> String {
    let mut params: Vec<&str> = f.params.iter().map(|p| p.text.as_str()).collect();
    if f.variadic {
        params.push("...");
    }
    let params = if params.is_empty() {
        "void".to_string()
    } else {
        params.join(", ")
    };
    format!("{} {prefix}{}({params})", f.ret, f.name)
}
