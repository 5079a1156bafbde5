//! NX/2 message passing over VMMC.
