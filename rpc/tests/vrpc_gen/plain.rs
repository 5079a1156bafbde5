//! The plain server of vecho.x that the tests share: each procedure does what its name says
//! (`reverse` hands the list back as it came, and the value is kept between calls).

use crate::vecho;
use std::sync::atomic::{AtomicI64, Ordering};

/// vecho.x's procedures, done plainly.
#[derive(Default)]
pub struct Plain {
    value: AtomicI64,
}

impl vecho::VechoV1Server for Plain {
    fn echo(&self, arg: vecho::blob) -> vecho::blob {
        arg
    }
    fn add(&self, a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }
    fn swap(&self, p: vecho::pair) -> vecho::pair {
        vecho::pair { a: p.b, b: p.a }
    }
    fn concat(&self, a: rpc::xdr::XdrString, b: rpc::xdr::XdrString) -> rpc::xdr::XdrString {
        let mut v = a.0;
        v.extend_from_slice(&b.0);
        v.into()
    }
    fn reverse(&self, n: Option<Box<vecho::node>>) -> Option<Box<vecho::node>> {
        n
    }
    fn set_value(&self, v: i64) {
        self.value.store(v, Ordering::SeqCst);
    }
    fn get_value(&self) -> i64 {
        self.value.load(Ordering::SeqCst)
    }
}
