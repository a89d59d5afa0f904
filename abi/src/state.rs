//! The library's state: the message layer under it, and every object a handle names.

use crate::comm::{Communicator, Group, CONTEXTS_PER_COMM};
use crate::datatype::{predefined, Datatype};
use crate::error::{Error, Handler, Object, Result};
use crate::ffi::*;
use crate::handles::{Kind, Table};
use crate::op::UserOp;
use crate::p2p::probe::Message;
use crate::request::Request;
use rbtl::msg;
use std::sync::Arc;

/// A user's error handler: the kind of object it serves and its function. (They
/// live in a table of their own: [`crate::comm::api::errhandler`].)
#[derive(Clone, Copy, Debug)]
pub struct Errhandler {
    pub kind: Kind,
    pub function: usize,
}

/// An info object: keys and values, in the order they were set.
pub type Info = Vec<(String, String)>;

/// Everything the library holds between calls.
pub struct Mpi {
    /// The message layer over every process of the job.
    pub msg: msg::Comm,
    pub world: Communicator,
    pub self_comm: Communicator,
    pub comms: Table<Communicator>,
    pub groups: Table<Arc<Group>>,
    /// Predefined datatypes by `handle - predefined::FIRST`.
    pub predefined: Vec<Option<Datatype>>,
    pub types: Table<Datatype>,
    pub ops: Table<UserOp>,
    pub requests: Table<Request>,
    /// Requests whose progress the library drives (nonblocking collectives).
    pub active: Vec<Handle>,
    /// Requests nobody waits for (freed while active, buffered sends), driven by
    /// progress until they complete; with the room each takes in a buffer of
    /// buffered sends.
    pub detached: Vec<(Request, crate::p2p::bsend::Room)>,
    /// The generalized requests a completion call took, whose free functions run
    /// once it has left the state.
    pub grequest_frees: Vec<crate::p2p::grequest::Callbacks>,
    /// Partitioned inits so far, by communicator (its context), side (send), peer
    /// and tag: the number of the next pair ([`crate::p2p::partitioned`]).
    pub pairs: std::collections::HashMap<(u32, bool, c_int, c_int), u32>,
    /// Datatypes and operations held by persistent collectives: how many hold each,
    /// and whether the program has freed it ([`Mpi::pin`]).
    pub pinned: std::collections::HashMap<Handle, (u32, bool)>,
    /// Messages taken by matched probes.
    pub messages: Table<Message>,
    pub wins: Table<crate::rma::Win>,
    pub files: Table<crate::io::File>,
    /// The data representations registered (`MPI_Register_datarep`).
    pub datareps: Vec<crate::io::datarep::Datarep>,
    pub sessions: Table<crate::session::Session>,
    /// The blocks of `MPI_Alloc_mem`, by address.
    pub allocated: std::collections::HashMap<usize, std::alloc::Layout>,
    /// The error handler of `MPI_FILE_NULL`: that of files being opened, and of
    /// each new file.
    pub file_null_errhandler: Handle,
    /// Whether the program set `MPI_COMM_SELF`'s error handler
    /// ([`Mpi::no_object_comm`]).
    pub self_handler_set: bool,
    pub attrs: crate::attr::Keyvals,
    /// The thread level granted.
    pub thread_level: c_int,
    /// The context numbers taken here.
    pub contexts: crate::comm::context::Contexts,
    /// The buffer attached for buffered sends.
    pub bsend: crate::p2p::bsend::Buffers,
    /// The communicator to the processes that spawned this one (`MPI_COMM_NULL`).
    pub parent: Handle,
    /// This job's key-value space and base (`Mpi::own_job`), once asked.
    pub own_job: Option<(String, u32)>,
    /// The thread that initialized the library.
    pub main_thread: std::thread::ThreadId,
    /// Which executable of the launch this process runs (`MPI_APPNUM`; `None`
    /// where the launcher does not number them: the attribute is then absent).
    pub appnum: Option<c_int>,
    /// The processes the launcher lets the job and those it spawns number
    /// (`MPI_UNIVERSE_SIZE`), asked of it when first read (`Some(None)`: no bound
    /// said, the attribute is absent).
    pub universe_size: Option<Option<c_int>>,
    /// The schedule of the last blocking collective, emptied: the next one's.
    pub spare_schedule: Option<Box<crate::coll::Schedule>>,
    /// Where the tag of the next collective's schedule comes from.
    pub coll_tag: crate::coll::TagFrom,
    /// The communicator and sequence (blocking or not) whose tag the collective
    /// being built took ([`Mpi::building`]).
    pub tag_taken: Option<(Handle, bool)>,
    /// This process's windows, for the accumulates shipped to it.
    pub exposures: crate::rma::shipped::Exposures,
    /// A buffer a call borrows while it runs (the small all-reduction's operand, the
    /// target's bytes of an accumulate combined here).
    pub scratch: Vec<u8>,
    /// What shipping an accumulate uses, kept between calls.
    pub shipping: crate::rma::shipped::Buffers,
    /// The count of the transfers of an accumulate read and written back from here,
    /// kept between calls: each waits for its own before it returns (a new count
    /// replaces one a failure left unfinished).
    pub combining: rbtl::msg::Pending,
    /// Which way the accumulates that may go two ways take.
    pub crossing: crate::rma::crossing::Crossing,
}

