// The Rust peer's side of stubgen's interoperability tests, included after the code generated
// from interop.x: a server with the same results as c_server.c and a client that checks every
// procedure like c_client.c.

use std::sync::atomic::{AtomicI32, Ordering};

fn next_color(c: color) -> color {
    match c {
        color::RED => color::GREEN,
        color::GREEN => color::BLUE,
        color::BLUE => color::RED,
    }
}

fn bump_scalars(s: &scalars) -> scalars {
    scalars {
        i: s.i + 1,
        u: s.u.wrapping_add(1),
        ui: s.ui + 1,
        h: s.h + 1,
        uh: s.uh.wrapping_add(1),
        f: s.f * 2.0,
        d: s.d * 2.0,
        b: !s.b,
        c: next_color(s.c),
    }
}

/// The server: the same computations as c_server.c.
#[derive(Default)]
pub struct Impl {
    stored: AtomicI32,
}

impl InteropV1Server for Impl {
    fn null_proc(&self) {}
    fn echo_scalars(&self, arg: scalars) -> scalars {
        bump_scalars(&arg)
    }
    fn echo_containers(&self, c: containers) -> containers {
        let mut out = c.clone();
        for b in out.fixed_bytes.0.iter_mut() {
            *b = b.wrapping_add(1);
        }
        out.blob.0.reverse();
        out.name = format!("{}!", c.name.as_str().unwrap()).as_str().into();
        out.fixed_ints.0.reverse();
        for v in out.var_ints.0.iter_mut() {
            *v *= 2;
        }
        for v in out.bigs.0.iter_mut() {
            *v = -*v;
        }
        for v in out.t.0.iter_mut() {
            *v += 10;
        }
        for v in out.colors.0.iter_mut() {
            *v = next_color(*v);
        }
        out.inner = bump_scalars(&c.inner);
        out
    }
    fn reverse(&self, mut l: list) -> list {
        let mut prev: list = None;
        while let Some(mut n) = l {
            l = n.next.take();
            n.next = prev;
            prev = Some(n);
        }
        prev
    }
    fn sum(&self, l: list) -> i32 {
        let mut sum = 0;
        let mut cur = &l;
        while let Some(n) = cur {
            sum += n.value;
            cur = &n.next;
        }
        sum
    }
    fn classify(&self, c: color) -> classify_res {
        match c {
            color::RED => classify_res::RED(42),
            color::GREEN => classify_res::GREEN("green".into()),
            color::BLUE => classify_res::BLUE("blue".into()),
        }
    }
    fn lookup(&self, n: i32) -> maybe_name {
        if n > 0 {
            maybe_name::TRUE(format!("user{n}").as_str().into())
        } else {
            maybe_name::FALSE
        }
    }
    fn negate(&self, r: num_res) -> num_res {
        match r {
            num_res::Case0(v) => num_res::Case0(-v),
            num_res::Case1(v) => num_res::Case1(-v),
            other => other,
        }
    }
    fn echo_tagged(&self, t: tagged) -> tagged {
        match t {
            tagged::Case7(v) => tagged::Case7(v * 2.0),
            tagged::Default(tag, mut raw) => {
                raw.0.reverse();
                tagged::Default(tag, raw)
            }
        }
    }
    fn add3(&self, a: i32, b: i64, c: u32) -> i64 {
        i64::from(a) + b + i64::from(c)
    }
    fn concat(&self, a: ::rpc::xdr::XdrString, b: ::rpc::xdr::XdrString) -> ::rpc::xdr::XdrString {
        let mut v = a.0;
        v.extend_from_slice(&b.0);
        ::rpc::xdr::XdrString(v)
    }
    fn same_color(&self, s: scalars, c: color) -> bool {
        s.c == c
    }
    fn set_value(&self, v: i32) {
        self.stored.store(v, Ordering::SeqCst);
    }
    fn get_value(&self) -> i32 {
        self.stored.load(Ordering::SeqCst)
    }
}

fn sample_scalars() -> scalars {
    scalars {
        i: -7,
        u: 4_000_000_000,
        ui: 17,
        h: -5_000_000_000,
        uh: 18_000_000_000_000_000_000,
        f: 1.5,
        d: -2.25,
        b: true,
        c: color::BLUE,
    }
}

fn node_list(values: &[i32]) -> list {
    values
        .iter()
        .rev()
        .fold(None, |next, &value| Some(Box::new(node { value, next })))
}

