//! XDR (RFC 4506) as a serde data format and the ONC RPC v2 runtime (RFC 5531).
