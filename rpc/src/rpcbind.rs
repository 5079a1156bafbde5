//! The host's rpcbind: portmap v2 and rpcbind v3/v4 (RFC 1833) set, unset, getport/getaddr and
//! dump, and the registration of servers.
//!
//! rpcbind accepts SET and UNSET only from the local host. [`register`] and [`unregister`] use
//! rpcbind v4 over its Unix socket ([`LOCAL_SOCKETS`]), as libtirpc does, and fall back to
//! portmap v2 over TCP to 127.0.0.1:111 where that socket does not exist (an old portmapper).

use crate::client::{Call, TcpClient, UnixClient};
use crate::xdr::XdrString;
use crate::Error;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The rpcbind (portmapper) program number.
pub const PROGRAM: u32 = 100_000;
/// The well-known rpcbind port.
pub const PORT: u16 = 111;
/// Portmap version 2.
pub const PMAP_VERS: u32 = 2;
/// rpcbind version 3.
pub const RPCB_VERS: u32 = 3;
/// rpcbind version 4.
pub const RPCB_VERS4: u32 = 4;
/// `PMAPPROC_SET` / `RPCBPROC_SET`.
pub const PROC_SET: u32 = 1;
/// `PMAPPROC_UNSET` / `RPCBPROC_UNSET`.
pub const PROC_UNSET: u32 = 2;
/// `PMAPPROC_GETPORT` / `RPCBPROC_GETADDR`.
pub const PROC_GETPORT: u32 = 3;
/// `PMAPPROC_DUMP` / `RPCBPROC_DUMP`.
pub const PROC_DUMP: u32 = 4;
/// Protocol number of TCP in a portmap [`Mapping`].
pub const IPPROTO_TCP: u32 = 6;
/// Protocol number of UDP in a portmap [`Mapping`].
pub const IPPROTO_UDP: u32 = 17;
/// Where rpcbind listens for local callers.
pub const LOCAL_SOCKETS: [&str; 2] = ["/run/rpcbind.sock", "/var/run/rpcbind.sock"];

/// Timeout of the calls this module makes to rpcbind.
const RPCBIND_TIMEOUT: Duration = Duration::from_secs(5);

/// A portmap v2 `mapping`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Mapping {
    /// Program number.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// [`IPPROTO_TCP`] or [`IPPROTO_UDP`].
    pub prot: u32,
    /// Port (0 in unset and getport requests).
    pub port: u32,
}

/// An rpcbind v3/v4 `rpcb` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Rpcb {
    /// Program number.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Network id: `tcp`, `udp`, `tcp6`, `udp6`, `local`...
    pub netid: XdrString,
    /// Universal address (see [`uaddr`]).
    pub addr: XdrString,
    /// Owner of the registration.
    pub owner: XdrString,
}

/// A portmap v2 dump: the list of mappings, decoded iteratively (it is a linked list of
/// optional data on the wire, as long as the number of registrations).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MappingList(pub Vec<Mapping>);

impl<'de> Deserialize<'de> for MappingList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = MappingList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a pmaplist")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MappingList, A::Error> {
                let mut list = Vec::new();
                let short = || de::Error::custom("pmaplist ended early");
                while seq.next_element::<bool>()?.ok_or_else(short)? {
                    list.push(seq.next_element()?.ok_or_else(short)?);
                }
                Ok(MappingList(list))
            }
        }
        // Elements are read on demand: "more?", entry, "more?", entry, ..., false.
        deserializer.deserialize_tuple(usize::MAX, ListVisitor)
    }
}

/// `PMAPPROC_SET`: true if the mapping was added.
pub fn pmap_set(client: &mut impl Call, mapping: &Mapping) -> Result<bool, Error> {
    client.call(PROGRAM, PMAP_VERS, PROC_SET, mapping)
}

/// `PMAPPROC_UNSET` (port and protocol are ignored): true if something was removed.
pub fn pmap_unset(client: &mut impl Call, mapping: &Mapping) -> Result<bool, Error> {
    client.call(PROGRAM, PMAP_VERS, PROC_UNSET, mapping)
}

