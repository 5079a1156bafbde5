//! ONC RPC v2 messages (RFC 5531 §8-9): calls, replies with every accept and reject status,
//! and authentication (AUTH_NONE and AUTH_SYS).
//!
//! A call is its header ([`RpcMsg`] with [`MsgBody::Call`]) followed by the XDR-encoded
//! arguments; a successful reply is its header followed by the results. [`RpcMsg::decode`]
//! returns the bytes after the header.

use crate::xdr::{self, Deserializer, Opaque, VarArray, XdrString};
use serde::{Deserialize, Serialize};

/// The RPC protocol version this crate speaks.
pub const RPC_VERSION: u32 = 2;
/// `AUTH_NONE` (also `AUTH_NULL`).
pub const AUTH_NONE: u32 = 0;
/// `AUTH_SYS` (also `AUTH_UNIX`).
pub const AUTH_SYS: u32 = 1;
/// Largest body of an authentication credential or verifier.
pub const MAX_AUTH_BYTES: u32 = 400;

/// `opaque_auth`: a flavor and its opaque body.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OpaqueAuth {
    /// The authentication flavor (`AUTH_NONE`, `AUTH_SYS`, ...).
    pub flavor: u32,
    /// The flavor-specific body, at most 400 bytes.
    pub body: Opaque<MAX_AUTH_BYTES>,
}

impl OpaqueAuth {
    /// The `AUTH_NONE` credential or verifier.
    pub fn none() -> Self {
        OpaqueAuth::default()
    }

    /// An `AUTH_SYS` credential.
    pub fn sys(params: &AuthSysParams) -> Result<Self, xdr::Error> {
        let body = xdr::to_bytes(params)?;
        if body.len() > MAX_AUTH_BYTES as usize {
            return Err(xdr::Error::BoundExceeded {
                kind: "opaque",
                max: MAX_AUTH_BYTES,
                len: body.len() as u64,
            });
        }
        Ok(OpaqueAuth {
            flavor: AUTH_SYS,
            body: Opaque(body),
        })
    }
}

/// `authsys_parms`: the body of an `AUTH_SYS` credential.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AuthSysParams {
    /// An arbitrary id the caller may change between credentials.
    pub stamp: u32,
    /// The caller's host name.
    pub machinename: XdrString<255>,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups.
    pub gids: VarArray<u32, 16>,
}

/// `auth_stat`: why the server rejected the credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthStat {
    /// `AUTH_OK`.
    Ok,
    /// `AUTH_BADCRED`: bad credential (seal broken).
    BadCred,
    /// `AUTH_REJECTEDCRED`: the client must begin a new session.
    RejectedCred,
    /// `AUTH_BADVERF`: bad verifier (seal broken).
    BadVerf,
    /// `AUTH_REJECTEDVERF`: verifier expired or replayed.
    RejectedVerf,
    /// `AUTH_TOOWEAK`: rejected for security reasons.
    TooWeak,
    /// `AUTH_INVALIDRESP`: bogus response verifier.
    InvalidResp,
    /// `AUTH_FAILED`: reason unknown.
    Failed,
    /// Any other value (Kerberos and RPCSEC_GSS errors).
    Other(u32),
}

impl AuthStat {
    /// The value on the wire.
    pub fn code(self) -> u32 {
        match self {
            AuthStat::Ok => 0,
            AuthStat::BadCred => 1,
            AuthStat::RejectedCred => 2,
            AuthStat::BadVerf => 3,
            AuthStat::RejectedVerf => 4,
            AuthStat::TooWeak => 5,
            AuthStat::InvalidResp => 6,
            AuthStat::Failed => 7,
            AuthStat::Other(v) => v,
        }
    }

    /// The status for a wire value.
    pub fn from_code(code: u32) -> Self {
        match code {
            0 => AuthStat::Ok,
            1 => AuthStat::BadCred,
            2 => AuthStat::RejectedCred,
            3 => AuthStat::BadVerf,
            4 => AuthStat::RejectedVerf,
            5 => AuthStat::TooWeak,
            6 => AuthStat::InvalidResp,
            7 => AuthStat::Failed,
            v => AuthStat::Other(v),
        }
    }
}

/// The header of a call; the arguments follow it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallBody {
    /// Must be [`RPC_VERSION`].
    pub rpcvers: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub procedure: u32,
    /// Credential.
    pub cred: OpaqueAuth,
    /// Verifier.
    pub verf: OpaqueAuth,
}

