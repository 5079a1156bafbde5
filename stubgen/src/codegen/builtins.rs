//! Types and constants that rpcgen's C output takes from the system headers: `.x` files name
//! them without defining them.

use crate::ast::*;
use crate::error::Location;

/// Types that rpcgen's C output gets from the system headers (`<rpc/types.h>`, `<rpc/xdr.h>`,
/// `<rpc/rpcb_prot.h>`, `<sys/types.h>`), as XDR types. `xdr_u_char`, `xdr_short` and friends
/// put 4 bytes on the wire, hence the 32-bit mappings.
pub(super) fn builtin_type(name: &str) -> Option<Ty> {
    Some(match name {
        "u_char" | "u_short" | "u_int" | "u_long" | "uint8_t" | "u_int8_t" | "uint16_t"
        | "u_int16_t" | "uint32_t" | "u_int32_t" | "rpcprog_t" | "rpcvers_t" | "rpcproc_t"
        | "rpcprot_t" | "rpcport_t" => Ty::UInt,
        "int8_t" | "int16_t" | "int32_t" | "enum_t" => Ty::Int,
        "int64_t" | "quad_t" => Ty::Hyper,
        "uint64_t" | "u_int64_t" | "u_quad_t" => Ty::UHyper,
        "bool_t" => Ty::Bool,
        "netobj" => Ty::VarOpaque(Some(Value::Number(1024, builtin_loc()))),
        // `xdr_des_block` writes the 8 bytes as opaque data.
        "des_block" => Ty::FixedOpaque(Value::Number(8, builtin_loc())),
        _ => return None,
    })
}

/// Constants that rpcgen's C output gets from the system headers.
pub(super) fn builtin_const(name: &str) -> Option<i128> {
    Some(match name {
        "TRUE" => 1,
        "FALSE" => 0,
        "MAXNETNAMELEN" => 255,
        "MAX_NETOBJ_SZ" => 1024,
        "MAX_AUTH_BYTES" => 400,
        "RPC_MAXDATASIZE" => 9000,
        _ => return None,
    })
}

/// Structures that rpcgen's C output gets from the system headers, emitted when used.
pub(super) fn builtin_struct(name: &str) -> Option<StructDef> {
    let id = |n: &str| Ident {
        name: n.to_string(),
        loc: builtin_loc(),
    };
    match name {
        // libtirpc's `xdr_netbuf`: the buffer size, then the used bytes as opaque data.
        "netbuf" => Some(StructDef {
            name: id("netbuf"),
            fields: vec![
                Decl {
                    name: Some(id("maxlen")),
                    ty: Ty::UInt,
                },
                Decl {
                    name: Some(id("buf")),
                    ty: Ty::VarOpaque(None),
                },
            ],
        }),
        _ => None,
    }
}

pub(super) fn builtin_loc() -> Location {
    Location {
        file: "<built-in>".to_string(),
        line: 1,
        column: 1,
    }
}
