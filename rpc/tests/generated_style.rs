//! Types, a client stub and a dispatcher written exactly the way stubgen's output uses this
//! crate (only the items of the contract in the crate docs), run over TCP and UDP.

use rpc::client::{Call, TcpClient, UdpClient};
use rpc::serde::de::{Error as _, SeqAccess, Visitor};
use rpc::serde::ser::SerializeTuple;
use rpc::serde::{Deserialize, Deserializer, Serialize, Serializer};
use rpc::server::{DispatchError, Server, Service};
use rpc::xdr::{self, FixedArray, FixedOpaque, Opaque, Quadruple, VarArray, XdrString};

// enum kind { KIND_A = 1, KIND_B = 5 };
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    A = 1,
    B = 5,
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i32(*self as i32)
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match i32::deserialize(deserializer)? {
            1 => Ok(Kind::A),
            5 => Ok(Kind::B),
            v => Err(D::Error::custom(format!("invalid kind {v}"))),
        }
    }
}

// struct item { kind k; string name<8>; opaque tag[3]; unsigned hyper big; item *next; };
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(crate = "rpc::serde")]
struct Item {
    k: Kind,
    name: XdrString<8>,
    tag: FixedOpaque<3>,
    big: u64,
    next: Option<Box<Item>>,
}

// union result switch (kind k) { case KIND_A: item it; case KIND_B: void; };
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    A(Item),
    B,
}

impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Outcome::A(it) => {
                let mut t = serializer.serialize_tuple(2)?;
                t.serialize_element(&Kind::A)?;
                t.serialize_element(it)?;
                t.end()
            }
            Outcome::B => {
                let mut t = serializer.serialize_tuple(1)?;
                t.serialize_element(&Kind::B)?;
                t.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Outcome;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("union result")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Outcome, A::Error> {
                let missing = || A::Error::custom("missing union arm");
                match seq.next_element::<Kind>()?.ok_or_else(missing)? {
                    Kind::A => Ok(Outcome::A(seq.next_element()?.ok_or_else(missing)?)),
                    Kind::B => Ok(Outcome::B),
                }
            }
        }
        deserializer.deserialize_tuple(2, V)
    }
}

const PROG: u32 = 0x2000_4001;
const VERS: u32 = 1;

// program P { version V { result LOOKUP(kind, item) = 1; double SUM(double<>, float[2]) = 2;
//   quadruple SAME(quadruple) = 3; opaque BLOB(void) = 4; } = 1; } = 0x20004001;
trait Handler: Send + Sync + 'static {
    fn lookup(&self, k: Kind, it: Item) -> Outcome;
    fn sum(&self, v: VarArray<f64>, f: FixedArray<f32, 2>) -> f64;
}

struct Dispatcher<H>(H);

impl<H: Handler> Service for Dispatcher<H> {
    fn program(&self) -> u32 {
        PROG
    }
    fn version(&self) -> u32 {
        VERS
    }
    fn dispatch(
        &self,
        procedure: u32,
        args: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), DispatchError> {
        let reply_with = |reply: &mut Vec<u8>, r: &dyn erased::Ser| r.write(reply);
        match procedure {
            0 => xdr::from_bytes::<()>(args).map_err(|_| DispatchError::GarbageArgs),
            1 => {
                let (k, it): (Kind, Item) =
                    xdr::from_bytes(args).map_err(|_| DispatchError::GarbageArgs)?;
                reply_with(reply, &self.0.lookup(k, it))
            }
            2 => {
                let (v, f) = xdr::from_bytes(args).map_err(|_| DispatchError::GarbageArgs)?;
                reply_with(reply, &self.0.sum(v, f))
            }
            3 => {
                let q: Quadruple = xdr::from_bytes(args).map_err(|_| DispatchError::GarbageArgs)?;
                reply_with(reply, &q)
            }
            4 => reply_with(reply, &Opaque::<16>(vec![1, 2, 3])),
            _ => Err(DispatchError::ProcUnavail),
        }
    }
}

