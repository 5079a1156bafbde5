//! The Rust client against the Rust server over TCP and UDP loopback, and against fake peers
//! that drop, delay and misnumber replies.

mod common;

use common::*;
use rpc::client::{Call, TcpClient, UdpClient};
use rpc::msg::{AcceptStat, AuthSysParams, MsgBody, OpaqueAuth, ReplyBody, RpcMsg};
use rpc::record::{read_record, write_record};
use rpc::server::{DispatchError, Server, Service};
use rpc::xdr::{Opaque, XdrString};
use rpc::Error;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn calc_server(prog: u32) -> Server {
    Server::builder()
        .service(Calc { prog, vers: 1 })
        .service(Calc { prog, vers: 3 })
        .listen_tcp(local())
        .listen_udp(local())
        .start()
        .unwrap()
}

/// Every outcome a client can see, over any transport.
fn exercise(client: &mut impl Call, prog: u32, big: usize) {
    let () = client.call(prog, 1, 0, &()).unwrap();
    assert_eq!(client.call::<_, i32>(prog, 1, ADD, &(40, 2)).unwrap(), 42);
    assert_eq!(client.call::<_, i32>(prog, 3, ADD, &(40, 2)).unwrap(), 44);
    let greeting: XdrString<32> = client
        .call(prog, 1, GREET, &XdrString::<16>::from("xdr"))
        .unwrap();
    assert_eq!(greeting.as_str().unwrap(), "hello xdr");
    let data = Opaque((0..big).map(|i| (i * 31) as u8).collect());
    let echoed: Opaque = client.call(prog, 1, ECHO, &data).unwrap();
    assert_eq!(echoed, data);

    assert!(matches!(
        client.call::<_, ()>(prog + 1, 1, 0, &()),
        Err(Error::ProgUnavail)
    ));
    assert!(matches!(
        client.call::<_, ()>(prog, 2, 0, &()),
        Err(Error::ProgMismatch { low: 1, high: 3 })
    ));
    assert!(matches!(
        client.call::<_, ()>(prog, 1, 99, &()),
        Err(Error::ProcUnavail)
    ));
    assert!(matches!(
        client.call::<_, i32>(prog, 1, ADD, &7i32),
        Err(Error::GarbageArgs)
    ));
    // A name longer than string<16>: the server's bound check refuses it.
    let long = XdrString::<64>::from("a name that is far too long");
    assert!(matches!(
        client.call::<_, XdrString<32>>(prog, 1, GREET, &long),
        Err(Error::GarbageArgs)
    ));
    assert!(matches!(
        client.call::<_, ()>(prog, 1, FAIL, &()),
        Err(Error::SystemErr)
    ));
    // Results of the wrong type are an XDR error on the client.
    assert!(matches!(
        client.call::<_, (i32, i32)>(prog, 1, ADD, &(1, 2)),
        Err(Error::Xdr(_))
    ));
    // The client still works after every error.
    assert_eq!(client.call::<_, i32>(prog, 1, ADD, &(1, 2)).unwrap(), 3);
}

#[test]
fn tcp_calls_and_every_accept_status() {
    let prog = 0x2000_2001;
    let server = calc_server(prog);
    let mut client = TcpClient::connect(server.tcp_addr().unwrap()).unwrap();
    exercise(&mut client, prog, 64 * 1024);
    // Calls sent as many small fragments.
    client.set_max_fragment(1000);
    exercise(&mut client, prog, 10_000);
    // AUTH_SYS credentials are accepted.
    client.set_credential(
        OpaqueAuth::sys(&AuthSysParams {
            stamp: 1,
            machinename: "test".into(),
            uid: 1000,
            gid: 1000,
            gids: vec![4, 24].into(),
        })
        .unwrap(),
    );
    assert_eq!(client.call::<_, i32>(prog, 1, ADD, &(2, 2)).unwrap(), 4);
    server.shutdown().unwrap();
}

#[test]
fn udp_calls_and_every_accept_status() {
    let prog = 0x2000_2002;
    let server = calc_server(prog);
    let mut client = UdpClient::connect(server.udp_addr().unwrap()).unwrap();
    client.set_timeout(Duration::from_secs(10));
    exercise(&mut client, prog, 8000);
}

/// A service whose procedure 1 returns only when four calls are in it at once.
struct Rendezvous(Arc<Barrier>);

impl Service for Rendezvous {
    fn program(&self) -> u32 {
        0x2000_2003
    }
    fn version(&self) -> u32 {
        1
    }
    fn dispatch(
        &self,
        procedure: u32,
        _args: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), DispatchError> {
        match procedure {
            0 => Ok(()),
            1 => {
                let leader = self.0.wait().is_leader();
                rpc::xdr::to_writer(reply, &leader).map_err(|_| DispatchError::SystemErr)
            }
            _ => Err(DispatchError::ProcUnavail),
        }
    }
}

