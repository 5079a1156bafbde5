//! An interface whose names are also names the generated code uses internally compiles, and
//! its stubs keep their meaning (the stubs come from `name_clashes.idl` through the proc macro,
//! which runs the same generator as `stubgen srpc`).

#[allow(non_upper_case_globals, dead_code)]
mod clashes {
    stubgen_macros::srpc!("tests/name_clashes.idl");
}

use clashes::*;
use srpc::{InOut, Out, Wire};

struct Impl;

impl CalcServer for Impl {
    fn compute(&mut self, x: i32, r: &mut Out<'_, Result>) {
        r.set(&Result {
            code: x,
            value: 0.5,
        })
        .unwrap();
    }
    fn f(&mut self, s: S, t: &mut Out<'_, S>) {
        t.set(&s).unwrap();
    }
    fn put(&mut self, req: [u8; 64], call: u32, svc: u32, run: &mut Out<'_, u32>) {
        run.set(&(u32::from(req[0]) + call + svc)).unwrap();
    }
    fn bind(&mut self, port: u32, ok: &mut Out<'_, bool>) {
        ok.set(&(port != 0)).unwrap();
    }
    fn binding(&mut self, ep: u32, server: u32, mode: &mut InOut<'_, u32>) {
        *mode.get_mut() += ep + server;
    }
}

#[test]
fn names_the_generated_code_uses_do_not_clash() {
    assert_eq!((n, b), (3, 2));
    let mut buf = vec![0u8; <Result as Wire>::SIZE];
    let r = Result {
        code: 7,
        value: 1.5,
    };
    r.put(&mut buf).unwrap();
    assert_eq!(<Result as Wire>::get(&buf).unwrap(), r);
    let mut buf = vec![0u8; <S as Wire>::SIZE];
    S { a: 1, b: 2 }.put(&mut buf).unwrap();
    assert_eq!(<S as Wire>::get(&buf).unwrap(), S { a: 1, b: 2 });
    // The stub's own `bind` and `binding` keep their meaning; the procedures of those names
    // are called through `bind_` and `binding_`.
    let _: fn(&srpc::Endpoint, usize, srpc::Mode) -> std::result::Result<CalcClient, srpc::Error> =
        CalcClient::bind;
    let _: fn(&mut CalcClient) -> &mut srpc::ClientBinding = CalcClient::binding;
    let _: fn(&mut CalcClient, &u32, &mut bool) -> std::result::Result<(), srpc::Error> =
        CalcClient::bind_;
    let _: fn(&mut CalcClient, &u32, &u32, &mut u32) -> std::result::Result<(), srpc::Error> =
        CalcClient::binding_;
    let _ = calc_dispatch::<Impl>;
    assert_eq!(CALC_PROCEDURES.len(), 5);
}