/// `accept_stat` with its data: how an accepted call went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcceptStat {
    /// `SUCCESS`: the results follow the header.
    Success,
    /// `PROG_UNAVAIL`: the program is not served here.
    ProgUnavail,
    /// `PROG_MISMATCH`: the version is not served; the lowest and highest that are.
    ProgMismatch {
        /// Lowest version served.
        low: u32,
        /// Highest version served.
        high: u32,
    },
    /// `PROC_UNAVAIL`: no such procedure.
    ProcUnavail,
    /// `GARBAGE_ARGS`: the arguments could not be decoded.
    GarbageArgs,
    /// `SYSTEM_ERR`: the server failed (memory, a panic, ...).
    SystemErr,
}

/// `rejected_reply`: why a call was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RejectedReply {
    /// `RPC_MISMATCH`: the RPC versions the server speaks.
    RpcMismatch {
        /// Lowest version.
        low: u32,
        /// Highest version.
        high: u32,
    },
    /// `AUTH_ERROR`: authentication failed.
    AuthError(AuthStat),
}

/// The header of a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyBody {
    /// `MSG_ACCEPTED`: the verifier and the outcome.
    Accepted {
        /// The server's verifier.
        verf: OpaqueAuth,
        /// The outcome.
        stat: AcceptStat,
    },
    /// `MSG_DENIED`.
    Denied(RejectedReply),
}

/// A call or a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MsgBody {
    /// `CALL`.
    Call(CallBody),
    /// `REPLY`.
    Reply(ReplyBody),
}

/// An RPC message header: the transaction id and a call or reply body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcMsg {
    /// Transaction id, chosen by the caller and echoed in the reply.
    pub xid: u32,
    /// The call or reply.
    pub body: MsgBody,
}

fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), xdr::Error> {
    xdr::to_writer(out, value)
}

fn get<'de, T: Deserialize<'de>>(de: &mut Deserializer<'de>) -> Result<T, xdr::Error> {
    T::deserialize(de)
}

impl RpcMsg {
    /// Appends the XDR encoding of the header to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), xdr::Error> {
        put(out, &self.xid)?;
        match &self.body {
            MsgBody::Call(call) => {
                put(out, &0u32)?;
                put(out, call)
            }
            MsgBody::Reply(ReplyBody::Accepted { verf, stat }) => {
                put(out, &(1u32, 0u32, verf))?;
                match stat {
                    AcceptStat::Success => put(out, &0u32),
                    AcceptStat::ProgUnavail => put(out, &1u32),
                    AcceptStat::ProgMismatch { low, high } => put(out, &(2u32, low, high)),
                    AcceptStat::ProcUnavail => put(out, &3u32),
                    AcceptStat::GarbageArgs => put(out, &4u32),
                    AcceptStat::SystemErr => put(out, &5u32),
                }
            }
            MsgBody::Reply(ReplyBody::Denied(rejected)) => {
                put(out, &(1u32, 1u32))?;
                match rejected {
                    RejectedReply::RpcMismatch { low, high } => put(out, &(0u32, low, high)),
                    RejectedReply::AuthError(stat) => put(out, &(1u32, stat.code())),
                }
            }
        }
    }

    /// Decodes a header from the front of `input`; returns it and the bytes after it (the
    /// arguments of a call, the results of a successful reply).
    pub fn decode(input: &[u8]) -> Result<(RpcMsg, &[u8]), xdr::Error> {
        let mut de = Deserializer::new(input);
        let xid: u32 = get(&mut de)?;
        let body = match get::<u32>(&mut de)? {
            0 => MsgBody::Call(get(&mut de)?),
            1 => MsgBody::Reply(match get::<u32>(&mut de)? {
                0 => {
                    let verf = get(&mut de)?;
                    let stat = match get::<u32>(&mut de)? {
                        0 => AcceptStat::Success,
                        1 => AcceptStat::ProgUnavail,
                        2 => AcceptStat::ProgMismatch {
                            low: get(&mut de)?,
                            high: get(&mut de)?,
                        },
                        3 => AcceptStat::ProcUnavail,
                        4 => AcceptStat::GarbageArgs,
                        5 => AcceptStat::SystemErr,
                        v => return Err(bad("accept_stat", v)),
                    };
                    ReplyBody::Accepted { verf, stat }
                }
                1 => ReplyBody::Denied(match get::<u32>(&mut de)? {
                    0 => RejectedReply::RpcMismatch {
                        low: get(&mut de)?,
                        high: get(&mut de)?,
                    },
                    1 => RejectedReply::AuthError(AuthStat::from_code(get(&mut de)?)),
                    v => return Err(bad("reject_stat", v)),
                }),
                v => return Err(bad("reply_stat", v)),
            }),
            v => return Err(bad("msg_type", v)),
        };
        Ok((RpcMsg { xid, body }, de.remaining()))
    }
}