#[test]
fn many_tcp_connections_are_served_at_once() {
    let server = Server::builder()
        .service(Rendezvous(Arc::new(Barrier::new(4))))
        .listen_tcp(local())
        .start()
        .unwrap();
    let addr = server.tcp_addr().unwrap();
    // Idle connections do not hold up the others.
    let idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let leaders: Vec<bool> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(move || {
                    let mut client = TcpClient::connect(addr).unwrap();
                    client.set_timeout(Some(Duration::from_secs(20))).unwrap();
                    for _ in 0..50 {
                        let () = client.call(0x2000_2003, 1, 0, &()).unwrap();
                    }
                    client.call::<_, bool>(0x2000_2003, 1, 1, &()).unwrap()
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    assert_eq!(leaders.iter().filter(|&&l| l).count(), 1);
    drop(idle);
    server.shutdown().unwrap();
}

#[test]
fn shutdown_closes_connections_and_sockets() {
    let prog = 0x2000_2004;
    let server = calc_server(prog);
    let addr = server.tcp_addr().unwrap();
    let mut client = TcpClient::connect(addr).unwrap();
    assert_eq!(client.call::<_, i32>(prog, 1, ADD, &(1, 1)).unwrap(), 2);
    server.shutdown().unwrap();
    let err = client.call::<_, i32>(prog, 1, ADD, &(1, 1)).unwrap_err();
    assert!(
        matches!(err, Error::ConnectionClosed | Error::Io(_)),
        "{err}"
    );
    assert!(TcpStream::connect(addr).is_err());
}

fn reply_bytes(xid: u32, results: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    RpcMsg {
        xid,
        body: MsgBody::Reply(ReplyBody::Accepted {
            verf: OpaqueAuth::none(),
            stat: AcceptStat::Success,
        }),
    }
    .encode(&mut out)
    .unwrap();
    out.extend_from_slice(results);
    out
}

fn xid_of(message: &[u8]) -> u32 {
    u32::from_be_bytes(message[..4].try_into().unwrap())
}

#[test]
fn udp_retransmits_and_matches_xids() {
    let fake = UdpSocket::bind(local()).unwrap();
    let addr = fake.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        // Drop the first transmission.
        let (n, _) = fake.recv_from(&mut buf).unwrap();
        let first = buf[..n].to_vec();
        // Answer the retransmission with a stale xid, then garbage, then the right reply.
        let (n, from) = fake.recv_from(&mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            &first[..],
            "a retransmission is the same datagram"
        );
        let xid = xid_of(&first);
        fake.send_to(&reply_bytes(xid.wrapping_sub(1), &[0, 0, 0, 1]), from)
            .unwrap();
        fake.send_to(&[1, 2], from).unwrap();
        fake.send_to(&reply_bytes(xid, &[0, 0, 0, 9]), from)
            .unwrap();
    });
    let mut client = UdpClient::connect(addr).unwrap();
    client.set_retry(Duration::from_millis(50));
    client.set_timeout(Duration::from_secs(20));
    assert_eq!(client.call::<_, u32>(0x2000_2005, 1, 1, &()).unwrap(), 9);
    peer.join().unwrap();

    // Nobody answers: the call times out after its total timeout.
    let silent = UdpSocket::bind(local()).unwrap();
    let mut client = UdpClient::connect(silent.local_addr().unwrap()).unwrap();
    client.set_retry(Duration::from_millis(20));
    client.set_timeout(Duration::from_millis(150));
    assert!(matches!(
        client.call::<_, ()>(1, 1, 0, &()),
        Err(Error::Timeout)
    ));

    // A closed port is reported at once (ICMP port unreachable), not after the timeout.
    let closed = UdpSocket::bind(local()).unwrap();
    let mut client = UdpClient::connect(closed.local_addr().unwrap()).unwrap();
    drop(closed);
    client.set_timeout(Duration::from_secs(20));
    match client.call::<_, ()>(1, 1, 0, &()) {
        Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused),
        other => panic!("expected connection refused, got {other:?}"),
    }
}

