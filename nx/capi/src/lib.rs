//! The C ABI of NX/2: libnx.so and include/nx.h.