fn bad(what: &str, value: u32) -> xdr::Error {
    xdr::Error::Message(format!("unknown {what} {value}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(msg: RpcMsg) -> Vec<u8> {
        let mut out = Vec::new();
        msg.encode(&mut out).unwrap();
        out.extend_from_slice(&[0xab; 4]);
        let (back, rest) = RpcMsg::decode(&out).unwrap();
        assert_eq!(back, msg);
        assert_eq!(rest, &[0xab; 4]);
        out.truncate(out.len() - 4);
        out
    }

    fn reply(stat: AcceptStat) -> RpcMsg {
        RpcMsg {
            xid: 7,
            body: MsgBody::Reply(ReplyBody::Accepted {
                verf: OpaqueAuth::none(),
                stat,
            }),
        }
    }

    #[test]
    fn call_header_layout() {
        let cred = OpaqueAuth::sys(&AuthSysParams {
            stamp: 1,
            machinename: "h".into(),
            uid: 2,
            gid: 3,
            gids: VarArray(vec![4]),
        })
        .unwrap();
        let bytes = roundtrip(RpcMsg {
            xid: 0x0102_0304,
            body: MsgBody::Call(CallBody {
                rpcvers: 2,
                prog: 100_000,
                vers: 2,
                procedure: 3,
                cred,
                verf: OpaqueAuth::none(),
            }),
        });
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|w| u32::from_be_bytes(w.try_into().unwrap()))
            .collect();
        // xid, CALL, rpcvers, prog, vers, proc, AUTH_SYS, body length 28,
        // stamp, "h" (len + padded word), uid, gid, 1 gid, gid 4, AUTH_NONE, 0.
        assert_eq!(
            words,
            [
                0x0102_0304,
                0,
                2,
                100_000,
                2,
                3,
                1,
                28,
                1,
                1,
                0x6800_0000,
                2,
                3,
                1,
                4,
                0,
                0
            ]
        );
    }

    #[test]
    fn every_reply_status_roundtrips() {
        assert_eq!(
            roundtrip(reply(AcceptStat::Success)),
            [0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        for stat in [
            AcceptStat::ProgUnavail,
            AcceptStat::ProgMismatch { low: 1, high: 3 },
            AcceptStat::ProcUnavail,
            AcceptStat::GarbageArgs,
            AcceptStat::SystemErr,
        ] {
            roundtrip(reply(stat));
        }
        for rejected in [
            RejectedReply::RpcMismatch { low: 2, high: 2 },
            RejectedReply::AuthError(AuthStat::TooWeak),
            RejectedReply::AuthError(AuthStat::Other(13)),
        ] {
            roundtrip(RpcMsg {
                xid: 1,
                body: MsgBody::Reply(ReplyBody::Denied(rejected)),
            });
        }
    }

    #[test]
    fn unknown_statuses_are_errors() {
        let mut bytes = Vec::new();
        reply(AcceptStat::SystemErr).encode(&mut bytes).unwrap();
        let n = bytes.len();
        bytes[n - 1] = 6;
        assert!(RpcMsg::decode(&bytes)
            .unwrap_err()
            .to_string()
            .contains("accept_stat 6"));
        assert!(RpcMsg::decode(&[0, 0, 0, 1, 0, 0, 0, 2]).is_err());
        for n in 0..bytes.len() {
            assert!(RpcMsg::decode(&bytes[..n]).is_err());
        }
    }

    proptest::proptest! {
        #[test]
        fn random_headers_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Ok((msg, rest)) = RpcMsg::decode(&bytes) {
                let mut again = Vec::new();
                msg.encode(&mut again).unwrap();
                again.extend_from_slice(rest);
                proptest::prop_assert_eq!(again, bytes);
            }
        }
    }
}
