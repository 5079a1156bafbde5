//! Registration with the host's rpcbind, as rpcinfo sees it. Starts `rpcbind -f` if it is not
//! running; skips (with a message) only if rpcbind cannot be started.

mod common;

#[allow(dead_code, clippy::all)]
#[rustfmt::skip]
#[path = "vrpc_gen/vecho.rs"]
mod vecho;
#[path = "vrpc_gen/plain.rs"]
mod plain;

use common::*;
use rpc::client::{Call, TcpClient, UdpClient};
use rpc::rpcbind::{self, Mapping, Rpcb};
use rpc::server::Server;
use rpc::Error;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// The tests that register vecho.x's program take turns.
static VECHO: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Removes what an earlier, killed run of this test may have left behind.
fn clear_stale(prog: u32, versions: &[u32]) {
    for &vers in versions {
        let _ = run("rpcinfo", &["-d", &prog.to_string(), &vers.to_string()]);
    }
}

fn rpcinfo_ping(netid: &str, prog: u32, vers: u32) -> (bool, String) {
    run(
        "rpcinfo",
        &[
            "-T",
            netid,
            "127.0.0.1",
            &prog.to_string(),
            &vers.to_string(),
        ],
    )
}

#[test]
fn registered_server_answers_rpcinfo_and_is_gone_after_shutdown() {
    if !ensure_rpcbind() {
        return;
    }
    let prog = 0x2000_3001;
    clear_stale(prog, &[1, 2]);
    let server = Server::builder()
        .service(Calc { prog, vers: 1 })
        .service(Calc { prog, vers: 2 })
        .listen_tcp(local())
        .listen_udp(local())
        .register(true)
        .start()
        .unwrap();
    for (vers, proto) in [(1, "tcp"), (1, "udp"), (2, "tcp"), (2, "udp")] {
        assert!(
            listed(prog, vers, proto),
            "rpcinfo -p lacks {prog} {vers} {proto}"
        );
    }
    for (netid, vers) in [("tcp", 1), ("tcp", 2), ("udp", 1)] {
        let (ok, out) = rpcinfo_ping(netid, prog, vers);
        assert!(
            ok && out.contains("ready and waiting"),
            "rpcinfo -T {netid}: {out}"
        );
    }
    let (ok, out) = rpcinfo_ping("tcp", prog, 3);
    assert!(!ok, "version 3 is not served: {out}");
    // Clients find the server through rpcbind.
    let mut tcp = TcpClient::connect_rpcbind(LOCALHOST, prog, 2).unwrap();
    assert_eq!(tcp.peer_addr(), server.tcp_addr());
    assert_eq!(tcp.call::<_, i32>(prog, 2, ADD, &(1, 1)).unwrap(), 3);
    let mut udp = UdpClient::connect_rpcbind(LOCALHOST, prog, 1).unwrap();
    assert_eq!(udp.call::<_, i32>(prog, 1, ADD, &(1, 1)).unwrap(), 2);

    server.shutdown().unwrap();
    for (vers, proto) in [(1, "tcp"), (1, "udp"), (2, "tcp"), (2, "udp")] {
        assert!(
            !listed(prog, vers, proto),
            "{prog} {vers} {proto} still registered"
        );
    }
    let (ok, out) = rpcinfo_ping("tcp", prog, 1);
    assert!(!ok, "rpcinfo still reaches the stopped server: {out}");
    assert!(matches!(
        TcpClient::connect_rpcbind(LOCALHOST, prog, 1),
        Err(Error::NotRegistered { netid: "tcp", .. })
    ));
}

/// The server stubgen generates for a program registers it on TCP and UDP in one call, as
/// rpcgen's generated server does (vecho.x's `serve_vecho_prog`).
#[test]
fn the_generated_server_registers_on_tcp_and_udp_in_one_call() {
    if !ensure_rpcbind() {
        return;
    }
    let _turn = VECHO.lock().unwrap_or_else(|e| e.into_inner());
    let (prog, vers) = (vecho::VECHO_PROG, vecho::VECHO_V1);
    clear_stale(prog, &[vers]);
    let server = vecho::serve_vecho_prog(plain::Plain::default()).unwrap();
    for proto in ["tcp", "udp"] {
        assert!(listed(prog, vers, proto), "rpcinfo -p lacks {proto}");
    }
    let tcp = TcpClient::connect_rpcbind(LOCALHOST, prog, vers).unwrap();
    assert_eq!(vecho::VechoV1Client::new(tcp).add(&2, &3).unwrap(), 5);
    let udp = UdpClient::connect_rpcbind(LOCALHOST, prog, vers).unwrap();
    assert_eq!(vecho::VechoV1Client::new(udp).add(&4, &3).unwrap(), 7);
    server.shutdown().unwrap();
    for proto in ["tcp", "udp"] {
        assert!(!listed(prog, vers, proto), "{proto} still registered");
    }
}

#[test]
fn drop_unregisters() {
    if !ensure_rpcbind() {
        return;
    }
    let prog = 0x2000_3002;
    clear_stale(prog, &[7]);
    let server = Server::builder()
        .service(Calc { prog, vers: 7 })
        .listen_tcp(local())
        .register(true)
        .start()
        .unwrap();
    assert!(listed(prog, 7, "tcp"));
    assert!(!listed(prog, 7, "udp"), "only TCP was asked for");
    drop(server);
    assert!(!listed(prog, 7, "tcp"));
}