#[test]
fn hostile_streams_lose_their_connection_only() {
    let prog = 0x2000_2007;
    let server = Server::builder()
        .service(Calc { prog, vers: 1 })
        .listen_tcp(local())
        .max_record(4096)
        .start()
        .unwrap();
    let addr = server.tcp_addr().unwrap();
    let mut client = TcpClient::connect(addr).unwrap();
    // A fragment announcing 2 GiB, and a record over the server's limit in small fragments.
    for (record, fragment) in [(vec![0x7f, 0xff, 0xff, 0xff], 0), (vec![0u8; 5000], 1000)] {
        let raw = TcpStream::connect(addr).unwrap();
        if fragment == 0 {
            use std::io::Write;
            (&raw).write_all(&record).unwrap();
        } else {
            write_record(&raw, &record, fragment).unwrap();
        }
        let mut buf = Vec::new();
        // The server closes the connection without a reply.
        let read = read_record(BufReader::new(&raw), &mut buf, 1 << 20);
        assert!(matches!(read, Ok(false) | Err(Error::Io(_))), "{read:?}");
        assert_eq!(client.call::<_, i32>(prog, 1, ADD, &(2, 3)).unwrap(), 5);
    }
    // Garbage that is not an RPC call on a record: no reply, connection stays usable.
    let raw = TcpStream::connect(addr).unwrap();
    write_record(&raw, &[0, 0, 0, 1, 0, 0, 0, 1], 100).unwrap();
    let mut call = Vec::new();
    RpcMsg {
        xid: 99,
        body: MsgBody::Call(rpc::msg::CallBody {
            rpcvers: 2,
            prog,
            vers: 1,
            procedure: 0,
            cred: OpaqueAuth::none(),
            verf: OpaqueAuth::none(),
        }),
    }
    .encode(&mut call)
    .unwrap();
    write_record(&raw, &call, 7).unwrap();
    let mut buf = Vec::new();
    assert!(read_record(BufReader::new(&raw), &mut buf, 1 << 20).unwrap());
    assert_eq!(xid_of(&buf), 99, "the reply answers the real call");
}

#[test]
fn tcp_times_out_reconnects_and_skips_stale_replies() {
    let listener = TcpListener::bind(local()).unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut buf = Vec::new();
        // First connection: read the call, never answer.
        let (first, _) = listener.accept().unwrap();
        assert!(read_record(BufReader::new(&first), &mut buf, 1 << 20).unwrap());
        // The client gives up on it and reconnects for its next call.
        let (second, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(&second);
        assert!(read_record(&mut reader, &mut buf, 1 << 20).unwrap());
        let xid = xid_of(&buf);
        // A stale reply, then the real one split into 1-byte fragments.
        write_record(
            &second,
            &reply_bytes(xid.wrapping_sub(7), &[0, 0, 0, 1]),
            1 << 20,
        )
        .unwrap();
        write_record(&second, &reply_bytes(xid, &[0, 0, 0, 5]), 1).unwrap();
        // Holding the first connection open until now: its silence, not a close, timed out.
        assert!(!read_record(&mut reader, &mut buf, 1 << 20).unwrap());
        drop(first);
    });
    let mut client = TcpClient::connect(addr).unwrap();
    client
        .set_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(matches!(
        client.call::<_, u32>(0x2000_2006, 1, 1, &()),
        Err(Error::Timeout)
    ));
    client.set_timeout(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(client.call::<_, u32>(0x2000_2006, 1, 1, &()).unwrap(), 5);
    drop(client);
    peer.join().unwrap();
}

/// A peer that keeps a TCP call busy without answering it: replies to another xid, or the
/// real reply one byte at a time, every `pause`.
fn stalling_peer(trickle: bool, pause: Duration) -> SocketAddr {
    let listener = TcpListener::bind(local()).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut buf = Vec::new();
        if !read_record(BufReader::new(&conn), &mut buf, 1 << 20).unwrap() {
            return;
        }
        let xid = xid_of(&buf);
        if trickle {
            let mut record = Vec::new();
            write_record(&mut record, &reply_bytes(xid, &[0, 0, 0, 5]), 1 << 20).unwrap();
            for b in record {
                if (&conn).write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(pause);
            }
        } else {
            loop {
                let stale = reply_bytes(xid.wrapping_sub(1), &[0, 0, 0, 1]);
                if write_record(&conn, &stale, 1 << 20).is_err() {
                    return;
                }
                std::thread::sleep(pause);
            }
        }
    });
    addr
}

#[test]
fn tcp_timeout_bounds_the_whole_call() {
    use std::time::Instant;
    for trickle in [false, true] {
        let addr = stalling_peer(trickle, Duration::from_millis(50));
        let mut client = TcpClient::connect(addr).unwrap();
        client
            .set_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        let start = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(client.call::<_, u32>(0x2000_2007, 1, 1, &()));
        });
        // Without a total deadline the call would never return.
        let r = rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("trickle {trickle}: the call outlived its timeout"));
        let took = start.elapsed();
        assert!(matches!(r, Err(Error::Timeout)), "trickle {trickle}: {r:?}");
        assert!(
            took < Duration::from_millis(1500),
            "trickle {trickle}: the call took {took:?}"
        );
    }
}
