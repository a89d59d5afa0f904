//! Published names (PMI-1's `publish_name`, `unpublish_name`, `lookup_name`, as
//! MPICH's clients and hydra's name server have them): a service's port, which
//! every job of the launcher can look up (`MPI_Publish_name`, `MPI_Lookup_name`).

use super::wire::check_token;
use super::{Client, Error};

impl Client {
    /// Publish `port` under `service`; refused when the service has one already.
    pub fn publish_name(&mut self, service: &str, port: &str) -> Result<(), Error> {
        self.name_token("service name", service)?;
        self.name_token("port name", port)?;
        let request = format!("cmd=publish_name service={service} port={port}");
        let reply = self.request(&request, "publish_result")?;
        refused_unless_0(request, &reply)
    }

    /// Withdraw `service`; refused when it is not published.
    pub fn unpublish_name(&mut self, service: &str) -> Result<(), Error> {
        self.name_token("service name", service)?;
        let request = format!("cmd=unpublish_name service={service}");
        let reply = self.request(&request, "unpublish_result")?;
        refused_unless_0(request, &reply)
    }

    /// The port published under `service` (`None`: none is).
    pub fn lookup_name(&mut self, service: &str) -> Result<Option<String>, Error> {
        self.name_token("service name", service)?;
        let request = format!("cmd=lookup_name service={service}");
        let reply = self.request(&request, "lookup_result")?;
        Ok((reply.get_int("rc") == Some(0)).then(|| reply.get("port").unwrap_or("").to_string()))
    }

    fn name_token(&self, what: &'static str, token: &str) -> Result<(), Error> {
        check_token(token).map_err(|why| Error::InvalidToken {
            what,
            value: token.chars().take(120).collect(),
            why,
        })
    }
}

/// `Ok` for a reply of `rc=0`, else the refusal of `request`.
fn refused_unless_0(request: String, reply: &super::wire::Message) -> Result<(), Error> {
    match reply.get_int("rc") {
        Some(0) => Ok(()),
        rc => Err(Error::Refused {
            request,
            rc: rc.unwrap_or(-1),
            msg: reply.get("msg").unwrap_or("no reason given").to_string(),
        }),
    }
}
