//! Published names (PMI-1's `publish_name`, `unpublish_name`, `lookup_name`, as
//! MPICH's clients and hydra's name server have them): a service's port, which
//! every job of the launcher can look up (`MPI_Publish_name`, `MPI_Lookup_name`).
//!
//! Servers answer in one of two forms: `rc=0` for yes and another `rc` (with a
//! `msg`) for no, as hydra and `rbtlrun` do; or, with no `rc`, `info=ok` and
//! `info=fail`, as the older simple PMI wire has it and Slurm's `pmi2` plugin
//! answers its PMI-1 clients (srun keeps the names of its job step).

use super::wire::check_token;
use super::{Client, Error};

impl Client {
    /// Publish `port` under `service`; refused when the service has one already.
    pub fn publish_name(&mut self, service: &str, port: &str) -> Result<(), Error> {
        self.name_token("service name", service)?;
        self.name_token("port name", port)?;
        let request = format!("cmd=publish_name service={service} port={port}");
        let reply = self.request(&request, "publish_result")?;
        refused_unless_yes(request, &reply)
    }

    /// Withdraw `service`; refused when it is not published.
    pub fn unpublish_name(&mut self, service: &str) -> Result<(), Error> {
        self.name_token("service name", service)?;
        let request = format!("cmd=unpublish_name service={service}");
        let reply = self.request(&request, "unpublish_result")?;
        refused_unless_yes(request, &reply)
    }

    /// The port published under `service` (`None`: none is).
    pub fn lookup_name(&mut self, service: &str) -> Result<Option<String>, Error> {
        self.name_token("service name", service)?;
        let request = format!("cmd=lookup_name service={service}");
        let reply = self.request(&request, "lookup_result")?;
        Ok(said_yes(&reply).then(|| reply.get("port").unwrap_or("").to_string()))
    }

    fn name_token(&self, what: &'static str, token: &str) -> Result<(), Error> {
        check_token(token).map_err(|why| Error::InvalidToken {
            what,
            value: token.chars().take(120).collect(),
            why,
        })
    }
}

/// Whether `reply` says yes: `rc=0`, or, without an `rc`, `info=ok`.
fn said_yes(reply: &super::wire::Message) -> bool {
    match reply.get_int("rc") {
        Some(rc) => rc == 0,
        None => reply.get("info") == Some("ok"),
    }
}

/// `Ok` for a reply that says yes ([`said_yes`]), else the refusal of `request`.
fn refused_unless_yes(request: String, reply: &super::wire::Message) -> Result<(), Error> {
    if said_yes(reply) {
        return Ok(());
    }
    let msg = match (reply.get("msg"), reply.get("info")) {
        (Some(msg), _) => msg.to_string(),
        (None, Some(info)) => format!("info={info}"),
        (None, None) => "no reason given".to_string(),
    };
    Err(Error::Refused {
        request,
        rc: reply.get_int("rc").unwrap_or(-1),
        msg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::thread::JoinHandle;

    /// A client whose server answers its requests with `replies`, in order.
    fn answered_by(replies: &'static [&'static str]) -> (Client, JoinHandle<()>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut lines = BufReader::new(&theirs);
            for reply in replies {
                let mut request = String::new();
                lines.read_line(&mut request).unwrap();
                (&theirs).write_all(reply.as_bytes()).unwrap();
            }
        });
        (
            Client::over(File::from(OwnedFd::from(ours))).unwrap(),
            server,
        )
    }

    #[test]
    fn names_are_served_in_either_form_of_answer() {
        // Hydra's and rbtlrun's form, then the older one of Slurm's pmi2 plugin.
        let (mut client, server) = answered_by(&[
            "cmd=publish_result rc=0 msg=success\n",
            "cmd=lookup_result rc=0 msg=success port=p1\n",
            "cmd=lookup_result rc=-1 msg=service_not_published\n",
            "cmd=publish_result info=ok\n",
            "cmd=lookup_result info=ok port=p2\n",
            "cmd=lookup_result info=fail\n",
            "cmd=unpublish_result info=ok\n",
            "cmd=publish_result info=fail\n",
            "cmd=unpublish_result rc=-1 msg=service_not_published\n",
        ]);
        client.publish_name("s", "p1").unwrap();
        assert_eq!(client.lookup_name("s").unwrap().as_deref(), Some("p1"));
        assert_eq!(client.lookup_name("t").unwrap(), None);
        client.publish_name("s", "p2").unwrap();
        assert_eq!(client.lookup_name("s").unwrap().as_deref(), Some("p2"));
        assert_eq!(client.lookup_name("t").unwrap(), None);
        client.unpublish_name("s").unwrap();
        let err = client.publish_name("s", "p3").unwrap_err();
        assert!(matches!(err, Error::Refused { rc: -1, .. }), "{err}");
        assert!(err.to_string().contains("info=fail"), "{err}");
        let err = client.unpublish_name("s").unwrap_err();
        assert!(err.to_string().contains("service_not_published"), "{err}");
        server.join().unwrap();
    }

    #[test]
    fn a_negative_appnum_is_none() {
        let (mut client, server) = answered_by(&[
            "cmd=appnum appnum=2\n",
            "cmd=appnum appnum=-1\n",
            "cmd=appnum\n",
        ]);
        assert_eq!(client.appnum().unwrap(), Some(2));
        assert_eq!(client.appnum().unwrap(), None);
        assert!(matches!(client.appnum(), Err(Error::Protocol { .. })));
        server.join().unwrap();
    }
}