/// Calls every procedure through `client` and checks the results (panics on a mismatch).
pub fn check_all<C: ::rpc::client::Call>(client: C) {
    let mut c = InteropV1Client::new(client);
    c.null_proc().unwrap();

    let s = sample_scalars();
    assert_eq!(c.echo_scalars(&s).unwrap(), bump_scalars(&s));

    let cont = containers {
        fixed_bytes: ::rpc::xdr::FixedOpaque(*b"abcde"),
        blob: ::rpc::xdr::Opaque(vec![1, 2, 3, 4]),
        any: ::rpc::xdr::Opaque(vec![9, 8]),
        name: "alice".into(),
        text: "some text".into(),
        fixed_ints: ::rpc::xdr::FixedArray([1, 2, 3]),
        var_ints: ::rpc::xdr::VarArray(vec![5, -6, 7]),
        bigs: ::rpc::xdr::VarArray(vec![1 << 40, -3]),
        t: ::rpc::xdr::FixedArray([100, 200, 300]),
        colors: ::rpc::xdr::VarArray(vec![color::RED, color::GREEN, color::BLUE]),
        inner: s.clone(),
    };
    let r = c.echo_containers(&cont).unwrap();
    assert_eq!(&r.fixed_bytes.0, b"bcdef");
    assert_eq!(r.blob.0, [4, 3, 2, 1]);
    assert_eq!(r.any.0, [9, 8]);
    assert_eq!(r.name.as_str().unwrap(), "alice!");
    assert_eq!(r.text.as_str().unwrap(), "some text");
    assert_eq!(r.fixed_ints.0, [3, 2, 1]);
    assert_eq!(r.var_ints.0, [10, -12, 14]);
    assert_eq!(r.bigs.0, [-(1 << 40), 3]);
    assert_eq!(r.t.0, [110, 210, 310]);
    assert_eq!(r.colors.0, [color::GREEN, color::BLUE, color::RED]);
    assert_eq!(r.inner, bump_scalars(&s));

    assert_eq!(
        c.reverse(&node_list(&[1, 2, 3])).unwrap(),
        node_list(&[3, 2, 1])
    );
    assert_eq!(c.reverse(&None).unwrap(), None);
    assert_eq!(c.sum(&node_list(&[1, 2, 3])).unwrap(), 6);

    assert_eq!(c.classify(&color::RED).unwrap(), classify_res::RED(42));
    assert_eq!(
        c.classify(&color::GREEN).unwrap(),
        classify_res::GREEN("green".into())
    );
    assert_eq!(
        c.classify(&color::BLUE).unwrap(),
        classify_res::BLUE("blue".into())
    );

    assert_eq!(c.lookup(&12).unwrap(), maybe_name::TRUE("user12".into()));
    assert_eq!(c.lookup(&0).unwrap(), maybe_name::FALSE);

    assert_eq!(c.negate(&num_res::Case0(5)).unwrap(), num_res::Case0(-5));
    assert_eq!(
        c.negate(&num_res::Case1(1 << 33)).unwrap(),
        num_res::Case1(-(1 << 33))
    );
    assert_eq!(
        c.negate(&num_res::Default(99)).unwrap(),
        num_res::Default(99)
    );

    assert_eq!(
        c.echo_tagged(&tagged::Case7(0.75)).unwrap(),
        tagged::Case7(1.5)
    );
    assert_eq!(
        c.echo_tagged(&tagged::Default(3, ::rpc::xdr::Opaque(vec![10, 20, 30])))
            .unwrap(),
        tagged::Default(3, ::rpc::xdr::Opaque(vec![30, 20, 10]))
    );

    assert_eq!(
        c.add3(&-1, &(1 << 35), &3_000_000_000).unwrap(),
        -1 + (1 << 35) + 3_000_000_000
    );
    assert_eq!(
        c.concat(&"foo".into(), &"bar".into())
            .unwrap()
            .as_str()
            .unwrap(),
        "foobar"
    );
    assert!(c.same_color(&s, &color::BLUE).unwrap());
    assert!(!c.same_color(&s, &color::RED).unwrap());

    c.set_value(&31337).unwrap();
    assert_eq!(c.get_value().unwrap(), 31337);

    assert_eq!(GREETING, "hello");
    assert_eq!(BLOB_MAX, NAME_MAX_LEN);
}

/// Runs the client over `proto` against the server registered with the local rpcbind.
pub fn run_client(proto: &str) {
    let host = ::std::net::IpAddr::V4(::std::net::Ipv4Addr::LOCALHOST);
    match proto {
        "tcp" => check_all(
            ::rpc::client::TcpClient::connect_rpcbind(host, INTEROP_PROG, INTEROP_V1).unwrap(),
        ),
        "udp" => check_all(
            ::rpc::client::UdpClient::connect_rpcbind(host, INTEROP_PROG, INTEROP_V1).unwrap(),
        ),
        other => panic!("unknown protocol {other}"),
    }
    println!("OK");
}

/// Serves on TCP and UDP, registered with rpcbind; prints READY, stops when stdin closes.
pub fn run_server() {
    use ::std::io::{BufRead, Write};
    let server = ::rpc::server::Server::builder()
        .service(InteropV1Service(Impl::default()))
        .register(true)
        .start()
        .unwrap();
    println!("READY");
    ::std::io::stdout().flush().unwrap();
    for line in ::std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    server.shutdown().unwrap();
}
