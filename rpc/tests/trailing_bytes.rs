//! Bytes after a call's arguments or a reply's results are ignored, as libtirpc ignores them
//! (its XDR streams decode what the procedure asks for and no more).

#[allow(dead_code, clippy::all)]
#[rustfmt::skip]
#[path = "vrpc_gen/vecho.rs"]
mod vecho;
#[path = "vrpc_gen/plain.rs"]
mod plain;

use plain::Plain;
use rpc::client::{Call, TcpClient};
use rpc::msg::{AcceptStat, MsgBody, OpaqueAuth, ReplyBody, RpcMsg};
use rpc::record::{read_record, write_record};
use rpc::server::Server;
use std::io::BufReader;
use std::net::{SocketAddr, TcpListener};
use vecho::{VechoV1Client, VechoV1Service};

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[test]
fn the_generated_server_ignores_bytes_after_the_arguments() {
    let server = Server::builder()
        .service(VechoV1Service(Plain::default()))
        .listen_tcp(local())
        .start()
        .unwrap();
    let mut c = TcpClient::connect(server.tcp_addr().unwrap()).unwrap();
    // ADD(40, 2) followed by two more words; SWAP's pair followed by one.
    let sum: i32 = c
        .call(
            vecho::VECHO_PROG,
            vecho::VECHO_V1,
            vecho::ADD,
            &(40, 2, 7u32, 9u32),
        )
        .unwrap();
    assert_eq!(sum, 42);
    let swapped: vecho::pair = c
        .call(
            vecho::VECHO_PROG,
            vecho::VECHO_V1,
            vecho::SWAP,
            &(1, 2, 3u32),
        )
        .unwrap();
    assert_eq!(swapped, vecho::pair { a: 2, b: 1 });
    // Too few bytes are still an error.
    let r: Result<i32, rpc::Error> = c.call(vecho::VECHO_PROG, vecho::VECHO_V1, vecho::ADD, &1);
    assert!(matches!(r, Err(rpc::Error::GarbageArgs)), "{r:?}");
    server.shutdown().unwrap();
}

#[test]
fn the_client_ignores_bytes_after_the_results() {
    let listener = TcpListener::bind(local()).unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(&conn);
        let mut buf = Vec::new();
        assert!(read_record(&mut reader, &mut buf, 1 << 20).unwrap());
        let xid = u32::from_be_bytes(buf[..4].try_into().unwrap());
        let mut reply = Vec::new();
        RpcMsg {
            xid,
            body: MsgBody::Reply(ReplyBody::Accepted {
                verf: OpaqueAuth::none(),
                stat: AcceptStat::Success,
            }),
        }
        .encode(&mut reply)
        .unwrap();
        // The result (5), then a word the client did not ask for.
        reply.extend_from_slice(&[0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef]);
        write_record(&conn, &reply, 1 << 20).unwrap();
    });
    let mut c = VechoV1Client::new(TcpClient::connect(addr).unwrap());
    assert_eq!(c.add(&2, &3).unwrap(), 5);
    peer.join().unwrap();
}
