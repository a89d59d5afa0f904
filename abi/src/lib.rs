//! `libmpi_abi`: the MPI standard ABI (MPI 5.0's `mpi.h`, ABI version 1.0) over
//! rbtl's message layer, so that programs and libraries written for MPI run on rbtl
//! unchanged.
//!
//! Every function of the standard's header is exported, with its profiling twin
//! (`PMPI_`), and written by hand in the modules below, each as its `PMPI_`
//! function; every `MPI_` twin is generated from the table of the standard
//! (`spec/mpi.spec`) by `build/`, as is, for a function of the table not written
//! here, a body that returns `MPI_ERR_UNSUPPORTED_OPERATION` through the error
//! handler with its name in the message. `docs/mpi-abi.md` lists what is done.
//!
//! | module | what |
//! |---|---|
//! | [`env`](mod@env) | `MPI_Init`/`Finalize`, time, versions, error strings |
//! | [`p2p`] | sends in every mode, receives, probes, persistent requests, waits |
//! | [`datatype`] | predefined and derived datatypes, packing |
//! | [`comm`] | communicators, groups, attributes, topologies |
//! | [`coll`] | blocking and nonblocking collectives, as schedules |
//! | [`op`] | reduction operations |
//! | [`rma`] | one-sided windows |
//! | [`large_count`] | the large-count (`_c`) bindings their `int` twins serve |
//! | [`large_arrays`] | those with arrays of counts, narrowed for their twins |
//!
//! The library gives up to `MPI_THREAD_MULTIPLE` (see [`global`]).

// The standard's C bindings: their names and contracts are the standard's (each
// `unsafe` function's contract is its binding's).
#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod alloc_mem;
pub mod attr;
pub mod coll;
pub mod comm;
pub mod datatype;
pub mod entry;
pub mod env;
pub mod error;
pub mod ffi;
pub mod fortran;
pub mod global;
pub mod handles;
pub mod info;
pub mod io;
pub mod large_arrays;
pub mod large_count;
pub mod op;
pub mod p2p;
pub mod progress_thread;
pub mod pvar;
pub mod request;
pub mod rma;
pub mod session;
pub mod state;
pub mod tool;
pub mod tool_events;

/// The exported entry points generated from the standard's table.
mod entries {
    use crate::ffi::*;
    include!(concat!(env!("OUT_DIR"), "/entries.rs"));
}

/// The project's `mpi.h`, as written from the table.
pub const HEADER: &str = include_str!(concat!(env!("OUT_DIR"), "/mpi.h"));

/// The bindings written by hand (the rest refuse), one name a line.
pub const IMPLEMENTED: &str = include_str!(concat!(env!("OUT_DIR"), "/implemented.txt"));

#[cfg(test)]
mod tests {
    /// The list of implemented bindings in docs/mpi-abi.md, as it should read.
    fn listing() -> String {
        let names: Vec<&str> = super::IMPLEMENTED
            .lines()
            .filter(|l| !l.is_empty())
            .collect();
        let mut out = format!("{} of the header's functions:\n\n", names.len());
        let mut line = String::new();
        for (i, n) in names.iter().enumerate() {
            let item = format!("`{n}`{}", if i + 1 < names.len() { "," } else { "." });
            if !line.is_empty() && line.len() + 1 + item.len() > 88 {
                out.push_str(&line);
                out.push('\n');
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(&item);
        }
        out.push_str(&line);
        out.push('\n');
        out
    }

    #[test]
    fn the_documented_list_of_functions_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/mpi-abi.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let (begin, end) = ("<!-- implemented:begin -->\n", "<!-- implemented:end -->");
        let a = doc.find(begin).expect("the list's start mark") + begin.len();
        let b = doc.find(end).expect("the list's end mark");
        let want = listing();
        if doc[a..b] != want && std::env::var("BLESS").as_deref() == Ok("1") {
            std::fs::write(path, format!("{}{want}{}", &doc[..a], &doc[b..])).unwrap();
            return;
        }
        assert_eq!(
            doc[a..b],
            want,
            "docs/mpi-abi.md's list of functions is stale: run this test with BLESS=1"
        );
    }
}