#[test]
fn conflicting_registration_is_refused_and_rolled_back() {
    if !ensure_rpcbind() {
        return;
    }
    let (taken, other) = (0x2000_3003, 0x2000_3004);
    clear_stale(taken, &[1]);
    clear_stale(other, &[1]);
    let first = Server::builder()
        .service(Calc {
            prog: taken,
            vers: 1,
        })
        .listen_tcp(local())
        .register(true)
        .start()
        .unwrap();
    let second = Server::builder()
        .service(Calc {
            prog: other,
            vers: 1,
        })
        .service(Calc {
            prog: taken,
            vers: 1,
        })
        .listen_tcp(local())
        .register(true)
        .start();
    match second {
        Err(Error::RegistrationRefused {
            prog,
            vers: 1,
            netid: "tcp",
        }) => assert_eq!(prog, taken),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a second registration of the same program succeeded"),
    }
    // The failed server removed its own registration and left the first server's alone.
    assert!(!listed(other, 1, "tcp"));
    assert!(listed(taken, 1, "tcp"));
    first.shutdown().unwrap();
    assert!(!listed(taken, 1, "tcp"));
}

#[test]
fn portmap_v2_and_rpcbind_v3_v4_procedures() {
    if !ensure_rpcbind() {
        return;
    }
    let prog = 0x2000_3005;
    clear_stale(prog, &[1, 3, 4]);
    // portmap v2 over TCP and UDP.
    let mut tcp = rpcbind::tcp_client(LOCALHOST).unwrap();
    let mut udp = UdpClient::connect((LOCALHOST, rpcbind::PORT).into()).unwrap();
    let mapping = Mapping {
        prog,
        vers: 1,
        prot: rpcbind::IPPROTO_UDP,
        port: 4321,
    };
    assert!(rpcbind::pmap_set(&mut tcp, &mapping).unwrap());
    let moved = Mapping {
        port: 4322,
        ..mapping.clone()
    };
    assert!(
        !rpcbind::pmap_set(&mut tcp, &moved).unwrap(),
        "a conflicting SET is refused"
    );
    assert_eq!(rpcbind::pmap_getport(&mut udp, &mapping).unwrap(), 4321);
    assert!(rpcbind::pmap_dump(&mut tcp).unwrap().contains(&mapping));
    assert!(listed(prog, 1, "udp"));
    assert!(rpcbind::pmap_unset(&mut udp, &mapping).unwrap());
    assert_eq!(rpcbind::pmap_getport(&mut tcp, &mapping).unwrap(), 0);
    assert!(!listed(prog, 1, "udp"));

    // rpcbind v3 and v4 over the local socket, read back over TCP.
    let mut localc = rpcbind::local_client().unwrap();
    for vers in [3, 4] {
        let entry = Rpcb {
            prog,
            vers,
            netid: "tcp".into(),
            addr: rpcbind::uaddr("127.0.0.1:4660".parse().unwrap()).into(),
            owner: "rpc-test".into(),
        };
        assert!(rpcbind::rpcb_set(&mut localc, vers, &entry).unwrap());
        let addr = rpcbind::rpcb_getaddr(&mut tcp, vers, &entry).unwrap();
        assert_eq!(
            rpcbind::parse_uaddr(&addr),
            Some("127.0.0.1:4660".parse().unwrap())
        );
        assert!(listed(prog, vers, "tcp"));
        assert!(rpcbind::rpcb_unset(&mut localc, vers, &entry).unwrap());
        assert_eq!(rpcbind::rpcb_getaddr(&mut tcp, vers, &entry).unwrap(), "");
        assert!(!listed(prog, vers, "tcp"));
    }
}

/// A generated server started after a predecessor was killed (its rpcbind entries left
/// behind, pointing at dead ports) takes the entries over, as rpcgen's generated server does
/// with `pmap_unset` before registering.
#[test]
fn the_generated_server_replaces_a_dead_predecessors_registration() {
    if !ensure_rpcbind() {
        return;
    }
    let _turn = VECHO.lock().unwrap_or_else(|e| e.into_inner());
    let (prog, vers) = (vecho::VECHO_PROG, vecho::VECHO_V1);
    clear_stale(prog, &[vers]);
    // What a killed server leaves: entries for ports nobody listens on.
    let dead_tcp = std::net::TcpListener::bind(local()).unwrap();
    let dead_addr = dead_tcp.local_addr().unwrap();
    drop(dead_tcp);
    rpcbind::register(prog, vers, rpcbind::IPPROTO_TCP, dead_addr).unwrap();
    rpcbind::register(prog, vers, rpcbind::IPPROTO_UDP, dead_addr).unwrap();
    let server = vecho::serve_vecho_prog(plain::Plain::default()).unwrap();
    let tcp = TcpClient::connect_rpcbind(LOCALHOST, prog, vers).unwrap();
    assert_eq!(
        tcp.peer_addr().map(|a| a.port()),
        server.tcp_addr().map(|a| a.port())
    );
    assert_eq!(vecho::VechoV1Client::new(tcp).add(&2, &3).unwrap(), 5);
    let udp = UdpClient::connect_rpcbind(LOCALHOST, prog, vers).unwrap();
    assert_eq!(vecho::VechoV1Client::new(udp).add(&4, &3).unwrap(), 7);
    server.shutdown().unwrap();
    for proto in ["tcp", "udp"] {
        assert!(!listed(prog, vers, proto), "{proto} still registered");
    }
}
