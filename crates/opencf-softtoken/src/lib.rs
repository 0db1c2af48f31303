//! `libopencf_softtoken.so`: the software token of `opencf-softtoken-core` exported as a
//! PKCS#11 module (`C_GetInterface`, `C_GetFunctionList` and every `C_*` function, generated
//! by `opencf_abi::pkcs11_module!`).
//!
//! Applications may load this module on its own; `libopencf.so` names it in its default
//! configuration and, when it is the copy installed beside itself, runs the same code linked
//! into itself instead (docs/METASLOT.md, "The software token linked in").

#![deny(unsafe_code)]

opencf_abi::pkcs11_module!(opencf_softtoken_core::SoftToken);
