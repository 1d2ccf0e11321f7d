//! The plugin author's toolchain inside the one binary, so a C or Go author
//! needs only their compiler and `kubewasm`: [`componentize`] turns the core
//! module their compiler writes into a plugin component (the WIT world's
//! type and the WASI preview1 adapter, both built in).

pub mod componentize;

pub use componentize::{Adapter, ComponentizeError, Componentized, Options, componentize};