/// `PMAPPROC_GETPORT`: the port, or 0 if not registered.
pub fn pmap_getport(client: &mut impl Call, mapping: &Mapping) -> Result<u32, Error> {
    client.call(PROGRAM, PMAP_VERS, PROC_GETPORT, mapping)
}

/// `PMAPPROC_DUMP`: every mapping.
pub fn pmap_dump(client: &mut impl Call) -> Result<Vec<Mapping>, Error> {
    client
        .call::<_, MappingList>(PROGRAM, PMAP_VERS, PROC_DUMP, &())
        .map(|l| l.0)
}

/// `RPCBPROC_SET` of rpcbind version `vers` (3 or 4): true if the entry was added.
pub fn rpcb_set(client: &mut impl Call, vers: u32, entry: &Rpcb) -> Result<bool, Error> {
    client.call(PROGRAM, vers, PROC_SET, entry)
}

/// `RPCBPROC_UNSET` of version `vers` (an empty netid removes every netid): true if removed.
pub fn rpcb_unset(client: &mut impl Call, vers: u32, entry: &Rpcb) -> Result<bool, Error> {
    client.call(PROGRAM, vers, PROC_UNSET, entry)
}

/// `RPCBPROC_GETADDR` of version `vers`: the universal address, empty if not registered.
pub fn rpcb_getaddr(client: &mut impl Call, vers: u32, entry: &Rpcb) -> Result<String, Error> {
    let addr: XdrString = client.call(PROGRAM, vers, PROC_GETPORT, entry)?;
    Ok(addr.to_string())
}

/// The universal address of `addr`: `h1.h2.h3.h4.p1.p2` for IPv4, `x:x::x.p1.p2` for IPv6.
pub fn uaddr(addr: SocketAddr) -> String {
    let port = addr.port();
    format!("{}.{}.{}", addr.ip(), port >> 8, port & 0xff)
}

/// Parses a universal address (the inverse of [`uaddr`]).
pub fn parse_uaddr(uaddr: &str) -> Option<SocketAddr> {
    let (rest, low) = uaddr.rsplit_once('.')?;
    let (host, high) = rest.rsplit_once('.')?;
    let port = (high.parse::<u8>().ok()? as u16) << 8 | low.parse::<u8>().ok()? as u16;
    Some(SocketAddr::new(host.parse().ok()?, port))
}