/// Object-safe serialization, so that the dispatcher above has one reply path.
mod erased {
    use super::*;
    pub trait Ser {
        fn write(&self, out: &mut Vec<u8>) -> Result<(), DispatchError>;
    }
    impl<T: Serialize> Ser for T {
        fn write(&self, out: &mut Vec<u8>) -> Result<(), DispatchError> {
            xdr::to_writer(out, self).map_err(|_| DispatchError::SystemErr)
        }
    }
}

struct Impl;

impl Handler for Impl {
    fn lookup(&self, k: Kind, it: Item) -> Outcome {
        match k {
            Kind::A => Outcome::A(Item {
                big: it.big + 1,
                ..it
            }),
            Kind::B => Outcome::B,
        }
    }
    fn sum(&self, v: VarArray<f64>, f: FixedArray<f32, 2>) -> f64 {
        v.iter().sum::<f64>() + f.iter().map(|&x| f64::from(x)).sum::<f64>()
    }
}

/// The generated client stub: one method per procedure over any `Call`.
struct Client<C: Call>(C);

impl<C: Call> Client<C> {
    fn null(&mut self) -> Result<(), rpc::Error> {
        self.0.call(PROG, VERS, 0, &())
    }
    fn lookup(&mut self, k: Kind, it: &Item) -> Result<Outcome, rpc::Error> {
        self.0.call(PROG, VERS, 1, &(k, it))
    }
    fn sum(&mut self, v: &VarArray<f64>, f: &FixedArray<f32, 2>) -> Result<f64, rpc::Error> {
        self.0.call(PROG, VERS, 2, &(v, f))
    }
    fn same(&mut self, q: &Quadruple) -> Result<Quadruple, rpc::Error> {
        self.0.call(PROG, VERS, 3, q)
    }
    fn blob(&mut self) -> Result<Opaque<16>, rpc::Error> {
        self.0.call(PROG, VERS, 4, &())
    }
}

fn exercise<C: Call>(mut client: Client<C>) {
    client.null().unwrap();
    let item = Item {
        k: Kind::A,
        name: "first".into(),
        tag: FixedOpaque(*b"abc"),
        big: u64::MAX - 1,
        next: Some(Box::new(Item {
            k: Kind::B,
            name: "second".into(),
            tag: FixedOpaque::default(),
            big: 0,
            next: None,
        })),
    };
    let expected = Outcome::A(Item {
        big: u64::MAX,
        ..item.clone()
    });
    assert_eq!(client.lookup(Kind::A, &item).unwrap(), expected);
    assert_eq!(client.lookup(Kind::B, &item).unwrap(), Outcome::B);
    let sum = client
        .sum(&VarArray(vec![1.5, 2.5]), &FixedArray([0.25, 0.75]))
        .unwrap();
    assert_eq!(sum, 5.0);
    let q = Quadruple([7; 16]);
    assert_eq!(client.same(&q).unwrap(), q);
    assert_eq!(client.blob().unwrap().0, vec![1, 2, 3]);
    // An over-long name is refused by the client's own encoder.
    let mut bad = item.clone();
    bad.name = "far too long".into();
    let err = client.lookup(Kind::A, &bad).unwrap_err().to_string();
    assert!(
        err.contains("string<8>") && err.contains("length 12"),
        "{err}"
    );
    assert!(matches!(
        client.0.call::<_, ()>(PROG, VERS, 9, &()),
        Err(rpc::Error::ProcUnavail)
    ));
}

#[test]
fn generated_style_code_works_over_tcp_and_udp() {
    let local = "127.0.0.1:0".parse().unwrap();
    let server = Server::builder()
        .service(Dispatcher(Impl))
        .listen_tcp(local)
        .listen_udp(local)
        .start()
        .unwrap();
    exercise(Client(
        TcpClient::connect(server.tcp_addr().unwrap()).unwrap(),
    ));
    let mut udp = UdpClient::connect(server.udp_addr().unwrap()).unwrap();
    exercise(Client(&mut udp));
    server.shutdown().unwrap();
}