/// Context numbers: world, self, the meetings on ports of a launcher without names
/// ([`crate::comm::job_ports`]), then those made later (0 belongs to the message
/// layer itself, 1 to `MPI_Comm_create_from_group`'s agreements).
const WORLD_CTX: u32 = 2;
const SELF_CTX: u32 = WORLD_CTX + CONTEXTS_PER_COMM;
pub const PORTS_CTX: u32 = SELF_CTX + CONTEXTS_PER_COMM;

impl Mpi {
    /// The library over the message layer `msg`.
    pub fn new(mut msg: msg::Comm, thread_level: c_int) -> Mpi {
        let (rank, size) = (msg.rank(), msg.size());
        let exposures = crate::rma::shipped::Exposures::default();
        msg.serve(crate::rma::shipped::server(exposures.clone()));
        let world = Communicator::new(
            WORLD_CTX,
            Arc::new(Group::new((0..size).collect())),
            rank,
            "MPI_COMM_WORLD",
        );
        let self_comm = Communicator::new(
            SELF_CTX,
            Arc::new(Group::new(vec![rank])),
            0,
            "MPI_COMM_SELF",
        );
        Mpi {
            msg,
            world,
            self_comm,
            comms: Table::new(Kind::Comm),
            groups: Table::new(Kind::Group),
            predefined: predefined::all(),
            types: Table::new(Kind::Datatype),
            ops: Table::new(Kind::Op),
            requests: Table::new(Kind::Request),
            active: Vec::new(),
            detached: Vec::new(),
            grequest_frees: Vec::new(),
            pairs: Default::default(),
            pinned: Default::default(),
            messages: Table::new(Kind::Message),
            wins: Table::new(Kind::Win),
            files: Table::new(Kind::File),
            datareps: Vec::new(),
            sessions: Table::new(Kind::Session),
            allocated: Default::default(),
            file_null_errhandler: MPI_ERRORS_RETURN,
            self_handler_set: false,
            attrs: Default::default(),
            thread_level,
            contexts: crate::comm::context::Contexts::new(PORTS_CTX + CONTEXTS_PER_COMM),
            bsend: Default::default(),
            parent: MPI_COMM_NULL,
            own_job: None,
            main_thread: std::thread::current().id(),
            appnum: Some(0),
            universe_size: None,
            spare_schedule: None,
            coll_tag: Default::default(),
            tag_taken: None,
            exposures,
            scratch: Vec::new(),
            shipping: Default::default(),
            combining: Default::default(),
            crossing: Default::default(),
        }
    }

    /// This process's rank in the job.
    pub fn world_rank(&self) -> u32 {
        self.world.rank
    }

    /// The communicator `h`.
    #[inline(always)]
    pub fn comm(&self, h: Handle) -> Result<&Communicator> {
        match h {
            MPI_COMM_WORLD => Ok(&self.world),
            MPI_COMM_SELF => Ok(&self.self_comm),
            _ => self.comms.get(h).ok_or_else(|| bad_comm(h)),
        }
    }

