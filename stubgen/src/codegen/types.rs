//! Constants, typedefs, structs, enums and unions.

use std::collections::{HashMap, HashSet};

use proc_macro2::{Ident as RIdent, Literal, TokenStream};
use quote::{format_ident, quote};

use super::builtins::{builtin_struct, builtin_type};
use super::names::*;
use super::{Context, Disc, Num, TypeKind, MAX_CONST_DEPTH};
use crate::ast::*;
use crate::error::{Diagnostic, Error, Location, Result};

impl<'a> Context<'a> {
    pub(super) fn gen_const(&self, c: &ConstDef) -> Result<TokenStream> {
        let name = rust_ident(&c.name.name);
        let attrs = allow_upper(&c.name.name);
        Ok(match &c.value {
            ConstValue::Str(s) => quote! { #attrs pub const #name: &str = #s; },
            ConstValue::Value(v) => {
                let n = match self.resolve(v)? {
                    Num::Known(n) => n,
                    // Defined from a constant expected in scope: its type is unknown here,
                    // and every integer constant fits in an i64 once cast.
                    ext => {
                        let e = ext.tokens(quote!(i64));
                        return Ok(quote! { #attrs pub const #name: i64 = #e; });
                    }
                };
                let (ty, value) = typed_literal(n).ok_or_else(|| {
                    Error::at(
                        v.loc().clone(),
                        format!("constant {n} does not fit in 64 bits"),
                    )
                })?;
                quote! { #attrs pub const #name: #ty = #value; }
            }
        })
    }

    // ----- types -----

    /// The Rust type for an XDR type.
    pub(super) fn rust_ty(&self, ty: &Ty) -> Result<TokenStream> {
        Ok(match ty {
            Ty::Void => quote!(()),
            Ty::Int => quote!(i32),
            Ty::UInt => quote!(u32),
            Ty::Hyper => quote!(i64),
            Ty::UHyper => quote!(u64),
            Ty::Float => quote!(f32),
            Ty::Double => quote!(f64),
            Ty::Bool => quote!(bool),
            Ty::Quadruple => quote!(::rpc::xdr::Quadruple),
            Ty::Named(id) => {
                match self.types.get(id.name.as_str()) {
                    Some(_) => {}
                    None if self.consts.contains_key(id.name.as_str()) => {
                        return Err(Error::at(
                            id.loc.clone(),
                            format!("`{}` is a constant, not a type", id.name),
                        ))
                    }
                    None => {
                        if let Some(t) = builtin_type(&id.name) {
                            return self.rust_ty(&t);
                        }
                        if builtin_struct(&id.name).is_some() {
                            self.support.borrow_mut().insert(id.name.clone());
                            let t = type_ident(&id.name);
                            return Ok(quote!(#t));
                        }
                        if self.strict {
                            return Err(Error::at(
                                id.loc.clone(),
                                format!("unknown type `{}`", id.name),
                            ));
                        }
                        self.warnings.borrow_mut().push(Diagnostic {
                            location: id.loc.clone(),
                            message: format!(
                                "type `{}` is not defined here; the generated code expects it in scope",
                                id.name
                            ),
                            source_line: None,
                        });
                    }
                }
                let t = type_ident(&id.name);
                quote!(#t)
            }
            Ty::Optional(t) => {
                let t = self.rust_ty(t)?;
                quote!(::core::option::Option<::std::boxed::Box<#t>>)
            }
            Ty::FixedArray(t, n) => {
                let t = self.rust_ty(t)?;
                let n = self.size(n, quote!(usize))?;
                quote!(::rpc::xdr::FixedArray<#t, #n>)
            }
            Ty::VarArray(t, b) => {
                let t = self.rust_ty(t)?;
                let b = self.bound(b, quote!(u32))?;
                quote!(::rpc::xdr::VarArray<#t, #b>)
            }
            Ty::FixedOpaque(n) => {
                let n = self.size(n, quote!(usize))?;
                quote!(::rpc::xdr::FixedOpaque<#n>)
            }
            Ty::VarOpaque(b) => {
                let b = self.bound(b, quote!(u32))?;
                quote!(::rpc::xdr::Opaque<#b>)
            }
            Ty::String(b) => {
                let b = self.bound(b, quote!(u32))?;
                quote!(::rpc::xdr::XdrString<#b>)
            }
        })
    }

    pub(super) fn serde_derive() -> TokenStream {
        quote! {
            #[derive(Clone, Debug, PartialEq, ::rpc::serde::Serialize, ::rpc::serde::Deserialize)]
            #[serde(crate = "rpc::serde")]
        }
    }

    pub(super) fn gen_struct(&self, s: &StructDef) -> Result<TokenStream> {
        let name = type_ident(&s.name.name);
        let mut seen = HashMap::new();
        let mut fields = Vec::new();
        for f in &s.fields {
            let Some(fname) = &f.name else { continue };
            if let Some(prev) = seen.insert(fname.name.as_str(), &fname.loc) {
                return Err(Error::at(
                    fname.loc.clone(),
                    format!("field `{}` is already declared at {prev}", fname.name),
                ));
            }
            let fid = rust_ident(&fname.name);
            let ty = self.rust_ty(&f.ty)?;
            fields.push(quote!(pub #fid: #ty));
        }
        let derive = Self::serde_derive();
        let attrs = allow_type_name(&s.name.name, &[]);
        let field_names: Vec<&str> = s
            .fields
            .iter()
            .filter_map(|f| f.name.as_ref().map(|n| n.name.as_str()))
            .collect();
        let snake = allow_snake(&field_names);
        Ok(quote! {
            #derive
            #attrs
            #snake
            pub struct #name { #(#fields,)* }
        })
    }

    pub(super) fn gen_typedef(&self, t: &TypedefDef) -> Result<TokenStream> {
        let Some(name) = &t.decl.name else {
            return Ok(TokenStream::new());
        };
        if matches!(&t.decl.ty, Ty::Named(n) if n.name == name.name) {
            return Ok(TokenStream::new());
        }
        let id = type_ident(&name.name);
        let ty = self.rust_ty(&t.decl.ty)?;
        let attrs = allow_type_name(&name.name, &[]);
        Ok(quote! { #attrs pub type #id = #ty; })
    }

    pub(super) fn gen_enum(&self, e: &EnumDef) -> Result<TokenStream> {
        let name = type_ident(&e.name.name);
        let mut variants = Vec::new();
        let mut aliases = Vec::new();
        let mut arms = Vec::new();
        let mut by_value: HashMap<Num, RIdent> = HashMap::new();
        for (i, (vname, _)) in e.values.iter().enumerate() {
            let num = self.enum_value(e, i, 0)?;
            let v = rust_ident(&vname.name);
            if let Some(first) = by_value.get(&num) {
                // Rust enums cannot repeat a discriminant: a later name for the same value
                // becomes an associated constant.
                aliases.push(quote!(pub const #v: Self = Self::#first;));
                continue;
            }
            by_value.insert(num.clone(), v.clone());
            match num {
                Num::Known(n) => {
                    let n = i32::try_from(n).map_err(|_| {
                        Error::at(
                            vname.loc.clone(),
                            format!("enum value {n} does not fit in an int"),
                        )
                    })?;
                    let nl = Literal::i32_unsuffixed(n);
                    variants.push(quote!(#v = #nl));
                    let pat = Literal::i32_suffixed(n);
                    arms.push(quote!(#pat => ::core::result::Result::Ok(Self::#v)));
                }
                ext => {
                    // Counted from a constant expected in scope: Rust computes the value.
                    let e = ext.tokens(quote!(i32));
                    variants.push(quote!(#v = #e));
                    arms.push(
                        quote!(__x if __x == Self::#v as i32 => ::core::result::Result::Ok(Self::#v)),
                    );
                }
            }
        }
        let member_names: Vec<&str> = e.values.iter().map(|(n, _)| n.name.as_str()).collect();
        let attrs = allow_type_name(&e.name.name, &member_names);
        let alias_impl = if aliases.is_empty() {
            quote!()
        } else {
            quote! {
                #[allow(non_upper_case_globals)]
                impl #name { #(#aliases)* }
            }
        };
        let msg = format!("invalid value {{}} for enum {}", e.name.name);
        Ok(quote! {
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
            #[repr(i32)]
            #attrs
            pub enum #name { #(#variants,)* }
            #alias_impl
            impl ::rpc::serde::Serialize for #name {
                fn serialize<__S: ::rpc::serde::Serializer>(&self, __serializer: __S) -> ::core::result::Result<__S::Ok, __S::Error> {
                    __serializer.serialize_i32(*self as i32)
                }
            }
            impl<'de> ::rpc::serde::Deserialize<'de> for #name {
                fn deserialize<__D: ::rpc::serde::Deserializer<'de>>(__deserializer: __D) -> ::core::result::Result<Self, __D::Error> {
                    let __value = <i32 as ::rpc::serde::Deserialize>::deserialize(__deserializer)?;
                    match __value {
                        #(#arms,)*
                        __other => ::core::result::Result::Err(<__D::Error as ::rpc::serde::de::Error>::custom(format_args!(#msg, __other))),
                    }
                }
            }
        })
    }

    /// Follows typedefs from `ty` to a discriminant type.
    pub(super) fn disc_kind(&self, ty: &'a Ty, loc: &Location) -> Result<Disc<'a>> {
        let mut ty = ty;
        for _ in 0..MAX_CONST_DEPTH {
            match ty {
                Ty::Int => return Ok(Disc::Int),
                Ty::UInt => return Ok(Disc::UInt),
                Ty::Bool => return Ok(Disc::Bool),
                Ty::Named(id) => match self.types.get(id.name.as_str()) {
                    Some((TypeKind::Enum(e), _)) => return Ok(Disc::Enum(e)),
                    Some((TypeKind::Typedef(t), _)) => ty = t,
                    Some(_) => break,
                    None => match builtin_type(&id.name) {
                        Some(Ty::Int) => return Ok(Disc::Int),
                        Some(Ty::UInt) => return Ok(Disc::UInt),
                        Some(Ty::Bool) => return Ok(Disc::Bool),
                        _ => break,
                    },
                },
                _ => break,
            }
        }
        Err(Error::at(
            loc.clone(),
            "a union discriminant must be int, unsigned int, bool or an enum",
        ))
    }

    pub(super) fn gen_union(&self, u: &'a UnionDef) -> Result<TokenStream> {
        let name = type_ident(&u.name.name);
        let disc_loc = u.discriminant.name.as_ref().map_or(&u.name.loc, |n| &n.loc);
        let disc = self.disc_kind(&u.discriminant.ty, disc_loc)?;
        let disc_ty = self.rust_ty(&u.discriminant.ty)?;

        struct Case {
            variant: RIdent,
            /// The discriminant as an expression.
            disc: TokenStream,
            /// The match arm's pattern (with a guard for a constant expected in scope).
            pat: TokenStream,
            data: Option<TokenStream>,
        }
        let mut cases: Vec<Case> = Vec::new();
        let mut seen_values: HashMap<Num, &Location> = HashMap::new();
        let mut variant_names = HashSet::new();
        for arm in &u.arms {
            let data = match arm.decl.ty {
                Ty::Void => None,
                _ => Some(self.rust_ty(&arm.decl.ty)?),
            };
            for label in &arm.cases {
                let (value, disc_tokens, pat) = self.case_label(&disc, label)?;
                if let Some(prev) = seen_values.insert(value.clone(), label.loc()) {
                    return Err(Error::at(
                        label.loc().clone(),
                        format!("case value {value} is already used at {prev}"),
                    ));
                }
                let vname = match label {
                    Value::Name(id) => id.name.clone(),
                    Value::Number(n, _) if *n < 0 => format!("CaseNeg{}", n.unsigned_abs()),
                    Value::Number(n, _) => format!("Case{n}"),
                };
                if !variant_names.insert(vname.clone()) {
                    return Err(Error::at(
                        label.loc().clone(),
                        format!("case `{vname}` repeats"),
                    ));
                }
                cases.push(Case {
                    variant: rust_ident(&vname),
                    disc: disc_tokens,
                    pat,
                    data: data.clone(),
                });
            }
        }
        let mut default_name = "Default".to_string();
        while variant_names.contains(&default_name) {
            default_name.push('_');
        }
        let default_variant = format_ident!("{}", default_name);

        let mut variants = Vec::new();
        let mut ser_arms = Vec::new();
        let mut de_arms = Vec::new();
        for c in &cases {
            let v = &c.variant;
            let d = &c.disc;
            let p = &c.pat;
            match &c.data {
                Some(t) => {
                    variants.push(quote!(#v(#t)));
                    ser_arms.push(quote! {
                        Self::#v(__data) => {
                            let mut __t = __serializer.serialize_tuple(2)?;
                            __t.serialize_element(&#d)?;
                            __t.serialize_element(__data)?;
                            __t.end()
                        }
                    });
                    de_arms.push(quote! {
                        #p => {
                            let __data = __seq.next_element()?.ok_or_else(|| <__A::Error as ::rpc::serde::de::Error>::invalid_length(1, &self))?;
                            ::core::result::Result::Ok(#name::#v(__data))
                        }
                    });
                }
                None => {
                    variants.push(quote!(#v));
                    ser_arms.push(quote! {
                        Self::#v => {
                            let mut __t = __serializer.serialize_tuple(1)?;
                            __t.serialize_element(&#d)?;
                            __t.end()
                        }
                    });
                    de_arms.push(quote! {
                        #p => ::core::result::Result::Ok(#name::#v)
                    });
                }
            }
        }
        match &u.default {
            Some(decl) if decl.ty != Ty::Void => {
                let t = self.rust_ty(&decl.ty)?;
                variants.push(quote!(#default_variant(#disc_ty, #t)));
                ser_arms.push(quote! {
                    Self::#default_variant(__disc, __data) => {
                        let mut __t = __serializer.serialize_tuple(2)?;
                        __t.serialize_element(__disc)?;
                        __t.serialize_element(__data)?;
                        __t.end()
                    }
                });
                de_arms.push(quote! {
                    __other => {
                        let __data = __seq.next_element()?.ok_or_else(|| <__A::Error as ::rpc::serde::de::Error>::invalid_length(1, &self))?;
                        ::core::result::Result::Ok(#name::#default_variant(__other, __data))
                    }
                });
            }
            Some(_) => {
                variants.push(quote!(#default_variant(#disc_ty)));
                ser_arms.push(quote! {
                    Self::#default_variant(__disc) => {
                        let mut __t = __serializer.serialize_tuple(1)?;
                        __t.serialize_element(__disc)?;
                        __t.end()
                    }
                });
                de_arms.push(quote! {
                    __other => ::core::result::Result::Ok(#name::#default_variant(__other))
                });
            }
            None => {
                let msg = format!("invalid discriminant {{:?}} for union {}", u.name.name);
                de_arms.push(quote! {
                    __other => ::core::result::Result::Err(<__A::Error as ::rpc::serde::de::Error>::custom(format_args!(#msg, __other)))
                });
            }
        }
        let expecting = format!("union {}", u.name.name);
        let vnames: Vec<String> = cases.iter().map(|c| c.variant.to_string()).collect();
        let vrefs: Vec<&str> = vnames.iter().map(|s| s.trim_start_matches("r#")).collect();
        let attrs = allow_type_name(&u.name.name, &vrefs);
        Ok(quote! {
            #[derive(Clone, Debug, PartialEq)]
            #attrs
            pub enum #name { #(#variants,)* }
            impl ::rpc::serde::Serialize for #name {
                fn serialize<__S: ::rpc::serde::Serializer>(&self, __serializer: __S) -> ::core::result::Result<__S::Ok, __S::Error> {
                    use ::rpc::serde::ser::SerializeTuple as _;
                    match self { #(#ser_arms)* }
                }
            }
            impl<'de> ::rpc::serde::Deserialize<'de> for #name {
                fn deserialize<__D: ::rpc::serde::Deserializer<'de>>(__deserializer: __D) -> ::core::result::Result<Self, __D::Error> {
                    struct __Visitor;
                    impl<'de> ::rpc::serde::de::Visitor<'de> for __Visitor {
                        type Value = #name;
                        fn expecting(&self, __f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                            __f.write_str(#expecting)
                        }
                        #[allow(unreachable_patterns)]
                        fn visit_seq<__A: ::rpc::serde::de::SeqAccess<'de>>(self, mut __seq: __A) -> ::core::result::Result<#name, __A::Error> {
                            let __disc: #disc_ty = __seq.next_element()?.ok_or_else(|| <__A::Error as ::rpc::serde::de::Error>::invalid_length(0, &self))?;
                            match __disc { #(#de_arms,)* }
                        }
                    }
                    __deserializer.deserialize_tuple(2, __Visitor)
                }
            }
        })
    }

    /// A case label's value, its Rust expression and its match pattern.
    pub(super) fn case_label(
        &self,
        disc: &Disc<'_>,
        label: &Value,
    ) -> Result<(Num, TokenStream, TokenStream)> {
        let out_of_range = |n: i128, what: &str| {
            Error::at(
                label.loc().clone(),
                format!("case value {n} is not a valid {what}"),
            )
        };
        let num = self.resolve(label)?;
        let n = match num {
            Num::Known(n) => n,
            Num::External(..) => {
                // A constant expected in scope: compared at run time.
                let ty = match disc {
                    Disc::Int => quote!(i32),
                    Disc::UInt => quote!(u32),
                    Disc::Bool | Disc::Enum(_) => {
                        return Err(Error::at(
                            label.loc().clone(),
                            format!(
                            "case `{num}` must be known here: a bool or enum discriminant takes \
                             TRUE, FALSE or a member of the enum (define `{num}` in the input)"
                        ),
                        ))
                    }
                };
                let e = num.tokens(ty);
                return Ok((num, quote!((#e)), quote!(d if d == #e)));
            }
        };
        let (n, e) = match disc {
            Disc::Enum(e) => {
                let mut found = None;
                for (i, (member, _)) in e.values.iter().enumerate() {
                    if self.enum_value(e, i, 0)? == Num::Known(n) {
                        let ty = type_ident(&e.name.name);
                        let m = rust_ident(&member.name);
                        found = Some(quote!(#ty::#m));
                        break;
                    }
                }
                match found {
                    Some(t) => (n, t),
                    None => {
                        return Err(out_of_range(n, &format!("value of enum `{}`", e.name.name)))
                    }
                }
            }
            Disc::Bool => match n {
                0 => (0, quote!(false)),
                1 => (1, quote!(true)),
                n => return Err(out_of_range(n, "bool (TRUE or FALSE)")),
            },
            Disc::Int => {
                let v = i32::try_from(n).map_err(|_| out_of_range(n, "int"))?;
                let l = Literal::i32_suffixed(v);
                (n, quote!(#l))
            }
            Disc::UInt => {
                let v = u32::try_from(n).map_err(|_| out_of_range(n, "unsigned int"))?;
                let l = Literal::u32_suffixed(v);
                (n, quote!(#l))
            }
        };
        Ok((Num::Known(n), e.clone(), e))
    }
}

/// The Rust type and literal of a numeric constant.
fn typed_literal(n: i128) -> Option<(TokenStream, Literal)> {
    if let Ok(v) = u32::try_from(n) {
        Some((quote!(u32), Literal::u32_unsuffixed(v)))
    } else if let Ok(v) = i32::try_from(n) {
        Some((quote!(i32), Literal::i32_unsuffixed(v)))
    } else if let Ok(v) = u64::try_from(n) {
        Some((quote!(u64), Literal::u64_unsuffixed(v)))
    } else if let Ok(v) = i64::try_from(n) {
        Some((quote!(i64), Literal::i64_unsuffixed(v)))
    } else {
        None
    }
}
