#[allow(non_camel_case_types)]
pub type blob = ::rpc::xdr::Opaque<4294967295>;
#[derive(Clone, Debug, PartialEq, ::rpc::serde::Serialize, ::rpc::serde::Deserialize)]
#[serde(crate = "rpc::serde")]
#[allow(non_camel_case_types)]
pub struct pair {
    pub a: i32,
    pub b: i32,
}
#[derive(Clone, Debug, PartialEq, ::rpc::serde::Serialize, ::rpc::serde::Deserialize)]
#[serde(crate = "rpc::serde")]
#[allow(non_camel_case_types)]
pub struct node {
    pub name: ::rpc::xdr::XdrString<64>,
    pub next: ::core::option::Option<::std::boxed::Box<node>>,
}
pub const VECHO_PROG: u32 = 536894209;
pub const VECHO_V1: u32 = 1;
pub const ECHO: u32 = 1;
pub const ADD: u32 = 2;
pub const SWAP: u32 = 3;
pub const CONCAT: u32 = 4;
pub const REVERSE: u32 = 5;
pub const SET_VALUE: u32 = 6;
pub const GET_VALUE: u32 = 7;
/// Client of program `VECHO_PROG` (536894209) version `VECHO_V1` (1).
pub struct VechoV1Client<__C: ::rpc::client::Call> {
    /// The underlying RPC client.
    pub inner: __C,
}
#[allow(non_snake_case, clippy::too_many_arguments)]
impl<__C: ::rpc::client::Call> VechoV1Client<__C> {
    /// The program number.
    pub const PROGRAM: u32 = 536894209;
    /// The version number.
    pub const VERSION: u32 = 1;
    /// Wraps an RPC client.
    pub fn new(inner: __C) -> Self {
        Self { inner }
    }
    /// Returns the underlying RPC client.
    pub fn into_inner(self) -> __C {
        self.inner
    }
    /// Procedure `ECHO` (1).
    pub fn echo(&mut self, arg: &blob) -> ::core::result::Result<blob, ::rpc::Error> {
        ::rpc::client::Call::call(&mut self.inner, 536894209, 1, 1, arg)
    }
    /// Procedure `ADD` (2).
    pub fn add(
        &mut self,
        arg1: &i32,
        arg2: &i32,
    ) -> ::core::result::Result<i32, ::rpc::Error> {
        ::rpc::client::Call::call(&mut self.inner, 536894209, 1, 2, &(arg1, arg2))
    }
    /// Procedure `SWAP` (3).
    pub fn swap(&mut self, arg: &pair) -> ::core::result::Result<pair, ::rpc::Error> {
        ::rpc::client::Call::call(&mut self.inner, 536894209, 1, 3, arg)
    }
    /// Procedure `CONCAT` (4).
    pub fn concat(
        &mut self,
        arg1: &::rpc::xdr::XdrString<4294967295>,
        arg2: &::rpc::xdr::XdrString<4294967295>,
    ) -> ::core::result::Result<::rpc::xdr::XdrString<4294967295>, ::rpc::Error> {
        ::rpc::client::Call::call(&mut self.inner, 536894209, 1, 4, &(arg1, arg2))
    }
    /// Procedure `REVERSE` (5).
    pub fn reverse(
        &mut self,
        arg: &::core::option::Option<::std::boxed::Box<node>>,
    ) -> ::core::result::Result<
        ::core::option::Option<::std::boxed::Box<node>>,
        ::rpc::Error,
    > {
        ::rpc::client::Call::call(&mut self.inner, 536894209, 1, 5, arg)
    }
    /// Procedure `SET_VALUE` (6).
    pub fn set_value(&mut self, arg: &i64) -> ::core::result::Result<(), ::rpc::Error> {
        ::rpc::client::Call::call(&mut self.inner, 536894209, 1, 6, arg)
    }
    /// Procedure `GET_VALUE` (7).
    pub fn get_value(&mut self) -> ::core::result::Result<i64, ::rpc::Error> {
        ::rpc::client::Call::call(&mut self.inner, 536894209, 1, 7, &())
    }
}
/// Server side of program `VECHO_PROG` (536894209) version `VECHO_V1` (1): one method per procedure.
#[allow(non_snake_case, clippy::too_many_arguments)]
pub trait VechoV1Server: ::core::marker::Send + ::core::marker::Sync + 'static {
    /// Procedure `ECHO` (1).
    fn echo(&self, arg: blob) -> blob;
    /// Procedure `ADD` (2).
    fn add(&self, arg1: i32, arg2: i32) -> i32;
    /// Procedure `SWAP` (3).
    fn swap(&self, arg: pair) -> pair;
    /// Procedure `CONCAT` (4).
    fn concat(
        &self,
        arg1: ::rpc::xdr::XdrString<4294967295>,
        arg2: ::rpc::xdr::XdrString<4294967295>,
    ) -> ::rpc::xdr::XdrString<4294967295>;
    /// Procedure `REVERSE` (5).
    fn reverse(
        &self,
        arg: ::core::option::Option<::std::boxed::Box<node>>,
    ) -> ::core::option::Option<::std::boxed::Box<node>>;
    /// Procedure `SET_VALUE` (6).
    fn set_value(&self, arg: i64);
    /// Procedure `GET_VALUE` (7).
    fn get_value(&self) -> i64;
}
/// Dispatches calls of program `VECHO_PROG` version `VECHO_V1` to a [`VechoV1Server`].
pub struct VechoV1Service<__S>(pub __S);
#[allow(non_snake_case, clippy::too_many_arguments)]
impl<__S: VechoV1Server> ::rpc::server::Service for VechoV1Service<__S> {
    fn program(&self) -> u32 {
        536894209
    }
    fn version(&self) -> u32 {
        1
    }
    fn dispatch(
        &self,
        __procedure: u32,
        __args: &[u8],
        __reply: &mut ::std::vec::Vec<u8>,
    ) -> ::core::result::Result<(), ::rpc::server::DispatchError> {
        let _ = (&__args, &__reply);
        match __procedure {
            1 => {
                let (arg, _): (blob, _) = ::rpc::xdr::take_from_bytes(__args)
                    .map_err(|_| ::rpc::server::DispatchError::GarbageArgs)?;
                let __result: blob = self.0.echo(arg);
                let __start = __reply.len();
                ::rpc::xdr::to_writer(&mut *__reply, &__result)
                    .map_err(|_| ::rpc::server::DispatchError::SystemErr)?;
                ::rpc::xdr::drop_with_stack_for(__result, __reply.len() - __start);
                ::core::result::Result::Ok(())
            }
            2 => {
                let ((arg1, arg2), _): ((i32, i32), _) = ::rpc::xdr::take_from_bytes(
                        __args,
                    )
                    .map_err(|_| ::rpc::server::DispatchError::GarbageArgs)?;
                let __result: i32 = self.0.add(arg1, arg2);
                let __start = __reply.len();
                ::rpc::xdr::to_writer(&mut *__reply, &__result)
                    .map_err(|_| ::rpc::server::DispatchError::SystemErr)?;
                ::rpc::xdr::drop_with_stack_for(__result, __reply.len() - __start);
                ::core::result::Result::Ok(())
            }
            3 => {
                let (arg, _): (pair, _) = ::rpc::xdr::take_from_bytes(__args)
                    .map_err(|_| ::rpc::server::DispatchError::GarbageArgs)?;
                let __result: pair = self.0.swap(arg);
                let __start = __reply.len();
                ::rpc::xdr::to_writer(&mut *__reply, &__result)
                    .map_err(|_| ::rpc::server::DispatchError::SystemErr)?;
                ::rpc::xdr::drop_with_stack_for(__result, __reply.len() - __start);
                ::core::result::Result::Ok(())
            }
            4 => {
                let (
                    (arg1, arg2),
                    _,
                ): (
                    (
                        ::rpc::xdr::XdrString<4294967295>,
                        ::rpc::xdr::XdrString<4294967295>,
                    ),
                    _,
                ) = ::rpc::xdr::take_from_bytes(__args)
                    .map_err(|_| ::rpc::server::DispatchError::GarbageArgs)?;
                let __result: ::rpc::xdr::XdrString<4294967295> = self
                    .0
                    .concat(arg1, arg2);
                let __start = __reply.len();
                ::rpc::xdr::to_writer(&mut *__reply, &__result)
                    .map_err(|_| ::rpc::server::DispatchError::SystemErr)?;
                ::rpc::xdr::drop_with_stack_for(__result, __reply.len() - __start);
                ::core::result::Result::Ok(())
            }
            5 => {
                let (arg, _): (::core::option::Option<::std::boxed::Box<node>>, _) = ::rpc::xdr::take_from_bytes(
                        __args,
                    )
                    .map_err(|_| ::rpc::server::DispatchError::GarbageArgs)?;
                let __result: ::core::option::Option<::std::boxed::Box<node>> = self
                    .0
                    .reverse(arg);
                let __start = __reply.len();
                ::rpc::xdr::to_writer(&mut *__reply, &__result)
                    .map_err(|_| ::rpc::server::DispatchError::SystemErr)?;
                ::rpc::xdr::drop_with_stack_for(__result, __reply.len() - __start);
                ::core::result::Result::Ok(())
            }
            6 => {
                let (arg, _): (i64, _) = ::rpc::xdr::take_from_bytes(__args)
                    .map_err(|_| ::rpc::server::DispatchError::GarbageArgs)?;
                self.0.set_value(arg);
                ::core::result::Result::Ok(())
            }
            7 => {
                let __result: i64 = self.0.get_value();
                let __start = __reply.len();
                ::rpc::xdr::to_writer(&mut *__reply, &__result)
                    .map_err(|_| ::rpc::server::DispatchError::SystemErr)?;
                ::rpc::xdr::drop_with_stack_for(__result, __reply.len() - __start);
                ::core::result::Result::Ok(())
            }
            0 => ::core::result::Result::Ok(()),
            _ => ::core::result::Result::Err(::rpc::server::DispatchError::ProcUnavail),
        }
    }
}
/// Serves every version of program `VECHO_PROG` on TCP and UDP (ephemeral ports on all addresses) and registers each version on both with the local rpcbind, as rpcgen's generated server does: whatever rpcbind had for these versions (say, from a server that was killed) is removed first (`pmap_unset`), then each is registered. Shutting the server down (or dropping it) unregisters them.
#[allow(non_snake_case, clippy::too_many_arguments)]
pub fn serve_vecho_prog(
    __vecho_v1: impl VechoV1Server,
) -> ::core::result::Result<::rpc::server::Server, ::rpc::Error> {
    ::rpc::server::Server::builder()
        .service(VechoV1Service(__vecho_v1))
        .listen_tcp(::std::net::SocketAddr::from(([0, 0, 0, 0], 0)))
        .listen_udp(::std::net::SocketAddr::from(([0, 0, 0, 0], 0)))
        .register(true)
        .replace_registrations(true)
        .start()
}