/// A client of the local rpcbind over its Unix socket.
pub fn local_client() -> Result<UnixClient, Error> {
    let mut last = None;
    for path in LOCAL_SOCKETS {
        match UnixClient::connect_unix(path) {
            Ok(mut client) => {
                client.set_timeout(Some(RPCBIND_TIMEOUT))?;
                return Ok(client);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(Error::ConnectionClosed))
}

/// A client of rpcbind on `host` over TCP.
pub fn tcp_client(host: IpAddr) -> Result<TcpClient, Error> {
    let mut client = TcpClient::connect(SocketAddr::new(host, PORT))?;
    client.set_timeout(Some(RPCBIND_TIMEOUT))?;
    Ok(client)
}

/// Asks rpcbind on `host` (portmap v2 over TCP) for the port of `prog` version `vers` on
/// protocol `prot` ([`IPPROTO_TCP`] or [`IPPROTO_UDP`]).
pub fn getport(host: IpAddr, prog: u32, vers: u32, prot: u32) -> Result<u16, Error> {
    let mapping = Mapping {
        prog,
        vers,
        prot,
        port: 0,
    };
    let port = pmap_getport(&mut tcp_client(host)?, &mapping)?;
    match u16::try_from(port) {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(Error::NotRegistered {
            prog,
            vers,
            netid: netid(prot),
        }),
    }
}

/// The network id of a portmap protocol number.
pub fn netid(prot: u32) -> &'static str {
    if prot == IPPROTO_UDP {
        "udp"
    } else {
        "tcp"
    }
}

fn owner() -> String {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn rpcb_entry(prog: u32, vers: u32, prot: u32, addr: SocketAddr) -> Rpcb {
    let family_netid = match (addr.ip(), prot == IPPROTO_UDP) {
        (IpAddr::V4(_), false) => "tcp",
        (IpAddr::V4(_), true) => "udp",
        (IpAddr::V6(_), false) => "tcp6",
        (IpAddr::V6(_), true) => "udp6",
    };
    Rpcb {
        prog,
        vers,
        netid: family_netid.into(),
        addr: uaddr(addr).into(),
        owner: owner().into(),
    }
}

/// Registers `prog` version `vers` as served at `addr` over `prot` with the local rpcbind.
///
/// Fails with [`Error::RegistrationRefused`] if rpcbind already has an entry for them.
pub fn register(prog: u32, vers: u32, prot: u32, addr: SocketAddr) -> Result<(), Error> {
    let done = match local_client() {
        Ok(mut client) => rpcb_set(&mut client, RPCB_VERS4, &rpcb_entry(prog, vers, prot, addr))?,
        Err(_) => {
            let mapping = Mapping {
                prog,
                vers,
                prot,
                port: u32::from(addr.port()),
            };
            pmap_set(&mut tcp_client(Ipv4Addr::LOCALHOST.into())?, &mapping)?
        }
    };
    if done {
        Ok(())
    } else {
        Err(Error::RegistrationRefused {
            prog,
            vers,
            netid: netid(prot),
        })
    }
}

/// Removes every registration of `prog` version `vers` (all protocols and address families)
/// from the local rpcbind, as `pmap_unset(prog, vers)` does: what rpcgen's generated server
/// calls first, so that a server restarted after a crash replaces its predecessor's entries.
/// Returns whether there were any.
pub fn unset(prog: u32, vers: u32) -> Result<bool, Error> {
    match local_client() {
        Ok(mut client) => {
            let all = Rpcb {
                prog,
                vers,
                netid: String::new().into(),
                addr: String::new().into(),
                owner: owner().into(),
            };
            rpcb_unset(&mut client, RPCB_VERS4, &all)
        }
        Err(_) => {
            let mapping = Mapping {
                prog,
                vers,
                prot: 0,
                port: 0,
            };
            pmap_unset(&mut tcp_client(Ipv4Addr::LOCALHOST.into())?, &mapping)
        }
    }
}

/// Removes the registration of `prog` version `vers` over `prot` (in `addr`'s address family)
/// from the local rpcbind. Returns whether there was one.
pub fn unregister(prog: u32, vers: u32, prot: u32, addr: SocketAddr) -> Result<bool, Error> {
    match local_client() {
        Ok(mut client) => rpcb_unset(&mut client, RPCB_VERS4, &rpcb_entry(prog, vers, prot, addr)),
        Err(_) => {
            let mapping = Mapping {
                prog,
                vers,
                prot,
                port: 0,
            };
            pmap_unset(&mut tcp_client(Ipv4Addr::LOCALHOST.into())?, &mapping)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universal_addresses() {
        let v4: SocketAddr = "127.0.0.1:2049".parse().unwrap();
        assert_eq!(uaddr(v4), "127.0.0.1.8.1");
        assert_eq!(parse_uaddr("127.0.0.1.8.1"), Some(v4));
        let v6: SocketAddr = "[::1]:111".parse().unwrap();
        assert_eq!(uaddr(v6), "::1.0.111");
        assert_eq!(parse_uaddr("::1.0.111"), Some(v6));
        assert_eq!(parse_uaddr("1.2.3.4.256.0"), None);
        assert_eq!(parse_uaddr("nonsense"), None);
    }

    #[test]
    fn mapping_lists_decode_iteratively() {
        let mut bytes = Vec::new();
        for i in 0..5000u32 {
            bytes.extend(
                crate::xdr::to_bytes(&(
                    true,
                    Mapping {
                        prog: i,
                        vers: 1,
                        prot: 6,
                        port: 9,
                    },
                ))
                .unwrap(),
            );
        }
        bytes.extend(crate::xdr::to_bytes(&false).unwrap());
        let list: MappingList = crate::xdr::from_bytes(&bytes).unwrap();
        assert_eq!(list.0.len(), 5000);
        assert_eq!(list.0[4999].prog, 4999);
        assert!(crate::xdr::from_bytes::<MappingList>(&bytes[..bytes.len() - 4]).is_err());
    }
}
