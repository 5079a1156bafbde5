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

/// Constants that rpcgen's C output gets from the system headers: the standard ONC RPC names
/// (authentication flavours, RFC 5531 section 8.2 and RFC 5403; the portmapper and rpcbind
/// program, versions, procedures and port, RFC 1833; RPCSEC_GSS procedures, RFC 2203) and a
/// few limits of `<rpc/*.h>`. A definition in the input takes precedence.
pub(super) fn builtin_const(name: &str) -> Option<i128> {
    Some(match name {
        "TRUE" => 1,
        "FALSE" => 0,
        "AUTH_NONE" | "AUTH_NULL" => 0,
        "AUTH_SYS" | "AUTH_UNIX" => 1,
        "AUTH_SHORT" => 2,
        "AUTH_DH" | "AUTH_DES" => 3,
        "AUTH_KERB" | "AUTH_KERB4" => 4,
        "AUTH_RSA" => 5,
        "RPCSEC_GSS" => 6,
        "AUTH_TLS" => 7,
        "PMAPPROG" | "RPCBPROG" => 100000,
        "PMAPVERS" | "RPCBVERS_2" => 2,
        "RPCBVERS" | "RPCBVERS_3" => 3,
        "RPCBVERS4" | "RPCBVERS_4" => 4,
        "PMAPPORT" => 111,
        "PMAPPROC_NULL" | "RPCBPROC_NULL" => 0,
        "PMAPPROC_SET" | "RPCBPROC_SET" => 1,
        "PMAPPROC_UNSET" | "RPCBPROC_UNSET" => 2,
        "PMAPPROC_GETPORT" | "RPCBPROC_GETADDR" => 3,
        "PMAPPROC_DUMP" | "RPCBPROC_DUMP" => 4,
        "PMAPPROC_CALLIT" | "RPCBPROC_CALLIT" | "RPCBPROC_BCAST" => 5,
        "RPCBPROC_GETTIME" => 6,
        "RPCBPROC_UADDR2TADDR" => 7,
        "RPCBPROC_TADDR2UADDR" => 8,
        "RPCBPROC_GETVERSADDR" => 9,
        "RPCBPROC_INDIRECT" => 10,
        "RPCBPROC_GETADDRLIST" => 11,
        "RPCBPROC_GETSTAT" => 12,
        "IPPROTO_TCP" => 6,
        "IPPROTO_UDP" => 17,
        "RPCSEC_GSS_DATA" => 0,
        "RPCSEC_GSS_INIT" => 1,
        "RPCSEC_GSS_CONTINUE_INIT" => 2,
        "RPCSEC_GSS_DESTROY" => 3,
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
