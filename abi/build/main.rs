//! Writes, from `spec/mpi.spec`: the project's `mpi.h`, the library's constants
//! (`consts.rs`), its exported entry points (`entries.rs`) and the large-count
//! bindings its `int` ones serve (`large_count.rs`), into `OUT_DIR`.

mod header;
mod large;
mod rust;
mod spec;

use std::path::Path;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&dir);
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let out = Path::new(&out);
    let table = dir.join("spec/mpi.spec");
    println!("cargo:rerun-if-changed={}", table.display());
    println!("cargo:rerun-if-changed={}", dir.join("src").display());
    let items = spec::parse(&std::fs::read_to_string(&table).expect("spec/mpi.spec"));
    let mut implemented = rust::scan(&dir.join("src"));
    let (large_count, narrowed) = large::wrappers(&items, &implemented);
    implemented.extend(narrowed);
    let write = |name: &str, text: String| {
        std::fs::write(out.join(name), text).unwrap_or_else(|e| panic!("writing {name}: {e}"))
    };
    write("mpi.h", header::header(&items));
    write("consts.rs", rust::constants(&items));
    write("entries.rs", rust::entries(&items, &implemented));
    write("large_count.rs", large_count);
    let mut done: Vec<&str> = implemented.keys().map(String::as_str).collect();
    done.sort();
    write("implemented.txt", done.join("\n") + "\n");
}
