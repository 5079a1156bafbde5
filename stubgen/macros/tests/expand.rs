//! The macros expand to the same stubs as the command: srpc's test interface, and a .x file.

mod every {
    stubgen_macros::srpc!("../../srpc/tests/every.idl");
}

#[allow(dead_code, non_camel_case_types, clippy::all)]
mod vecho {
    stubgen_macros::rpcgen!("../../rpc/tests/vrpc_gen/vecho.x");
}

#[test]
fn the_interface_file_expands_to_its_stubs() {
    // The same layout as the output of `stubgen srpc every.idl`.
    let names: Vec<&str> = every::EVERY_PROCEDURES.iter().map(|p| p.1).collect();
    assert_eq!(names.first(), Some(&"null"));
    assert_eq!(names.len(), 11);
    let code = stubgen::idl::generate_file(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../srpc/tests/every.idl"
    )))
    .unwrap();
    assert!(code.contains(&format!("request: {},", every::EVERY_LAYOUT.request)));
    // The generated client and server types exist and fit together.
    fn _typed(ep: &srpc::Endpoint) -> Result<every::EveryClient, srpc::Error> {
        every::EveryClient::bind(ep, 0, srpc::Mode::Du)
    }
}

#[test]
fn the_x_file_expands_to_its_program() {
    assert_eq!(vecho::VECHO_PROG, 0x2000_5b01);
}