    /// The communicator `h`, writable.
    #[inline(always)]
    pub fn comm_mut(&mut self, h: Handle) -> Result<&mut Communicator> {
        match h {
            MPI_COMM_WORLD => Ok(&mut self.world),
            MPI_COMM_SELF => Ok(&mut self.self_comm),
            _ => self.comms.get_mut(h).ok_or_else(|| bad_comm(h)),
        }
    }

    /// The datatype `h` (committed or not).
    #[inline(always)]
    pub fn dtype_any(&self, h: Handle) -> Result<&Datatype> {
        let found = if (predefined::FIRST..predefined::END).contains(&h) {
            self.predefined[h - predefined::FIRST].as_ref()
        } else {
            self.types.get(h)
        };
        found.ok_or_else(|| bad_type(h))
    }

    /// The datatype `h`, committed or not, to change (its name).
    pub fn dtype_any_mut(&mut self, h: Handle) -> Result<&mut Datatype> {
        let found = if (predefined::FIRST..predefined::END).contains(&h) {
            self.predefined[h - predefined::FIRST].as_mut()
        } else {
            self.types.get_mut(h)
        };
        found.ok_or_else(|| bad_type(h))
    }

    /// The datatype `h`, which must be committed (to be used in communication).
    #[inline(always)]
    pub fn dtype(&self, h: Handle) -> Result<&Datatype> {
        let t = self.dtype_any(h)?;
        if !t.committed {
            return Err(Error::new(
                MPI_ERR_TYPE,
                "the datatype is not committed: call MPI_Type_commit before communicating with it",
            ));
        }
        Ok(t)
    }

    /// The communicator whose error handler takes the errors that concern no
    /// object: `MPI_COMM_SELF` (MPI 4.0, 9.3) once the program has set its handler;
    /// before, `MPI_COMM_WORLD`, whose handler programs written for MPI 3.1 set
    /// for them (as MPICH keeps them working). Both start fatal.
    pub fn no_object_comm(&self) -> Handle {
        match self.self_handler_set {
            true => MPI_COMM_SELF,
            false => MPI_COMM_WORLD,
        }
    }

    /// What an error raised on `object` does.
    pub fn handler_of(&self, object: Object) -> Handler {
        let h = match object {
            Object::None => self
                .comm(self.no_object_comm())
                .map_or(self.self_comm.errhandler, |c| c.errhandler),
            Object::Comm(c) => match self.comm(c) {
                Ok(c) => c.errhandler,
                // An error on a handle that is no communicator goes to the world's.
                Err(_) => self.world.errhandler,
            },
            Object::Win(w) => crate::rma::errhandler_of(self, w),
            Object::File(f) => crate::io::errhandler_of(self, f),
            // An error on a handle that is no session goes to MPI_COMM_SELF's.
            Object::Session(s) => self
                .sessions
                .get(s)
                .map_or(self.self_comm.errhandler, |s| s.errhandler),
            // A handle that is no error handler: MPI_COMM_SELF's.
            Object::Given(h, _) => match h {
                MPI_ERRORS_RETURN | MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => h,
                h if crate::comm::api::errhandler(h).is_some() => h,
                _ => self.self_comm.errhandler,
            },
        };
        match h {
            MPI_ERRORS_RETURN => Handler::Return,
            MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => Handler::Fatal,
            h => match crate::comm::api::errhandler(h) {
                Some(e) => Handler::User(e.function),
                None => Handler::Fatal,
            },
        }
    }

    /// End the job through the launcher, where there is one.
    pub fn abort_through_launcher(&mut self, code: c_int, message: &str) {
        let _ = self.msg.job().modex.abort(code, message);
    }
}

#[cold]
fn bad_comm(h: Handle) -> Error {
    let null = (MPI_COMM_NULL, "MPI_COMM_NULL");
    crate::error::bad_handle(h, null, MPI_ERR_COMM, "a communicator")
}

#[cold]
fn bad_type(h: Handle) -> Error {
    let null = (MPI_DATATYPE_NULL, "MPI_DATATYPE_NULL");
    crate::error::bad_handle(h, null, MPI_ERR_TYPE, "a datatype")
}
