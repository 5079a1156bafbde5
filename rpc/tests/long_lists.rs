//! Linked lists (XDR optional data) far longer than a thread's stack could recurse through
//! without help, through a generated client and server (vecho.x's REVERSE), as libtirpc
//! decodes them: NFS READDIR replies and mount export lists are such chains.

#[allow(dead_code, clippy::all)]
#[rustfmt::skip]
#[path = "vrpc_gen/vecho.rs"]
mod vecho;

use rpc::client::{Call, TcpClient};
use rpc::server::Server;
use std::net::SocketAddr;
use vecho::{node, VechoV1Client, VechoV1Server, VechoV1Service};

const LONG: usize = 100_000;

/// Raw XDR words, sent as they are (no length prefix).
struct Words(Vec<u32>);

impl rpc::serde::Serialize for Words {
    fn serialize<S: rpc::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use rpc::serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(self.0.len())?;
        for w in &self.0 {
            t.serialize_element(w)?;
        }
        t.end()
    }
}

/// REVERSE either returns its argument unchanged (the server encodes and drops a long
/// result) or drops it and returns nothing (the server drops a long argument).
struct Lists {
    keep: bool,
}

impl VechoV1Server for Lists {
    fn echo(&self, arg: vecho::blob) -> vecho::blob {
        arg
    }
    fn add(&self, a: i32, b: i32) -> i32 {
        a + b
    }
    fn swap(&self, p: vecho::pair) -> vecho::pair {
        p
    }
    fn concat(&self, a: rpc::xdr::XdrString, _: rpc::xdr::XdrString) -> rpc::xdr::XdrString {
        a
    }
    fn reverse(&self, n: Option<Box<node>>) -> Option<Box<node>> {
        if self.keep {
            n
        } else {
            // Dropped here, recursively, one frame per link.
            drop(n);
            None
        }
    }
    fn set_value(&self, _: i64) {}
    fn get_value(&self) -> i64 {
        0
    }
}

fn list(len: usize) -> Option<Box<node>> {
    let mut head = None;
    for i in (0..len).rev() {
        head = Some(Box::new(node {
            name: format!("{i}").into(),
            next: head,
        }));
    }
    head
}

/// The names, walking the list without recursion, and unlinking it as it goes.
fn names(mut list: Option<Box<node>>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(mut n) = list {
        list = n.next.take();
        out.push(n.name.as_str().unwrap().to_string());
    }
    out
}

fn start(keep: bool) -> Server {
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Server::builder()
        .service(VechoV1Service(Lists { keep }))
        .listen_tcp(local)
        .start()
        .unwrap()
}

#[test]
fn a_100000_node_list_roundtrips_through_the_generated_stubs() {
    let server = start(true);
    let mut c = VechoV1Client::new(TcpClient::connect(server.tcp_addr().unwrap()).unwrap());
    let sent = list(LONG);
    let back = c.reverse(&sent).unwrap();
    let expected: Vec<String> = (0..LONG).map(|i| i.to_string()).collect();
    assert_eq!(names(back), expected);
    names(sent);
    // The server dropping a long argument itself does not bring it down either.
    let dropper = start(false);
    let mut d = VechoV1Client::new(TcpClient::connect(dropper.tcp_addr().unwrap()).unwrap());
    let sent = list(LONG);
    assert_eq!(d.reverse(&sent).unwrap(), None);
    names(sent);
    assert_eq!(c.add(&1, &2).unwrap(), 3);
    assert_eq!(d.add(&1, &2).unwrap(), 3);
    dropper.shutdown().unwrap();
    server.shutdown().unwrap();
}

#[test]
fn a_hostile_chain_is_refused_and_the_server_survives() {
    let server = start(true);
    let mut c = TcpClient::connect(server.tcp_addr().unwrap()).unwrap();
    // More links than the decoder allows (each link: present, an empty name), as raw XDR.
    let links = rpc::xdr::DEFAULT_MAX_DEPTH + 1;
    let mut args = [1, 0].repeat(links);
    args.push(0);
    let r: Result<(), rpc::Error> = c.call(
        vecho::VECHO_PROG,
        vecho::VECHO_V1,
        vecho::REVERSE,
        &Words(args),
    );
    assert!(matches!(r, Err(rpc::Error::GarbageArgs)), "{r:?}");
    // A chain that never ends is refused too.
    let endless = [1, 0].repeat(1000);
    let r: Result<(), rpc::Error> = c.call(
        vecho::VECHO_PROG,
        vecho::VECHO_V1,
        vecho::REVERSE,
        &Words(endless),
    );
    assert!(matches!(r, Err(rpc::Error::GarbageArgs)), "{r:?}");
    let mut v = VechoV1Client::new(c);
    assert_eq!(v.add(&1, &2).unwrap(), 3);
    server.shutdown().unwrap();
}
